"""Timestamp formatting copes with every value DuckDB can hand over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import duckdb

from replaygate.core.timefmt import iso_ms


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


# RFC 3339 section 5.6: a lowercase t and z, a leap second; forbidden: hour 24, an offset
# of 24 hours or more or of 60 minutes or more.
VALID = {
    "2026-11-28T23:59:60Z": datetime(2026, 11, 28, 23, 59, 59, 999000, tzinfo=UTC),
    "2026-12-31T23:59:60.5Z": datetime(2026, 12, 31, 23, 59, 59, 999000, tzinfo=UTC),
    "2026-11-28t10:00:00z": datetime(2026, 11, 28, 10, tzinfo=UTC),
    "2026-11-28t10:00:00Z": datetime(2026, 11, 28, 10, tzinfo=UTC),
    "2026-11-28T10:00:00.250z": datetime(2026, 11, 28, 10, 0, 0, 250000, tzinfo=UTC),
    "2026-11-28T10:00:00+05:30": datetime(2026, 11, 28, 4, 30, tzinfo=UTC),
    "2026-11-28T10:00:00-23:59": datetime(2026, 11, 29, 9, 59, tzinfo=UTC),
    "2026-11-28T23:59:60+01:00": datetime(2026, 11, 28, 22, 59, 59, 999000, tzinfo=UTC),
    "2026-11-28T10:00:00Z": datetime(2026, 11, 28, 10, tzinfo=UTC),
}
INVALID = [
    "2026-11-28T24:00:00Z",
    "2026-11-28T24:00:00+00:00",
    "2026-11-28T10:00:00+25:00",
    "2026-11-28T10:00:00-24:00",
    "2026-11-28T10:00:00+05:60",
    "2026-11-28T10:00:60Z",  # a leap second is only ever the 60th of minute 59
    "2026-02-30T10:00:00Z",
]


def test_rfc3339_edge_forms_read_alike_in_python_and_in_sql():
    from replaygate.core.timefmt import parse
    from replaygate.ingest.validate import ts_sql

    con = duckdb.connect()
    for text, want in VALID.items():
        assert parse(text).astimezone(UTC) == want, text
        (got,) = con.execute(f"SELECT {ts_sql('$v')}", {"v": text}).fetchone()
        assert got == want, text
    for text in INVALID:
        try:
            parse(text)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{text} was read")
        (got,) = con.execute(f"SELECT {ts_sql('$v')}", {"v": text}).fetchone()
        assert got is None, (text, got)


def test_rfc3339_edge_forms_on_the_command_line_and_in_records(tmp_path):
    import json

    from . import hostile
    from .conftest import run_cli as run

    log = tmp_path / "rollout.jsonl"
    r = run("rollout", "start", "--release", "r", "--stage", "s", "--at",
            "2026-11-28t10:00:00z", "--to", log)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for bad in ("2026-11-28T24:00:00Z", "2026-11-28T10:00:00+25:00"):
        r = run("rollout", "hold", "--release", "r", "--stage", "s", "--at", bad, "--to", log)
        assert r.returncode == 1 and "RFC 3339" in r.stderr, r.stderr
    sessions = tmp_path / "sessions.jsonl"
    recs = [
        hostile.session_record(ts)
        for ts in ("2026-11-28T23:59:60Z", "2026-11-28T24:00:00Z", "2026-11-28T10:00:00+25:00")
    ]
    sessions.write_text("".join(json.dumps(r) + "\n" for r in recs))
    r = run("ingest", sessions, "--db", tmp_path / "x.duckdb", "--json")
    doc = json.loads(r.stdout)
    f = doc["files"][0]
    assert (f["rows"], f["quarantined"]) == ({"sessions": 1}, 2), f


def test_a_timestamp_is_truncated_to_its_millisecond_as_date_trunc_does():
    """validate.ms_sql skips ICU's date_trunc for a value already on a millisecond: the
    same value as date_trunc for every timestamp, before and after 1970, at the ends of
    the range, infinite and NULL; and the checked rows of text with microseconds hold
    their millisecond (checked_sql truncates the parsed column)."""
    from replaygate.core.contract import BY_TABLE
    from replaygate.ingest.validate import checked_sql, ms_sql

    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.execute(
        """CREATE TABLE w AS
           SELECT TIMESTAMPTZ '1969-12-31 23:59:59+00' + to_microseconds(x * 250) AS t
           FROM range(-20000, 20000) r(x)
           UNION ALL SELECT unnest([TIMESTAMPTZ '0001-01-01 00:00:00.123456+00',
                                    TIMESTAMPTZ '9999-12-31 23:59:59.999999+00',
                                    TIMESTAMPTZ '2026-11-28 10:00:00.250001+00',
                                    'infinity'::TIMESTAMPTZ, '-infinity'::TIMESTAMPTZ, NULL])"""
    )
    differ, aligned, not_aligned = con.execute(
        f"""SELECT count(*) FILTER (WHERE {ms_sql("t")} IS DISTINCT FROM
                                          date_trunc('millisecond', t)),
                   count(*) FILTER (WHERE epoch_us(t) % 1000 = 0),
                   count(*) FILTER (WHERE epoch_us(t) % 1000 <> 0)
            FROM w"""
    ).fetchone()
    assert differ == 0
    assert aligned > 100 and not_aligned > 100  # both branches taken, before 1970 too
    rt = BY_TABLE["sessions"]
    texts = {f"f_{f.name}": "NULL" for f in rt.fields}
    texts |= {
        "f_ts": "'2026-11-28T10:00:00.123999Z'",
        "f_created_at": "'1960-01-01T00:00:00.0009Z'",
    }
    rows = ", ".join(f"{v} AS {k}" for k, v in texts.items())
    ts, created = con.execute(
        f"SELECT t_ts, t_created_at FROM ({checked_sql(rt, f'(SELECT {rows})')})"
    ).fetchone()
    assert ts == datetime(2026, 11, 28, 10, 0, 0, 123000, tzinfo=UTC)
    assert created == datetime(1960, 1, 1, 0, 0, 0, 0, tzinfo=UTC)
