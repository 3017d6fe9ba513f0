"""Streams & replay: gaps, truncations, cross-stream acceptances, cursors, recovery."""

import streamlit as st

from replaygate.dashboard import data, figures, ui

DETECTORS = (
    "replay_gap",
    "silent_truncation",
    "dropped_terminal",
    "cross_stream_acceptance",
    "duplicate_delivery_accepted",
    "cursor_misrouted",
    "cursor_rejected",
    "replay_after_ack",
    "priming_lost",
    "slow_recovery",
    "unrecovered_stream",
    "retry_not_honored",
)

ctx = ui.bootstrap()
st.title("Streams & replay")
st.caption(
    "Replay measures apply to resumable sessions; 2026-07-28 traffic has no "
    "resumption and is judged on the Dispatch page."
)
actions = data.rollout_actions(ctx.stamp)
found = data.findings(ctx.stamp, ctx.filters, DETECTORS)
counts = found.groupby("detector").size().to_dict() if not found.empty else {}
cols = st.columns(4)
for col, (label, dets) in zip(
    cols,
    [
        ("silent truncations", ("silent_truncation", "dropped_terminal")),
        ("replay gaps", ("replay_gap",)),
        ("cross-stream acceptances", ("cross_stream_acceptance",)),
        ("cursor problems", ("cursor_misrouted", "cursor_rejected", "replay_after_ack")),
    ],
    strict=True,
):
    col.metric(label, sum(counts.get(d, 0) for d in dets))
st.plotly_chart(
    figures.findings_over_time(
        data.findings_over_time(ctx.stamp, ctx.filters, DETECTORS),
        actions,
        "Stream findings over time",
    ),
    key="streams_over_time",
)
left, right = st.columns(2)
with left:
    st.plotly_chart(
        figures.recovery_histogram(
            data.recoveries(ctx.stamp, ctx.filters), data.store().config.recovery_threshold_s
        ),
        key="streams_recovery",
    )
with right:
    st.plotly_chart(
        figures.series_by(
            data.resumes_over_time(ctx.stamp, ctx.filters),
            "state",
            "Disconnects and resumes",
            actions,
        ),
        key="streams_resumes",
    )
st.subheader("Findings")
ui.findings_table(found, key="streams_findings")
