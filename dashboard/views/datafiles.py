"""Data: ingested files, row counts, time spans, quarantine, detector coverage."""

import streamlit as st

from replaygate.dashboard import data, ui

ctx = ui.bootstrap()
st.title("Data")
d = data.data_overview(ctx.stamp)
st.subheader("Record types")
st.dataframe(d["status"]["tables"], hide_index=True, key="data_tables", width="stretch")
st.subheader("Files")
st.dataframe(d["files"], hide_index=True, key="data_files", width="stretch")
q = d["status"]["quarantine"]
st.subheader(f"Quarantine: {q['rows']:,} rows")
if q["rows"]:
    st.dataframe(q["top_reasons"], hide_index=True, key="data_reasons")
    st.dataframe(d["quarantine"], hide_index=True, key="data_quarantine", width="stretch")
else:
    st.success("Every row met the contract.")
st.subheader("Detector coverage")
st.dataframe(d["coverage"], hide_index=True, key="data_coverage", width="stretch")
