"""Overview: the current stage's decision at a glance, why, and the worst findings."""

import streamlit as st

from replaygate.dashboard import data, ui

ctx = ui.bootstrap()
doc = data.gates_doc(ctx.stamp, ctx.filters.stage)
st.title("Rollout decision")
if not doc["stages"]:
    st.info(
        "No rollout log ingested: there are no stages to gate. Findings are still listed "
        "on the Findings page."
    )
    st.stop()
stage = doc["stages"][0]
ui.decision_badge(stage["decision"], stage["stage"])
st.caption(
    f"scope {stage['scope']} · window {stage['window']['start']} → "
    f"{stage['window']['end'] or 'open'} · the same evaluation as "
    f"`replaygate gates --stage {stage['stage']}`"
)
if stage["reasons"]:
    st.subheader("Why")
    for reason in stage["reasons"]:
        st.markdown(f"- {reason}")
st.subheader("Gates")
cols = st.columns(5)
for i, gate in enumerate(stage["gates"]):
    ui.gate_tile(cols[i % 5], gate)
st.subheader("Most severe findings in this stage")
worst = data.findings(ctx.stamp, ctx.filters.with_(stage=stage["stage"]))
ui.findings_table(worst.head(15), key="overview_findings", height=300)
st.subheader("Audit report")
cols = st.columns(3)
for col, (fmt, label, mime) in zip(
    cols,
    [
        ("html", "HTML", "text/html"),
        ("md", "Markdown", "text/markdown"),
        ("json", "JSON", "application/json"),
    ],
    strict=True,
):
    col.download_button(
        f"Download {label}",
        data.report(ctx.stamp, stage["stage"], fmt),
        f"replaygate-{stage['stage']}.{fmt}",
        mime,
        key=f"report_{fmt}",
    )
