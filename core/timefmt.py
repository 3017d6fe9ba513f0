"""Timestamps as replaygate prints them (RFC 3339 UTC with milliseconds) and as it reads
them from a command line, a configuration or a record (`parse`).

RFC 3339 allows a lowercase `t` and `z` and a leap second (`23:59:60`), and forbids an
hour of 24 and an offset of 24 hours or more. The reading of records in SQL
(ingest/validate.py `ts_sql`) follows the same rules; tests hold the two together. A
leap second is read as the last millisecond of its minute: the instant does not exist
in POSIX time, and this keeps it in its minute and its day.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

# What DuckDB's cast and Python's fromisoformat accept and RFC 3339 forbids: an offset of
# 24 hours or more, or of 60 minutes or more (an hour of 24 is checked by position in SQL
# and refused by fromisoformat). One pattern for both readers.
OUT_OF_RANGE = r"[Tt ]\d\d:\d\d[^+-]*[+-](?:(?:2[4-9]|[3-9]\d)(?::?\d\d)?|\d\d:?[6-9]\d)\s*$"
_LEAP = re.compile(r"(:59:)60(?:\.\d*)?(?=$|[Zz+-])")


def iso_ms(ts: object) -> str | None:
    """A stored timestamp as `2026-11-29T07:45:01.123Z`; None stays None.

    DuckDB hands over values outside Python's datetime range (and ±infinity) as text;
    those are returned as DuckDB wrote them rather than failing the caller.
    """
    if ts is None:
        return None
    if isinstance(ts, datetime):
        if ts.tzinfo is not None:
            ts = ts.astimezone(UTC)
        return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"
    return str(ts)


def parse(text: str) -> datetime:
    """An RFC 3339 time (ISO 8601 forms Python reads too; no offset: naive). Raises
    ValueError for anything else, an hour of 24 and an offset of 24 hours included."""
    t = text.strip()
    if re.search(OUT_OF_RANGE, t):
        raise ValueError(f"offset out of range: {text!r}")
    if "t" in t or "z" in t:
        t = t.upper()  # only T and Z are letters of a timestamp
    t = _LEAP.sub(r"\g<1>59.999", t, count=1)
    return datetime.fromisoformat(t[:-1] + "+00:00" if t.endswith("Z") else t)
