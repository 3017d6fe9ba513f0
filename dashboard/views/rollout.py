"""Rollout: stage timeline, gates per stage side by side, rollback verification."""

import streamlit as st

from replaygate.api import Status
from replaygate.dashboard import data, figures, fmt, history, ui

ctx = ui.bootstrap()
st.title("Rollout")
stages = data.stages(ctx.stamp)
actions = data.rollout_actions(ctx.stamp)
all_doc = data.gates_doc(ctx.stamp, None, True)
data_end = ctx.options["span"][1]
ignored = [d for d in ctx.filters.active() if d != "stage"]
if ignored:
    st.caption(
        f"Decisions and gates are per whole stage: the {', '.join(ignored)} filter does not "
        "apply on this page."
    )
st.plotly_chart(figures.stage_timeline(stages, actions, data_end), key="rollout_timeline")
shown = [s for s in all_doc["stages"] if ctx.filters.stage in (None, s["stage"])]
st.plotly_chart(figures.gate_matrix(shown, fmt.GATE_TITLES), key="rollout_gates")
st.subheader("Decisions")
for s in shown:
    with st.container(border=True):
        ui.decision_banner(s["decision"], s["stage"], s["scope"] or "")
        for g in s["gates"]:
            if g["status"] in (Status.FAIL, Status.INSUFFICIENT):
                ui.evidence_link(
                    ctx,
                    g["reason"],
                    g["evidence"]["detectors"],
                    s["stage"],
                    icon=":material/cancel:"
                    if g["status"] == Status.FAIL
                    else ":material/hourglass_empty:",
                )
st.subheader("Rollback verification")
checks = all_doc.get("rollback_verification", [])
if not checks:
    st.info("No rollback in the rollout log.")
for rb in checks:
    ui.status_box(
        rb["verified"],
        f"{rb['stage']} rolled back at {fmt.when(rb['rollback_at'])}: "
        + ("hygiene verified" if rb["verified"] else f"hygiene {rb['status']}"),
    )
    c = st.columns(3)
    c[0].metric(
        "New streams resumed after the rollback",
        fmt.count(rb["new_streams_resumed"]),
        help=f"of {rb['new_streams_in_window']:,} opened in the hygiene window",
    )
    c[1].metric(
        "Cursors dropped for live sessions", fmt.count(rb["checks"]["rollback_cursor_dropped"])
    )
    c[2].metric(
        "Old streams re-POSTed instead of resumed", fmt.count(rb["checks"]["rollback_post_storm"])
    )
    ui.evidence_link(
        ctx,
        "Rollback findings ›",
        list(rb["checks"]),
        None,
        icon=":material/search:",
    )
st.subheader("Actions")
view = actions.copy()
view["note"] = view["note"].map(fmt.blank)
view["percent"] = view["percent"].map(lambda p: "" if fmt.blank(p) == "" else f"{p:g} %")
view["scope"] = view["scope"].map(fmt.blank)
ui.table(
    view,
    hide_index=True,
    key="rollout_actions",
    width="stretch",
    column_config={"ts": st.column_config.DatetimeColumn("time (UTC)", format="MM-DD HH:mm")},
)
history.section(data.store().path, ctx.filters.stage)
