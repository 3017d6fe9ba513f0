"""Timestamps as replaygate prints them: RFC 3339 UTC with milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime


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
