"""Sessions & proxy: 404 handling, Origins, auth binding, reconnect load, status codes."""

import streamlit as st

from replaygate.dashboard import data, figures, ui

page = ui.gate_page("sessions", "Sessions & proxy")
ctx, f = page.ctx, page.ctx.filters
page.tiles()
actions = data.rollout_actions(ctx.stamp)
bucket, bucket_name = ui.bucket(ctx)
st.plotly_chart(
    figures.reconnect_qps(
        data.reconnects(ctx.stamp, f), data.store().config.reconnect_budget_qps, actions
    ),
    key="sessions_reconnects",
)
st.plotly_chart(
    figures.series_by(
        data.proxy_status(ctx.stamp, f, bucket),
        "class",
        "HTTP status classes over time",
        actions,
        y="proxy requests",
        colors=figures.STATUS_CLASS_COLORS,
        bucket=bucket_name,
    ),
    key="sessions_status",
)
page.findings_section()
