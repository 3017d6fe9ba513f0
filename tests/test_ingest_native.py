"""Parquet columns already of their field's type are loaded without the round trip
through text (ingest/validate.py, `native`): every value loads, or is quarantined for
the same reason, exactly as through text — the edges of each type included."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest import readers
from replaygate.ingest.load import ingest

UTC = dt.UTC
H = "a" * 64
N = 2**53

# Timestamps: sub-millisecond, the first and last plain years and beyond them, NULL.
TIMES = [
    dt.datetime(2026, 11, 29, 7, 45, 1, 123456, tzinfo=UTC),
    dt.datetime(2026, 11, 29, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(1, 1, 1, tzinfo=UTC),
    dt.datetime(999, 12, 31, 23, 59, 59, tzinfo=UTC),
    dt.datetime(1000, 1, 1, tzinfo=UTC),
    dt.datetime(9998, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    dt.datetime(9999, 1, 1, tzinfo=UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC),
    dt.datetime(1970, 1, 1, tzinfo=UTC),
    None,
]
# Integers: where a DOUBLE stops holding them exactly, the ends of BIGINT, NULL.
INTS = [0, 1, -1, N, N + 1, -N, -N - 1, 2**63 - 1, -(2**63), None]
# Doubles: shortest forms, subnormals, the largest, signed zero, not finite, NULL.
FLOATS = [0.1 + 0.2, -0.0, 5e-324, 1e-320, 1.7976931348623157e308, math.nan, math.inf, -math.inf]
FLOATS += [123.456, None]
BOOLS = [True, False, None, True, False, None, True, False, None, True]


def _us(t: dt.datetime | None) -> int | None:
    return None if t is None else (t - dt.datetime(1970, 1, 1, tzinfo=UTC)) // dt.timedelta(0, 0, 1)


# Beyond what a datetime holds: years of five digits, and before the common era.
YEAR_19969 = 567_996_000_000_000_000  # microseconds since 1970
BEFORE_ONE = -70_000_000_000_000_000  # the year 250 BC


def _events(path: Path) -> None:
    n = len(TIMES)
    stamps = [_us(t) for t in TIMES[:-2]] + [YEAR_19969, BEFORE_ONE]
    pq.write_table(
        pa.table(
            {
                "ts": pa.array(stamps, pa.timestamp("us", tz="UTC")),
                "session_hmac": [H] * n,
                "generation": pa.array(INTS, pa.int64()),
                "stream_id": ["s"] * n,
                "event_id": [f"e{i}" for i in range(n)],
                "seq": pa.array(list(reversed(INTS)), pa.int64()),
                "kind": ["message"] * n,
                "disposition": ["sent"] * n,
                "cumulative": pa.array(BOOLS, pa.bool_()),
                "buffer_depth": pa.array([3] * (n - 1) + [None], pa.int32()),
            }
        ),
        path,
    )


def _proxy(path: Path) -> None:
    n = len(FLOATS)
    pq.write_table(
        pa.table(
            {
                "ts": pa.array(TIMES, pa.timestamp("ms", tz="UTC")),
                "method": ["POST"] * n,
                "status": pa.array(INTS, pa.int64()),
                "path": ["/mcp"] * n,
                "duration_ms": pa.array(FLOATS, pa.float64()),
                "session_hmac": [H] * n,
            }
        ),
        path,
    )


def _rollout(path: Path) -> None:
    # percent is bounded (0 to 100): the bound is judged on the typed value either way.
    pcts = [0.0, 100.0, 100.0000001, -0.0, -1e-9, 50.5, math.nan, None, 25.0, 1e308]
    pq.write_table(
        pa.table(
            {
                # nanoseconds, within the years they reach
                "ts": pa.array(
                    [1795938301123456789 + i * 999 for i in range(len(pcts) - 1)] + [None],
                    pa.timestamp("ns", tz="UTC"),
                ),
                "stage": ["s1"] * len(pcts),
                "action": ["start"] * len(pcts),
                "percent": pa.array(pcts, pa.float64()),
            }
        ),
        path,
    )


def _load(folder: Path, db: Path) -> dict[str, list[tuple]]:
    con = dbm.connect(str(db))
    try:
        ingest(con, [folder], Config(ts_bounds={"min": None, "max": None}))
        out = {}
        for t in ("events", "proxy", "rollout"):
            out[t] = con.execute(f"SELECT * EXCLUDE (file_id) FROM {t} ORDER BY pos").fetchall()
        out["quarantine"] = con.execute(
            'SELECT path, line, "row", record_type, reason FROM quarantine ORDER BY path, "row"'
        ).fetchall()
        return out
    finally:
        con.close()


def test_native_columns_load_as_their_text_would(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    _events(folder / "events.parquet")
    _proxy(folder / "proxy.parquet")
    _rollout(folder / "rollout.parquet")

    seen: list[frozenset[str]] = []
    build = readers.parquet_sql

    def spy(r: readers.Reading) -> str:
        sql = build(r)
        seen.append(r.native)
        return sql

    monkeypatch.setitem(readers.FORMATS, "parquet", _with_build(spy))
    native = _load(folder, tmp_path / "native.duckdb")
    # The native path was taken for every typed column of every file.
    assert {"ts", "generation", "seq", "cumulative", "buffer_depth"} <= seen[0] | seen[1]
    assert any("duration_ms" in s for s in seen) and any("percent" in s for s in seen)

    monkeypatch.setattr(readers, "can_be_native", lambda f, t: False)
    text = _load(folder, tmp_path / "text.duckdb")

    assert repr(native) == repr(text)
    # Not vacuous: both loaded rows and refused some, for several reasons.
    assert all(native[t] for t in ("events", "proxy", "rollout"))
    assert len({r[4] for r in native["quarantine"]}) >= 4


def _with_build(build):
    import dataclasses

    return dataclasses.replace(readers.FORMATS["parquet"], build=build)


@pytest.mark.parametrize("duckdb_type", ["TIMESTAMP", "FLOAT", "HUGEINT", "VARCHAR"])
def test_other_types_are_read_as_text(duckdb_type):
    from replaygate.core.contract import BY_TABLE
    from replaygate.ingest.validate import can_be_native

    fields = {f.name: f for f in BY_TABLE["proxy"].fields}
    for name in ("ts", "duration_ms", "status"):
        assert not can_be_native(fields[name], duckdb_type)
