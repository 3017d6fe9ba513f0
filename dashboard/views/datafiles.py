"""Data: freshness, ingested files, row counts, quarantine, detector coverage."""

import streamlit as st

from replaygate.api import sources
from replaygate.dashboard import data, fmt, tables, ui

ctx = ui.bootstrap()
st.title("Data")
if ctx.filters.active():
    st.caption("This page describes the whole database: the filters do not apply here.")
d = data.data_overview(ctx.stamp)
st.subheader("Freshness")
fresh = ui.freshness_summary(ctx.stamp)
fr = fresh["by_source"].copy()
ui.table(
    {
        "source": fr["source"],
        "newest record": fr["newest"].map(fmt.when),
        "age": fr["newest"].map(
            lambda t: fmt.ago(None if fmt.blank(t) == "" else t.to_pydatetime())
        ),
        "records": fr["records"].map(fmt.count),
    },
    hide_index=True,
    key="data_freshness",
    width="stretch",
)
if fresh["stale"]:
    st.warning(
        f"Stale: nothing newer than {fmt.when(fresh['newest'])} "
        f"(older than {fmt.duration(ui.STALE_AFTER.total_seconds())})."
    )
st.subheader("Record types")
ui.table(
    tables.record_types(d["status"]["tables"]), hide_index=True, key="data_tables", width="stretch"
)
st.subheader("Files")
ui.table(tables.files(d["files"]), hide_index=True, key="data_files", width="stretch")
q = d["status"]["quarantine"]
st.subheader(f"Quarantine: {q['rows']:,} rows")
if q["rows"]:
    ui.table(tables.quarantine_reasons(q["top_reasons"]), hide_index=True, key="data_reasons")
    ui.table(
        tables.quarantine(d["quarantine"]), hide_index=True, key="data_quarantine", width="stretch"
    )
else:
    st.success("Every row met the contract.")
st.subheader("Detector coverage")
ui.table(tables.coverage(d["coverage"]), hide_index=True, key="data_coverage", width="stretch")
if len(d["cannot_tell"]):
    st.subheader("Cannot tell")
    st.caption(
        "Units whose verdict needs a fact the file cannot show: neither findings nor passes."
    )
    ui.table(
        tables.cannot_tell(d["cannot_tell"]),
        hide_index=True,
        key="data_cannot_tell",
        width="stretch",
    )
st.subheader("What each set of sources can show")
st.caption(
    "Which detectors run with proxy logs alone, with the recorder's ledgers and event log "
    "plus proxy logs, and what client inbox receipts add (docs/sources.md)."
)
yes = {True: "yes", False: ""}
matrix = sources.matrix()
ui.table(
    {
        "detector": [r["detector"] for r in matrix],
        "proxy logs alone": [yes[r["proxy_only"]] for r in matrix],
        "recorder + proxy logs": [yes[r["server_side"]] for r in matrix],
        "what client receipts add": [r["client_adds"] for r in matrix],
    },
    hide_index=True,
    key="data_sources_matrix",
    width="stretch",
)
