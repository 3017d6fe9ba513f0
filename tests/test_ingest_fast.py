"""The fast read of clean JSON Lines (readers.jsonl_fast_sql, load._stage_fast) stages
exactly what the line-exact reader stages: the same rows, values, positions, quarantine
rows and counts, on the sample fleet, on the messy inputs of tests/hostile.py and on
generated files with every kind of line the fast reader could misread. A file it cannot
prove clean is read line by line, so the only thing the fast path may change is speed.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES
from replaygate.ingest import load, readers

from . import hostile
from .conftest import SAMPLE

H = "ab" * 32
# Timestamp bounds as a real configuration has them (validate.reason_sql reads them).
CONFIG = Config(ts_bounds={"min": "2020-01-01T00:00:00Z", "max": "2030-01-01T00:00:00Z"})


class Spy:
    """Counts the files the fast read kept (staged by it, or read straight into their
    table: load.DIRECT_READS) and those it handed to the line reader."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.kept: list[str] = []
        self.refused: list[str] = []
        self.direct: list[str] = []
        real = load._Loader._stage_fast
        real_direct = load._Loader._insert_direct

        def spy(loader, src, *args, **kwargs):
            ok = real(loader, src, *args, **kwargs)
            (self.kept if ok else self.refused).append(src.name)
            return ok

        def spy_direct(loader, staged, *args, **kwargs):
            real_direct(loader, staged, *args, **kwargs)  # Unproven: the file is staged
            self.kept.append(staged.src.name)
            self.direct.append(staged.src.name)

        monkeypatch.setattr(load._Loader, "_stage_fast", spy)
        monkeypatch.setattr(load._Loader, "_insert_direct", spy_direct)


