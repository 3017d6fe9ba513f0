"""Findings: every finding, filterable, downloadable as CSV or Parquet."""

import io

import streamlit as st

from replaygate.dashboard import data, ui
from replaygate.queries import catalog

ctx = ui.bootstrap()
st.title("Findings")
detectors = st.multiselect("Detectors", sorted(catalog.detectors()), key="findings_detectors")
severities = st.multiselect(
    "Severity", ["critical", "high", "medium", "low"], key="findings_severity"
)
df = data.findings(ctx.stamp, ctx.filters, tuple(detectors))
if severities:
    df = df[df["severity"].isin(severities)]
st.caption(f"{len(df):,} findings")
ui.findings_table(df, key="findings_table", height=520)
left, right = st.columns(2)
left.download_button(
    "Download CSV", df.to_csv(index=False).encode(), "findings.csv", "text/csv", key="findings_csv"
)
buf = io.BytesIO()
df.to_parquet(buf, index=False)
right.download_button(
    "Download Parquet",
    buf.getvalue(),
    "findings.parquet",
    "application/octet-stream",
    key="findings_parquet",
)
