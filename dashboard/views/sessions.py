"""Sessions & proxy: 404 handling, Origins, auth binding, reconnect load, status codes."""

import streamlit as st

from replaygate.dashboard import data, figures, ui
from replaygate.queries.api import detectors_for, gates_for

DETECTORS = detectors_for("sessions")

ctx = ui.bootstrap()
st.title("Sessions & proxy")
f = ctx.filters
scope = ui.stage_scope(ctx)
gates = {g["id"]: g for g in data.gate_measures(ctx.stamp, f, scope)}
found = data.findings(ctx.stamp, f, DETECTORS)
shown = gates_for("sessions")
for col, gate_id in zip(st.columns(len(shown)), shown, strict=True):
    ui.gate_metric(col, gates[gate_id], ctx)
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
ui.findings_section(ctx, f, DETECTORS, found, "sessions")
