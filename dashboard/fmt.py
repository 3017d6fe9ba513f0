"""Human formatting for the dashboard, as plain functions (tested without Streamlit).

Separators, human units for bytes and durations, bounds as percentages, gate titles,
a finding's detail as `key: value`, blanks for nulls, and text made inert for Markdown.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

from replaygate.api import GATES, Status, escape, title

# Gate titles come from the gates' SQL headers (queries/gates.py): one vocabulary.
GATE_TITLES = {g.id: g.title for g in GATES}
STATUS_WORDS = {
    Status.PASS: "pass",
    Status.FAIL: "FAIL",
    Status.INSUFFICIENT: "not enough data",
    Status.NOT_APPLICABLE: "not applicable",
}
BASELINE = "baseline (no cohort)"
OUTSIDE = "outside every stage"


def md_text(value) -> str:
    """Any text as inert Markdown for Streamlit (queries/escape.py: one rule for all)."""
    return escape.md_text(value, streamlit=True)


def code(value) -> str:
    """Text for inside a Markdown code span (where escapes are literal): no backticks."""
    return escape.one_line(value).replace("`", "'")


def gate_title(gate_id: str) -> str:
    return title(gate_id)


def blank(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and math.isnan(value):
        return ""
    try:
        import pandas as pd

        if value is pd.NaT or (not isinstance(value, (list, dict, str)) and pd.isna(value)):
            return ""
    except (TypeError, ValueError):
        pass
    return str(value)


def _null(x) -> bool:
    if x is None:
        return True
    try:
        import pandas as pd

        return bool(pd.isna(x))
    except (TypeError, ValueError):
        return False


def count(n) -> str:
    """An integer with thousands separators; blank for null."""
    if _null(n):
        return ""
    return f"{int(n):,}"


def number(x, digits: int = 2) -> str:
    if _null(x):
        return ""
    if float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def nbytes(n) -> str:
    if _null(n):
        return ""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:,.1f} TiB"


def duration(seconds) -> str:
    """Seconds as people say them: 850 ms, 3.6 s, 4 min 10 s, 2 h 5 min, 3.2 days."""
    if _null(seconds):
        return ""
    s = float(seconds)
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        m, sec = divmod(round(s), 60)
        return f"{m} min {sec} s" if sec else f"{m} min"
    if s < 48 * 3600:
        h, rest = divmod(round(s / 60), 60)
        return f"{h} h {rest} min" if rest else f"{h} h"
    return f"{s / 86400:.1f} days"


def percent_bound(p) -> str:
    """An upper bound on a rate as a percentage: 'below 0.46 %'."""
    if p is None:
        return ""
    pct = p * 100
    if pct >= 10:
        return f"below {pct:.0f} %"
    if pct >= 1:
        return f"below {pct:.1f} %"
    return f"below {pct:.2g} %"


def sample(gate: dict) -> str:
    n, need = gate.get("sample") or 0, gate.get("min_sample") or 0
    if need and n < need:
        return f"sample {n:,} of {need:,} needed"
    if need:
        return f"sample {n:,} (enough: {need:,} needed)"
    return f"sample {n:,}"


def detail(value) -> str:
    """A finding's JSON detail as `key: value; key: value`."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    if not isinstance(value, dict):
        return blank(value)
    parts = []
    for k, v in value.items():
        if v is None:
            continue
        if isinstance(v, list):
            v = ", ".join(blank(x) for x in v)
        elif isinstance(v, float):
            v = number(v)
        parts.append(f"{k.replace('_', ' ')}: {v}")
    return "; ".join(parts)


def stage_label(stage, baseline) -> str:
    """A finding's stage; a row outside every stage says which kind it is."""
    if isinstance(stage, str) and stage:
        return stage
    return BASELINE if baseline is True else OUTSIDE


def ago(ts: datetime | None, now: datetime | None = None) -> str:
    if ts is None:
        return ""
    now = now or datetime.now(UTC)
    delta = now - ts
    if delta < timedelta(0):
        return "in the future"
    return duration(delta.total_seconds()) + " ago"


def when(ts) -> str:
    """A timestamp as UTC text, to the second."""
    if ts is None or blank(ts) == "":
        return ""
    if isinstance(ts, str):
        return ts.replace("T", " ").replace(".000Z", "Z").replace("Z", " UTC")
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


# What each hygiene check found, in the words of the rollback verification.
HYGIENE_CHECKS = {
    "rollback_resumable_new_stream": (
        "stream opened after the rollback still resumed",
        "streams opened after the rollback still resumed",
    ),
    "rollback_cursor_dropped": ("older stream's cursor dropped", "older streams' cursors dropped"),
    "rollback_post_storm": (
        "re-sent POST instead of a resume",
        "re-sent POSTs instead of a resume",
    ),
}


def rollback_note(rb: dict, stage: str, decision: str) -> tuple[bool, str, str]:
    """The previous stage's rollback verification as it stands next to another stage's
    decision: (verified, headline, what it means for that decision). The decision is
    that stage's own gates; the rollback's hygiene is the rolled-back stage's, and the
    text says so, so that a PROCEED above a failed hygiene check is never read as a
    contradiction or as a pass of the check."""
    when_ = when(rb["rollback_at"])
    if rb["verified"]:
        return (
            True,
            f"Previous stage {rb['stage']} was rolled back at {when_}: hygiene verified.",
            "Streams opened after the rollback did not resume and older ones recovered.",
        )
    found = [
        f"{count(n)} {HYGIENE_CHECKS.get(d, (d, d))[0 if n == 1 else 1]}"
        for d, n in rb["checks"].items()
        if n
    ]
    what = "; ".join(found)
    if rb["status"] == "not verifiable":
        # (a document without `unverifiable` is of an analysis before it: no stream records)
        why = rb.get("unverifiable") or "no stream records in its hygiene window"
        undecided = any((rb.get("cannot_tell") or {}).values())
        what = why if undecided else f"{why}, so nothing could be checked"
    return (
        False,
        f"Previous stage {rb['stage']}: rollback at {when_} {rb['status']} ({what}).",
        f"This does not change the decision above: {decision} is stage {stage}'s own "
        f"gates. The hygiene checks belong to {rb['stage']}'s rollback: clients of the "
        "rolled-back version may still be affected; review the rollback verification "
        f"before promoting {stage} further.",
    )
