"""Overview: the decision of the stage that needs attention, why (each reason linked to its
evidence), the gates, canary against baseline, and the worst findings."""

import functools
from datetime import datetime

import streamlit as st

from replaygate.api import Decision, Status, display_value, escape
from replaygate.dashboard import data, fmt, ui

ctx = ui.bootstrap()
st.title("Rollout decision")
all_doc = data.gates_doc(ctx.stamp, None, True)
if not all_doc["stages"]:
    st.info(
        "No rollout log ingested: there are no stages to gate. Findings are still listed "
        "on the Findings page."
    )
    st.stop()
by_name = {s["stage"]: s for s in all_doc["stages"]}
names = list(by_name)


def needs_attention() -> str:
    """The open stage, else the latest stage whose decision is not PROCEED, else the latest."""
    open_ = [s["stage"] for s in all_doc["stages"] if s["window"]["open"]]
    if open_:
        return open_[-1]
    not_proceed = [s["stage"] for s in all_doc["stages"] if s["decision"] != Decision.PROCEED]
    return (not_proceed or names)[-1]


name = ctx.filters.stage or needs_attention()
stage = by_name[name]
window = stage["window"]
ui.decision_banner(
    stage["decision"],
    name,
    f"{stage['scope']} · {fmt.when(window['start'])} → "
    + (fmt.when(window["end"]) if window["end"] else "open")
    + f" · decided by this stage's {len(stage['gates'])} gates",
)
st.caption(
    f"The same evaluation as `{fmt.code(data.gates_command(name))}`"
    + ("" if ctx.filters.stage else " · no stage selected: showing the stage that needs attention")
)
ignored = [d for d in ctx.filters.active() if d != "stage"]
if ignored:
    st.caption(
        f"The decision and its gates are for the whole stage; the {', '.join(ignored)} "
        "filter applies to the canary comparison and the findings below."
    )

# The stage before: was it rolled back, and was the rollback verified?
i = names.index(name)
previous = all_doc["stages"][i - 1] if i > 0 else None
for rb in all_doc.get("rollback_verification", []):
    if previous is not None and rb["stage"] == previous["stage"]:
        ui.rollback_box(*fmt.rollback_note(rb, name, stage["decision"]))
        st.page_link(
            "views/rollout.py",
            label="Rollback verification on the Rollout page ›",
            query_params=ctx.query(),
        )

fresh = ui.freshness_summary(ctx.stamp)
if fresh["stale"] and fresh["newest"] is not None:
    st.warning(
        f"Stale data: the newest record is from {fmt.when(fresh['newest'])} "
        f"({fmt.ago(fresh['newest'])}).",
        icon=":material/schedule:",
    )

failing = [g for g in stage["gates"] if g["status"] == Status.FAIL]
short = [g for g in stage["gates"] if g["status"] == Status.INSUFFICIENT]
if failing or short:
    st.subheader("Why")
for g in failing:
    ui.evidence_link(
        ctx, g["reason"], g["evidence"]["detectors"], name, icon=":material/cancel:", color="red"
    )
if short:
    st.markdown("**Not enough data yet** (no failure, the sample is short):")
for g in short:
    ui.evidence_link(
        ctx,
        g["reason"],
        g["evidence"]["detectors"],
        name,
        icon=":material/hourglass_empty:",
        color="orange",
    )

st.subheader("Gates")
cols = st.columns(5)
for j, gate in enumerate(stage["gates"]):
    ui.gate_tile(cols[j % 5], gate, ctx, name)

st.subheader("Canary against baseline")
if name in ctx.windows:
    start, end = ctx.windows[name]
else:
    # A live ingest added the stage after the sidebar read the windows: take the window from
    # the same evaluation as the decision (UTC, naive like the stored timestamps).
    start, end = (
        None if v is None else datetime.fromisoformat(v).replace(tzinfo=None)
        for v in (window["start"], window["end"])
    )
flt = ctx.filters.with_(stage=name)
canary = data.gate_measures(ctx.stamp, flt, stage["scope"])
base = data.gate_measures(ctx.stamp, flt.with_(stage=None, baseline=True, start=start, end=end))
ui.table(
    [
        {
            "gate": fmt.gate_title(c["id"]),
            "canary (stage cohort)": display_value(c),
            "canary sample": fmt.count(c["sample"]),
            "baseline (no cohort, same window)": display_value(b),
            "baseline sample": fmt.count(b["sample"]),
        }
        for c, b in zip(canary, base, strict=True)
    ],
    hide_index=True,
    key="overview_canary",
    width="stretch",
)
st.caption(
    "Is it the new version or the time of day? Baseline: sessions outside every cohort in the "
    "stage's window, measured the same way."
)

st.subheader("Findings in this stage")
summary = data.finding_summary(ctx.stamp, flt)
ui.summary_table(summary, key="overview_summary")
worst = data.findings(ctx.stamp, flt)
ui.findings_table(worst.head(15), key="overview_findings", ctx=ctx, height=300)
if len(worst) > 15:
    st.page_link(
        "views/findings.py",
        label=f"All {fmt.count(len(worst))} findings of this stage ›",
        query_params=ctx.query(stage=name),
    )

st.subheader("Audit report")
report_cols = st.columns(3)
for col, (f, label, mime) in zip(
    report_cols,
    [
        ("html", "HTML", "text/html"),
        ("md", "Markdown", "text/markdown"),
        ("json", "JSON", "application/json"),
    ],
    strict=True,
):
    # Made when clicked, not on every run of the page: three reports cost more than the
    # rest of the overview together, and opening the dashboard needs none of them.
    col.download_button(
        f"Download {label}",
        functools.partial(data.report, ctx.stamp, name, f),
        escape.safe_file_name(f"replaygate-{name}", f),
        mime,
        key=f"report_{f}",
        on_click="ignore",
    )
