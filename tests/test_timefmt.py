"""Timestamp formatting copes with every value DuckDB can hand over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import duckdb

from replaygate.ingest.timefmt import iso_ms


def test_formats_utc_with_milliseconds():
    ts = datetime(2026, 11, 29, 7, 45, 1, 123456, tzinfo=UTC)
    assert iso_ms(ts) == "2026-11-29T07:45:01.123Z"
    other = ts.astimezone(timezone(timedelta(hours=2)))
    assert iso_ms(other) == "2026-11-29T07:45:01.123Z"
    assert iso_ms(None) is None


def test_values_outside_pythons_range_do_not_fail():
    con = duckdb.connect()
    for literal in ("infinity", "-infinity", "294000-01-01 00:00:00+00"):
        value = con.execute(f"SELECT '{literal}'::TIMESTAMPTZ").fetchone()[0]
        assert isinstance(iso_ms(value), str)
