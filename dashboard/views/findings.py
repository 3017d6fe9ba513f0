"""Findings: every finding, filterable, downloadable as CSV or Parquet."""

import functools

import streamlit as st

from replaygate import api
from replaygate.api import Severity
from replaygate.dashboard import data, fmt, ui

ctx = ui.bootstrap()
st.title("Findings")
known = api.detector_names()
wanted = [d for d in st.query_params.get("det", "").split(",") if d in known]
detectors = st.multiselect("Detectors", known, default=wanted, key="findings_detectors")
if ",".join(detectors) != st.query_params.get("det", ""):
    if detectors:
        st.query_params["det"] = ",".join(detectors)
    else:
        st.query_params.pop("det", None)
severities = st.multiselect("Severity", [str(s) for s in Severity], key="findings_severity")
df = data.findings_of_severity(ctx.stamp, ctx.filters, tuple(detectors), tuple(severities))
where = fmt.md_text(ctx.filters.stage) if ctx.filters.stage else "all stages"
st.caption(f"{fmt.count(len(df))} findings · {where}")
ui.summary_table(
    data.finding_summary(ctx.stamp, ctx.filters, tuple(detectors)), key="findings_summary"
)
ui.findings_table(df, key="findings_table", ctx=ctx, height=520)
# The files are made when a button is clicked, not on every run of the page.
args = (ctx.stamp, ctx.filters, tuple(detectors), tuple(severities))
# (format, label, MIME type): one button each, side by side
FILES = (("csv", "CSV", "text/csv"), ("parquet", "Parquet", "application/octet-stream"))
for column, (ext, label, mime) in zip(st.columns(len(FILES)), FILES, strict=True):
    column.download_button(
        f"Download {label}",
        functools.partial(data.findings_file, *args, ext),
        f"findings.{ext}",
        mime,
        key=f"findings_{ext}",
        on_click="ignore",
    )
