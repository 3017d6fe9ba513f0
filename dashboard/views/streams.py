"""Streams & replay: gaps, truncations, cross-stream acceptances, cursors, recovery."""

import streamlit as st

from replaygate.dashboard import data, figures, ui

page = ui.gate_page(
    "streams",
    "Streams & replay",
    "Replay measures apply to resumable sessions; 2026-07-28 traffic has no "
    "resumption and is judged on the Dispatch page.",
)
ctx, f, counts = page.ctx, page.ctx.filters, page.counts
actions = data.rollout_actions(ctx.stamp)
cols = page.tiles(2)
ui.count_metric(cols[0], "Replay gaps", counts, ("replay_gap",), ctx)
ui.count_metric(
    cols[1],
    "Cursor problems",
    counts,
    ("cursor_misrouted", "cursor_rejected", "replay_after_ack"),
    ctx,
)
bucket, bucket_name = ui.bucket(ctx)
st.plotly_chart(
    figures.findings_over_time(
        data.findings_over_time(ctx.stamp, f, page.detectors, bucket),
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
page.findings_section()