def _ingest(folder: Path, db: Path, fast: bool, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    monkeypatch.setattr(load, "FAST_READS", fast)
    con = dbm.connect(str(db))
    try:
        report = load.ingest(con, [folder], CONFIG)
    finally:
        con.close()
    return sorted(
        (f.path, f.status, sorted(f.rows.items()), f.quarantined, f.lines, f.blank, f.note)
        for f in report.files
    )


def _tables() -> list[tuple[str, str]]:
    """Every table an ingest writes, with the columns that may differ between two runs
    left out (when it ran)."""
    out = [(rt.table, "*") for rt in RECORD_TYPES]
    out += [("quarantine", "*"), ("files", "* EXCLUDE (ingested_at)"), ("file_facts", "*")]
    out += [("analysis_pending", "*"), ("analysis_pending_rows", "*")]
    return out


def assert_same_load(folder: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Spy:
    """Ingest `folder` with the fast read and without; the databases hold the same rows
    (EXCEPT ALL both ways, every table) and the reports say the same."""
    spy = Spy(monkeypatch)
    fast_db, slow_db = tmp / "fast.duckdb", tmp / "slow.duckdb"
    for p in (fast_db, slow_db):
        p.unlink(missing_ok=True)
    fast_report = _ingest(folder, fast_db, True, monkeypatch)
    slow_report = _ingest(folder, slow_db, False, monkeypatch)
    assert fast_report == slow_report
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{fast_db}' AS f (READ_ONLY)")
        con.execute(f"ATTACH '{slow_db}' AS s (READ_ONLY)")
        for table, cols in _tables():
            for a, b in (("f", "s"), ("s", "f")):
                diff = con.execute(
                    f"SELECT {cols} FROM {a}.{table} EXCEPT ALL SELECT {cols} FROM {b}.{table}"
                ).fetchall()
                assert diff == [], (table, a, diff[:5])
    finally:
        con.close()
    return spy


def test_sample_fleet_loads_the_same(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    shutil.copytree(SAMPLE, folder)
    spy = assert_same_load(folder, tmp_path, monkeypatch)
    # Not vacuous: the clean JSON Lines (sessions, the gzip event log) took the fast read.
    assert "sessions.jsonl" in spy.kept and "events.jsonl.gz" in spy.kept


def test_messy_inputs_load_the_same(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    hostile.edge_timestamps(folder)
    hostile.out_of_range_numbers(folder)
    hostile.unreadable_files(folder)
    hostile.raw_ids_elsewhere(folder)
    hostile.proxy_with_raw_ids(folder)
    (folder / "gz").mkdir()
    hostile.proxy_with_raw_ids(folder / "gz", gzipped=True)
    hostile.gzip_truncated(folder, 2_000)
    hostile.gzip_corrupt_midstream(folder, 2_000)
    hostile.gzip_bad_check(folder, 500)
    hostile.mixed_line_endings(folder)
    hostile.caddy_with_bom_and_cut_line(folder)
    spy = assert_same_load(folder, tmp_path, monkeypatch)
    assert spy.kept and spy.refused


# -- generated files: every kind of line the fast reader could read differently ----------
def _session(i: int, **extra) -> dict:
    return {
        "ts": f"2026-11-29T07:{i % 60:02d}:01.{i % 1000:03d}Z",
        "session_hmac": H,
        "generation": 1 + i % 3,
        "state": "SESSION_ACTIVE",
        "principal": f"user-{i}",
        "release": "v1",
    } | extra


def _line(i: int) -> bytes:
    return json.dumps(_session(i)).encode()


def _sub(line: bytes, old: bytes, new: bytes) -> bytes:
    assert old in line, (line, old)  # a kind that changed nothing would test nothing
    return line.replace(old, new)


# Each: a line (or lines) put in the middle of a clean file, and whether the fast read
# may keep the file (False: the line-exact reader must read it).
KINDS: dict[str, tuple[bytes, bool]] = {
    "clean": (_line(0), True),
    "unicode": (json.dumps(_session(1, principal="é😀\u202e\u0000")).encode(), True),
    "unicode raw": (json.dumps(_session(1, principal="é😀"), ensure_ascii=False).encode(), True),
    "escapes": (_sub(_line(2), b'"v1"', b'"v\\u0031\\/\\"x"'), True),
    "numbers as strings": (json.dumps(_session(3, generation="2")).encode(), True),
    "string for a number": (json.dumps(_session(3, generation="two")).encode(), True),
    # Fields are read as VARCHAR: a number the reader spells with an exponent in a field
    # whose text counts (a text, a timestamp, a bool, the schema) is read line by line.
    "number for a text": (json.dumps(_session(4, principal=1e-7)).encode(), False),
    "big number for a text": (json.dumps(_session(4, release=1.5e300)).encode(), False),
    "longest number for a text": (
        json.dumps(_session(4, principal=-1.7976931348623157e308)).encode(),
        False,
    ),
    # Text longer than any number the reader writes is the file's own string.
    "long exponent text": (json.dumps(_session(4, principal="1" * 40 + "e-7")).encode(), True),
    "int for a text": (json.dumps(_session(4, principal=12)).encode(), True),
    "exponent text": (json.dumps(_session(4, principal="1e-07")).encode(), False),
    "text with e-": (json.dumps(_session(4, principal="pre-release e+1")).encode(), True),
    "number for an enum": (json.dumps(_session(8, state=1e-7)).encode(), True),
    "number for a bool": (json.dumps(_session(8, resumable=1e-7)).encode(), False),
    "bool": (json.dumps(_session(8, resumable=True)).encode(), True),
    "number for a schema": (json.dumps(_session(9, schema=1.5e-7)).encode(), False),
    "fraction for an int": (json.dumps(_session(5, generation=2.5)).encode(), True),
    "exponent int": (_sub(_line(5), b'"generation": 3', b'"generation": 3e0'), True),
    # A number field is read as VARCHAR: the reader spells some numbers otherwise.
    **{
        f"int {v.decode()}": (_sub(_line(5), b'"generation": 3', b'"generation": ' + v), True)
        for v in (b"1e300", b"1.5e-7", b"0.000015", b"9007199254740993", b"-0.0", b"2.0")
        + (b"-Infinity", b"1E400", b"123456789012345678901234567890", b"[1.5e-7]", b"true")
    },
    "ts 0.000015": (_sub(_line(6), b'"ts": "2026-11-29T07:06:01.006Z"', b'"ts": 0.000015'), False),
    "epoch ts": (json.dumps(_session(6, ts=1764402301123)).encode(), True),
    "epoch ts float": (json.dumps(_session(6, ts=1.5e-7)).encode(), False),
    "object for a text": (json.dumps(_session(7, principal={"a": [1.5e-7]})).encode(), True),
    "bool for a text": (json.dumps(_session(7, principal=True)).encode(), True),
    "missing required": (
        json.dumps({"ts": "2026-11-29T07:00:00Z", "session_hmac": H}).encode(),
        True,
    ),
    "bad enum": (json.dumps(_session(8, state="NOPE")).encode(), True),
    "too early": (json.dumps(_session(8, ts="2001-01-01T00:00:00Z")).encode(), True),
    "other schema": (json.dumps(_session(9, schema="mcpSseStream.v1")).encode(), True),
    "unknown schema": (json.dumps(_session(9, schema="nope.v1")).encode(), True),
    "duplicate key": (_line(10)[:-1] + b', "principal": "again"}', False),
    "leading spaces": (b"   " + _line(11), True),
    "trailing spaces": (_line(11) + b"   ", True),
    "trailing comma": (_line(12)[:-1] + b",}", True),
    "NaN": (_sub(_line(12), b'"generation": 1', b'"generation": NaN'), True),
    "blank": (b"", False),
    "spaces only": (b"    ", False),
    "tab first": (b"\t" + _line(13), False),
    "CRLF": (_line(13) + b"\r", False),
    "null": (b"null", False),
    "empty object": (b"{}", False),
    "no known key": (b'{"x": 1}', False),
    "array": (b"[" + _line(14) + b"]", False),
    "string": (b'"text"', False),
    "two records": (_line(15) + b" " + _line(16), False),
    "cut": (_line(17)[:40], False),
    "comment": (_line(18)[:-1] + b" /* c */}", False),
    "BOM": (b"\xef\xbb\xbf" + _line(19), False),
    "bad UTF-8": (_sub(_line(20), b"user-20", b"user-\xff\xfe"), False),
    "lone surrogate": (_sub(_line(21), b"user-21", b"user-\\ud83d"), False),
    "control char": (_sub(_line(22), b"user-22", b"user\x01"), False),
    "deep, another key": (_line(23)[:-1] + b', "x": ' + b"[" * 300 + b"]" * 300 + b"}", True),
    "deep, a field": (_line(24)[:-1] + b', "principal": ' + b"[" * 300 + b"]" * 300 + b"}", False),
}


def _file(kinds: list[str], final_newline: bool = True) -> bytes:
    body = [_line(100 + i) for i in range(3)]
    for i, k in enumerate(kinds):
        body.insert(1 + i, KINDS[k][0])
    return b"\n".join(body) + (b"\n" if final_newline else b"")


# The number-spelling check as it was before it looked for an `e` first
# (readers._spelled_otherwise): the rewrite must say the same of every text.
_SPELLED_V0 = (
    'CASE WHEN strlen("c") <= 32 AND (contains("c", \'e-\') OR contains("c", \'e+\')) '
    "THEN regexp_full_match(\"c\", '-?[0-9]+(\\.[0-9]+)?e[+-][0-9]+') ELSE false END"
)


def test_the_number_spelling_check_says_what_it_said(tmp_path):
    """readers._spelled_otherwise, which looks for an `e` before `e-` and `e+`, flags
    exactly the texts the check flagged before, on the numbers DuckDB's JSON reader
    writes with an exponent and on near misses (an `E`, a sign without an `e`, the
    length bound, NULL). Fails on a version that misses `e+` or looks for `E`."""
    texts = [
        "1e-07",
        "1.5e-05",
        "-1.5e+300",
        "1e+300",
        "-1.7976931348623157e+308",
        "1e400",
        "e",
        "e-",
        "e+",
        "-e",
        "+e",
        "1E-07",
        "1E+300",
        "1-7",
        "1+7",
        "pre-release e+1",
        "2026-11-29T07:06:01.006Z",
        "1_1795824001383_272e",
        "mcpSseEvent.v1",
        "",
        "1" * 30 + "e-7",
        "1" * 29 + "e-7",
        "1" * 40 + "e-7",
        "x" * 33,
        "ée-1",
        None,
    ]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (c VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[t] for t in texts])
    new = readers._spelled_otherwise("c")
    assert new != _SPELLED_V0  # the rewrite is what is compared
    rows = con.execute(f"SELECT c, {_SPELLED_V0}, {new} FROM t").fetchall()
    assert [r for r in rows if r[1] != r[2]] == [], rows
    assert sum(1 for r in rows if r[1]) == 6, rows  # not vacuous: both flag the numbers


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_of_line(kind, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "sessions-a.jsonl").write_bytes(_file([kind]))
    spy = assert_same_load(folder, tmp_path, monkeypatch)
    # The fast read keeps what it may keep and nothing else.
    assert spy.kept == (["sessions-a.jsonl"] if KINDS[kind][1] else [])


def test_huge_lines_in_the_middle(tmp_path, monkeypatch):
    """A line over the JSON reader's default object size (16 MB) is read alike; one
    over the line reader's limit (readers.MAX_LINE) is quarantined, line by line."""
    from replaygate.ingest.readers import MAX_LINE

    folder = tmp_path / "in"
    folder.mkdir()
    for name, size in (("sessions-big.jsonl", 17 << 20), ("sessions-over.jsonl", MAX_LINE)):
        big = json.dumps(_session(1, principal="x" * size)).encode()
        (folder / name).write_bytes(_line(0) + b"\n" + big + b"\n" + _line(2) + b"\n")
    spy = assert_same_load(folder, tmp_path, monkeypatch)
    assert spy.kept == ["sessions-big.jsonl"]


@settings(
    # 12, not 25: tests/test_ingest_direct.py generates files of the same lines too.
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kinds=st.lists(st.sampled_from(sorted(KINDS)), max_size=6),
    final_newline=st.booleans(),
    gz=st.booleans(),
)
def test_generated_files(kinds, final_newline, gz, tmp_path_factory, monkeypatch):
    tmp = tmp_path_factory.mktemp("gen")
    folder = tmp / "in"
    folder.mkdir()
    data = _file(kinds, final_newline)
    if gz:
        (folder / "sessions-g.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
    else:
        (folder / "sessions-g.jsonl").write_bytes(data)
    spy = assert_same_load(folder, tmp, monkeypatch)
    if all(KINDS[k][1] for k in kinds):
        assert spy.kept, "a file of lines the fast read may keep was read line by line"


def test_appended_lines_load_the_same(tmp_path, monkeypatch):
    """A grown file: the fast read of its new lines, then a bad line appended (read line
    by line); both runs end with the same database."""
    folder = tmp_path / "in"
    folder.mkdir()
    log = folder / "sessions-live.jsonl"
    dbs = {True: tmp_path / "fast.duckdb", False: tmp_path / "slow.duckdb"}
    spy = Spy(monkeypatch)
    steps = [_file([]), _file(["clean", "numbers as strings"]), _file(["blank", "null"])]
    for step in steps:
        with open(log, "ab") as fh:
            fh.write(step)
        for fast, db in dbs.items():
            _ingest(folder, db, fast, monkeypatch)
    assert spy.kept.count("sessions-live.jsonl") == 2
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{dbs[True]}' AS f (READ_ONLY)")
        con.execute(f"ATTACH '{dbs[False]}' AS s (READ_ONLY)")
        for table, cols in _tables():
            for a, b in (("f", "s"), ("s", "f")):
                q = f"SELECT {cols} FROM {a}.{table} EXCEPT ALL SELECT {cols} FROM {b}.{table}"
                assert con.execute(q).fetchall() == [], table
        lines, quarantined = con.execute(
            "SELECT lines, rows_quarantined FROM f.files WHERE name = 'sessions-live.jsonl'"
        ).fetchone()
        assert lines == sum(s.count(b"\n") for s in steps) and quarantined == 1
    finally:
        con.close()
