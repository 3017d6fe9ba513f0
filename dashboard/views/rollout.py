"""Rollout: stage timeline, gates per stage side by side, cohorts, rollback verification."""

import streamlit as st

from replaygate.dashboard import data, figures, ui

ctx = ui.bootstrap()
st.title("Rollout")
stages = data.stages(ctx.stamp)
actions = data.rollout_actions(ctx.stamp)
all_doc = data.gates_doc(ctx.stamp, None, True)
data_end = ctx.options["span"][1]
st.plotly_chart(figures.stage_timeline(stages, actions, data_end), key="rollout_timeline")
st.plotly_chart(figures.gate_matrix(all_doc["stages"]), key="rollout_gates")
left, right = st.columns(2)
with left:
    st.subheader("Decisions")
    st.dataframe(
        [
            {
                "stage": s["stage"],
                "scope": s["scope"],
                "decision": s["decision"],
                "reasons": "; ".join(s["reasons"]),
            }
            for s in all_doc["stages"]
        ],
        hide_index=True,
        key="rollout_decisions",
        width="stretch",
    )
with right:
    st.subheader("Rollback verification")
    checks = all_doc.get("rollback_verification", [])
    if not checks:
        st.info("No rollback in the rollout log.")
    for rb in checks:
        ui.status_box(
            rb["verified"],
            f"{rb['stage']} rolled back at {rb['rollback_at']}: "
            + ("hygiene verified" if rb["verified"] else f"hygiene {rb['status']}"),
        )
        st.markdown(
            f"- new streams resumed after the rollback: **{rb['new_streams_resumed']}** of "
            f"{rb['new_streams_in_window']} opened in the window\n"
            f"- cursors dropped for live sessions: "
            f"**{rb['checks']['rollback_cursor_dropped']}**\n"
            f"- old streams re-POSTed instead of resumed: "
            f"**{rb['checks']['rollback_post_storm']}**"
        )
st.subheader("Actions")
st.dataframe(actions, hide_index=True, key="rollout_actions", width="stretch")
