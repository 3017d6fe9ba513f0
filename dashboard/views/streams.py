"""Streams & replay: gaps, truncations, cross-stream acceptances, cursors, recovery."""

import streamlit as st

from replaygate.dashboard import data, figures, ui
from replaygate.queries.api import detectors_for, gates_for

DETECTORS = detectors_for("streams")

ctx = ui.bootstrap()
st.title("Streams & replay")
st.caption(
    "Replay measures apply to resumable sessions; 2026-07-28 traffic has no "
    "resumption and is judged on the Dispatch page."
)
f = ctx.filters
actions = data.rollout_actions(ctx.stamp)
scope = ui.stage_scope(ctx)
gates = {g["id"]: g for g in data.gate_measures(ctx.stamp, f, scope)}
found = data.findings(ctx.stamp, f, DETECTORS)
counts = found.groupby("detector").size().to_dict() if not found.empty else {}
shown = gates_for("streams")
cols = st.columns(len(shown) + 2)
for col, gate_id in zip(cols, shown, strict=False):
    ui.gate_metric(col, gates[gate_id], ctx)
ui.count_metric(cols[len(shown)], "Replay gaps", counts, ("replay_gap",), ctx)
ui.count_metric(
    cols[len(shown) + 1],
    "Cursor problems",
    counts,
    ("cursor_misrouted", "cursor_rejected", "replay_after_ack"),
    ctx,
)
bucket, bucket_name = ui.bucket(ctx)
st.plotly_chart(
    figures.findings_over_time(
        data.findings_over_time(ctx.stamp, f, DETECTORS, bucket),
        actions,
        "Stream findings over time",
        bucket_name,
    ),
    key="streams_over_time",
)
st.plotly_chart(
    figures.recovery_histogram(
        data.recoveries(ctx.stamp, f), data.store().config.recovery_threshold_s
    ),
    key="streams_recovery",
)
# The page's width, not half of it: the rollout's labels need the room above the plot.
st.plotly_chart(
    figures.series_by(
        data.resumes_over_time(ctx.stamp, f, bucket),
        "state",
        "Disconnects and resumes",
        actions,
        y="stream ledger rows",
        colors=figures.STATE_COLORS,
        bucket=bucket_name,
    ),
    key="streams_resumes",
)
ui.findings_section(ctx, f, DETECTORS, found, "streams")
