"""The decision history on the dashboard: when each stage's recorded decision changed,
what operators did, and the decision in force at a chosen time (audit/decisionlog.py).

Read from the history file beside the database on every run (it is small, and appends
do not change the data version the other caches are keyed on). Operator-typed text is
shown in data frames only, as text.
"""

from __future__ import annotations

import datetime as dt

import pandas as pd
import streamlit as st

from replaygate.api import decisionlog

from . import fmt, ui


def section(db_path: str, stage: str | None) -> None:
    st.subheader("Decision history")
    path = decisionlog.file_for_db(db_path)
    try:
        decisionlog.checked_for_db(db_path)
    except decisionlog.HistoryBroken as exc:
        # Nothing of a broken history is shown as if it held.
        st.error(f"The decision history does not verify: {fmt.md_text(exc)}")
        return
    entries = decisionlog.timeline(path, stage)
    if not entries:
        st.info(
            "No decision recorded yet: `replaygate gates --record` and `replaygate watch` "
            "record them, `replaygate ack` / `override` record what operators did."
        )
        return
    frame = pd.DataFrame(
        {
            "recorded (UTC)": [e["recorded_at"] for e in entries],
            "stage": [e["stage"] for e in entries],
            "event": [
                f"evaluation ({e['source']})" if e["kind"] == "evaluation" else e["kind"]
                for e in entries
            ],
            "decision": [
                (f"{e['previous']} → " if e.get("previous") else "") + e["decision"]
                if e["kind"] == "evaluation"
                else f"{e['in_force']} → {e['decision']}"
                if e["kind"] == "override"
                else f"{e['decision']} acknowledged"
                for e in entries
            ],
            "by": [e.get("actor") or "" for e in entries],
            "why": [e.get("note") or "" for e in entries],
            "data version": [e.get("data_version") or "" for e in entries],
            "until": [e.get("until") or "" for e in entries],
        }
    )
    ui.table(frame, hide_index=True, key="decision_history", width="stretch")
    first = decisionlog.parse_time(entries[0]["recorded_at"])
    cols = st.columns(2)
    day = cols[0].date_input("Decision in force on (UTC)", value=dt.datetime.now(dt.UTC).date())
    clock = cols[1].time_input("at", value=dt.time(23, 59), step=60)
    at = dt.datetime.combine(day, clock, tzinfo=dt.UTC) + dt.timedelta(seconds=59)
    stages = sorted({e["stage"] for e in entries if e["kind"] == "evaluation"})
    found = [(s, decisionlog.in_force(path, s, at=at)) for s in stages]
    ui.table(
        pd.DataFrame(
            {
                "stage": [s for s, _ in found],
                "in force": [r["decision"] if r else "nothing recorded yet" for _, r in found],
                "recorded (UTC)": [r["recorded_at"] if r else "" for _, r in found],
                "data version": [r["data_version"] if r else "" for _, r in found],
                "reasons": ["; ".join(r["reasons"] or []) if r else "" for _, r in found],
            }
        ),
        hide_index=True,
        key="decision_in_force",
        width="stretch",
    )
    if at < first:
        st.caption(f"The first decision was recorded at {fmt.md_text(entries[0]['recorded_at'])}.")
