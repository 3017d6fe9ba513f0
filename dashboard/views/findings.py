"""Findings: every finding, filterable, downloadable as CSV or Parquet."""

import io

import streamlit as st

from replaygate.dashboard import data, fmt, ui
from replaygate.queries import catalog, escape

ctx = ui.bootstrap()
st.title("Findings")
known = sorted(catalog.detectors())
wanted = [d for d in st.query_params.get("det", "").split(",") if d in known]
detectors = st.multiselect("Detectors", known, default=wanted, key="findings_detectors")
if ",".join(detectors) != st.query_params.get("det", ""):
    if detectors:
        st.query_params["det"] = ",".join(detectors)
    else:
        st.query_params.pop("det", None)
severities = st.multiselect(
    "Severity", ["critical", "high", "medium", "low"], key="findings_severity"
)
df = data.findings(ctx.stamp, ctx.filters, tuple(detectors))
if severities:
    df = df[df["severity"].isin(severities)]
where = ctx.filters.stage or "all stages"
st.caption(f"{fmt.count(len(df))} findings · {where}")
ui.summary_table(
    data.finding_summary(ctx.stamp, ctx.filters, tuple(detectors)), key="findings_summary"
)
ui.findings_table(df, key="findings_table", ctx=ctx, height=520)
left, right = st.columns(2)
left.download_button(
    "Download CSV", escape.csv_bytes(df), "findings.csv", "text/csv", key="findings_csv"
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
