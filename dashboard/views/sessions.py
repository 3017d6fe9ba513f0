"""Sessions & proxy: 404 handling, Origins, auth binding, reconnect load, status codes."""

import streamlit as st

from replaygate.dashboard import data, figures, ui

DETECTORS = (
    "reinit_missing",
    "invalid_origin_accepted",
    "session_after_terminal",
    "auth_subject_mismatch",
    "delete_fabricated",
    "state_violation",
    "missing_protocol_version",
    "raw_session_id_logged",
    "obsolete_resume",
    "reconnect_storm",
)

ctx = ui.bootstrap()
st.title("Sessions & proxy")
found = data.findings(ctx.stamp, ctx.filters, DETECTORS)
checks = data.http_checks(ctx.stamp)
n = found.groupby("detector").size().to_dict() if not found.empty else {}
cols = st.columns(4)
cols[0].metric(
    "404 → re-initialize",
    f"{checks['n404'] - n.get('reinit_missing', 0)} of {checks['n404']}",
    help="404s on a session followed by a new initialize",
)
cols[1].metric(
    "invalid Origins refused",
    f"{checks['invalid_origin'] - checks['invalid_origin_served']} of {checks['invalid_origin']}",
)
cols[2].metric(
    "auth-binding violations",
    n.get("auth_subject_mismatch", 0) + n.get("session_after_terminal", 0),
)
cols[3].metric(
    "raw session ids in logs",
    n.get("raw_session_id_logged", 0),
    help="files that carried a raw Mcp-Session-Id (hashed on ingest)",
)
actions = data.rollout_actions(ctx.stamp)
st.plotly_chart(
    figures.reconnect_qps(
        data.reconnects(ctx.stamp, ctx.filters), data.store().config.reconnect_budget_qps, actions
    ),
    key="sessions_reconnects",
)
st.plotly_chart(
    figures.series_by(
        data.proxy_status(ctx.stamp, ctx.filters), "class", "HTTP status classes over time", actions
    ),
    key="sessions_status",
)
st.subheader("Findings")
ui.findings_table(found, key="sessions_findings")
