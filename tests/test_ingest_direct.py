"""A file read straight into its table (readers.Format.direct, load.DIRECT_READS) loads
exactly what staging loads: the same rows, positions, quarantine rows, counts, file ids
and reports as the line-exact read (FAST_READS off) and the staged fast read, for files
with bad rows and without, gzipped, grown by appends and in batches of several files.
A file with any line that does not load is rolled back out of its batch and staged, so
the direct read may only change speed.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaygate.core import db as dbm
from replaygate.ingest import commit, load, readers, validate

from .test_ingest_fast import CONFIG, KINDS, H, Spy, _file, _tables

# (FAST_READS, DIRECT_READS); the staged fast read is held to the exact one by
# tests/test_ingest_fast.py.
WAYS = {"direct": (True, True), "exact": (False, False)}


def _ingest(folders: list[Path], db: Path, way: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    fast, direct = WAYS[way]
    monkeypatch.setattr(load, "FAST_READS", fast)
    monkeypatch.setattr(load, "DIRECT_READS", direct)
    con = dbm.connect(str(db))
    try:
        report = load.ingest(con, list(folders), CONFIG)
    finally:
        con.close()
    files = sorted(
        (f.path, f.status, sorted(f.rows.items()), f.quarantined, f.lines, f.blank, f.note)
        for f in report.files
    )
    return files, sorted(report.quarantine_reasons.items()), report.warnings


def _diff(a: Path, b: Path) -> list[tuple]:
    con = duckdb.connect()
    try:
        con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
        con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
        out = []
        for table, cols in _tables():
            for x, y in (("a", "b"), ("b", "a")):
                q = f"SELECT {cols} FROM {x}.{table} EXCEPT ALL SELECT {cols} FROM {y}.{table}"
                out += [(table, x, r) for r in con.execute(q).fetchall()[:3]]
        return out
    finally:
        con.close()


def assert_same(
    steps: list[list[Path]], tmp: Path, monkeypatch: pytest.MonkeyPatch, prepare=None
) -> Spy:
    """Ingest each step's folders in turn (`prepare(i)` before step i), every way into
    a database of its own; after each step the reports and every table agree."""
    spy = Spy(monkeypatch)
    dbs = {way: tmp / f"{way}.duckdb" for way in WAYS}
    for p in dbs.values():
        p.unlink(missing_ok=True)
    for i, folders in enumerate(steps):
        if prepare is not None:
            prepare(i)
        reports = {way: _ingest(folders, db, way, monkeypatch) for way, db in dbs.items()}
        assert reports["direct"] == reports["exact"], i
        assert _diff(dbs["direct"], dbs["exact"]) == [], i
    return spy


def _events(n: int, bad: set[int] = frozenset()) -> pa.Table:
    rows = {
        "ts": [f"2026-11-29T07:00:{i % 60:02d}.{i % 1000:03d}Z" for i in range(n)],
        "session_hmac": [H] * n,
        "generation": [1] * n,
        "stream_id": [f"s{i % 7}" for i in range(n)],
        "event_id": [f"e{i}" for i in range(n)],
        "seq": [i + 1 for i in range(n)],
        "kind": ["message" if i not in bad else "nope" for i in range(n)],
        "disposition": ["sent"] * n,
    }
    return pa.table(rows)


@pytest.mark.slow
def test_parquet_with_bad_rows_and_without(tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    pq.write_table(_events(5000), folder / "events-clean.parquet", row_group_size=700)
    pq.write_table(_events(3000, {0, 1234, 2999}), folder / "events-bad.parquet")
    # A schema column may name another record type row by row: always staged.
    with_schema = _events(50).append_column("schema", pa.array(["mcpSseEvent.v1"] * 50))
    pq.write_table(with_schema, folder / "events-schema.parquet")
    spy = assert_same([[folder], [folder]], tmp_path, monkeypatch)
    # Not vacuous: the clean file went straight in, the others were staged. (The larger
    # file goes first in a batch, load._load_order: the clean one was read straight in
    # before the bad one rolled the batch back, and again after.)
    assert spy.direct == ["events-clean.parquet"] * 2
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        q = con.execute(
            "SELECT \"row\", reason FROM quarantine WHERE path LIKE '%events-bad%' ORDER BY 1"
        ).fetchall()
        assert [r[0] for r in q] == [1, 1235, 3000]
        pos = con.execute(
            "SELECT min(pos), max(pos), count(DISTINCT pos) FROM events "
            "JOIN files USING (file_id) WHERE name = 'events-clean.parquet'"
        ).fetchone()
        assert pos == (1, 5000, 5000)
    finally:
        con.close()


def test_a_bad_file_in_a_batch_keeps_the_others_and_the_ids(tmp_path, monkeypatch):
    """One transaction of several files: the bad one rolls the batch back and is staged;
    the files before and after it keep the ids and rows they would have had."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name, kinds in (("a", []), ("b", ["bad enum", "blank"]), ("c", ["clean"])):
        (folder / f"sessions-{name}.jsonl").write_bytes(_file(kinds))
    gz = gzip.compress(_file(["unicode", "epoch ts"]), mtime=0)
    (folder / "sessions-d.jsonl.gz").write_bytes(gz)
    for name, kinds in (("e", ["null"]), ("f", [])):
        (folder / f"sessions-{name}.jsonl").write_bytes(_file(kinds))
    tries: list[int] = []
    real = load._load_batch

    def counted(con, loader, plan):
        tries.append(len(plan))
        return real(con, loader, plan)

    monkeypatch.setattr(load, "_load_batch", counted)
    spy = assert_same([[folder]], tmp_path, monkeypatch)
    # The files read straight in go larger first (load._load_order): d, c, b, e, a, f.
    # b did not load whole: staged, the batch tried again (d and c went in again); then e
    # did not: staged with the files not loaded yet (a, f), the batch tried a third time.
    # At most three tries, however many files have a bad line.
    direct = ["sessions-c.jsonl"] * 3 + ["sessions-d.jsonl.gz"] * 3
    assert sorted(spy.direct) == direct
    assert tries == [6, 6, 6, 6]  # the direct ingest: three tries; the exact one: one


@pytest.mark.slow
def test_grown_file_and_reingest(tmp_path, monkeypatch):
    """A log read, grown (new lines read straight in, then a bad line appended and
    staged), rotated and compressed: read exactly once, and a re-ingest adds nothing."""
    folder = tmp_path / "in"
    folder.mkdir()
    log = folder / "sessions-live.jsonl"
    parts = [_file([]), _file(["clean", "numbers as strings"]), _file(["null"])]

    def grow(i: int) -> None:
        if i < len(parts):
            with open(log, "ab") as fh:
                fh.write(parts[i])
        elif i == len(parts):
            (folder / "sessions-live.jsonl.1.gz").write_bytes(gzip.compress(log.read_bytes()))
            log.unlink()

    spy = assert_same([[folder]] * (len(parts) + 2), tmp_path, monkeypatch, grow)
    # The first two parts went straight in; the third (a null line) was staged.
    assert spy.direct.count("sessions-live.jsonl") == 2
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        lines, rows, quarantined = con.execute(
            "SELECT lines, rows_loaded, rows_quarantined FROM files WHERE status = 'loaded'"
        ).fetchone()
        assert lines == sum(p.count(b"\n") for p in parts) == rows + quarantined
        assert quarantined == 1
        pos = con.execute("SELECT list(pos ORDER BY pos) FROM sessions").fetchone()[0]
        assert pos == [p for p in range(1, lines + 1) if p != 10]  # line 10: the null
    finally:
        con.close()


@pytest.mark.slow
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    files=st.lists(
        st.tuples(st.lists(st.sampled_from(sorted(KINDS)), max_size=4), st.booleans()),
        min_size=1,
        max_size=3,
    ),
    appended=st.lists(st.sampled_from(sorted(KINDS)), max_size=3),
)
def test_generated_batches(files, appended, tmp_path_factory, monkeypatch):
    tmp = tmp_path_factory.mktemp("direct")
    folder = tmp / "in"
    folder.mkdir()
    for i, (kinds, gz) in enumerate(files):
        data = _file(kinds)
        if gz:
            (folder / f"sessions-{i}.jsonl.gz").write_bytes(gzip.compress(data, mtime=0))
        else:
            (folder / f"sessions-{i}.jsonl").write_bytes(data)

    def grow(step: int) -> None:
        if step == 1:
            plain = sorted(folder.glob("*.jsonl"))
            if plain:
                with open(plain[0], "ab") as fh:
                    fh.write(_file(appended))

    spy = assert_same([[folder], [folder]], tmp, monkeypatch, grow)
    # Files of the same content are one file read once (the others are duplicates).
    clean = {_file(kinds) for kinds, _ in files if all(k == "clean" for k in kinds)}
    if len(files) - sum(all(k == "clean" for k in kinds) for kinds, _ in files) < 2:
        # A second file that does not load whole stages the batch's files not yet loaded
        # (load.py: a batch is tried at most three times), clean ones too.
        assert len(spy.direct) >= len(clean)


def _events_csv(n: int, bad: set[int] = frozenset(), start: int = 0, header: bool = True) -> bytes:
    """An events CSV file: a header and `n` rows (`bad`: rows of an unknown kind); some
    fields quoted, one holding a comma and a line end, some empty."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ["ts", "session_hmac", "generation", "stream_id", "event_id", "seq", "kind"]
    if header:
        w.writerow([*cols, "disposition", "jsonrpc_id"])
    for j in range(start, start + n):
        kind = "nope" if j in bad else "message"
        rpc = "" if j % 3 else f"r,{j}\nnext" if j % 5 == 0 else f"r{j}"
        ts = f"2026-11-29T07:00:{j % 60:02d}.{j % 1000:03d}Z"
        w.writerow([ts, H, 1, f"s{j % 7}", f"e{j}", j + 1, kind, "sent", rpc])
    return buf.getvalue().encode()


@pytest.mark.slow
def test_csv_read_straight_in_equals_the_line_exact_load(tmp_path, monkeypatch):
    """A clean CSV file (plain, gzipped, fields holding line ends) goes straight into its
    table, with the data rows as positions; one with a refused row, a record the reader
    rejects, a `schema` column or no row is staged; all as the line-exact load has them."""
    clean, mixed = tmp_path / "clean", tmp_path / "mixed"
    clean.mkdir()
    mixed.mkdir()
    (clean / "events-clean.csv").write_bytes(_events_csv(400))
    (clean / "events-zipped.csv.gz").write_bytes(gzip.compress(_events_csv(50), mtime=0))
    (mixed / "events-bad.csv").write_bytes(_events_csv(300, {0, 123, 299}))
    torn = _events_csv(30).replace(b",s3,", b",s3,extra,", 1)  # one record too wide
    assert torn != _events_csv(30)
    (mixed / "events-torn.csv").write_bytes(torn)
    text = _events_csv(20).decode().splitlines(keepends=True)
    text[0] = "schema," + text[0]
    text[1:] = [f"mcpSseEvent.v1,{line}" if line[:4] == "2026" else line for line in text[1:]]
    (mixed / "events-schema.csv").write_text("".join(text))
    (mixed / "events-header-only.csv").write_bytes(_events_csv(0))
    spy = assert_same([[clean], [clean, mixed]], tmp_path, monkeypatch)
    # Not vacuous: the clean files went straight in, once; the others were staged.
    assert sorted(spy.direct) == ["events-clean.csv", "events-zipped.csv.gz"]
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        q = con.execute(
            "SELECT \"row\" FROM quarantine WHERE path LIKE '%events-bad%' ORDER BY 1"
        ).fetchall()
        assert [r[0] for r in q] == [1, 124, 300]
        pos = con.execute(
            "SELECT min(pos), max(pos), count(DISTINCT pos), max(jsonrpc_id) FILTER (pos = 1) "
            "FROM events JOIN files USING (file_id) WHERE name = 'events-clean.csv'"
        ).fetchone()
        assert pos == (1, 400, 400, "r,0\nnext")
        lines = con.execute(
            "SELECT lines, rows_loaded FROM files WHERE name = 'events-clean.csv'"
        ).fetchone()
        # The file's lines as its identity counts them: the header, 400 rows, 27 of
        # them holding a line end.
        assert lines == (428, 400)
    finally:
        con.close()


@pytest.mark.slow
def test_csv_grown_rotated_and_reingested(tmp_path, monkeypatch):
    """A CSV log grown twice (new rows read straight in, then rows with a refused one,
    staged), rotated and compressed: read exactly once, re-ingest adds nothing."""
    folder = tmp_path / "in"
    folder.mkdir()
    log = folder / "events-live.csv"
    parts = [_events_csv(40), _events_csv(25, start=40, header=False)]
    parts.append(_events_csv(10, {67}, start=65, header=False))

    def grow(i: int) -> None:
        if i < len(parts):
            with open(log, "ab") as fh:
                fh.write(parts[i])
        elif i == len(parts):
            (folder / "events-live.csv.1.gz").write_bytes(gzip.compress(log.read_bytes()))
            log.unlink()

    spy = assert_same([[folder]] * (len(parts) + 2), tmp_path, monkeypatch, grow)
    assert spy.direct.count("events-live.csv") == 2
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        rows, quarantined = con.execute(
            "SELECT rows_loaded, rows_quarantined FROM files WHERE status = 'loaded'"
        ).fetchone()
        assert (rows, quarantined) == (74, 1)
        pos = con.execute("SELECT list(pos ORDER BY pos) FROM events").fetchone()[0]
        assert pos == [p for p in range(1, 76) if p != 68]
    finally:
        con.close()


def _filters(node: dict) -> list[str]:
    """The expressions of every filter in a plan (EXPLAIN's JSON), as text."""
    own = [json.dumps(node.get("extra_info"))] if node.get("name") == "FILTER" else []
    return own + [f for child in node.get("children", []) for f in _filters(child)]


def _operators(node: dict) -> list[str]:
    """The names of every operator in a plan (EXPLAIN's JSON)."""
    return [node.get("name", "")] + [n for c in node.get("children", []) for n in _operators(c)]


def _direct_insert(fmt: str, tmp_path: Path) -> tuple[Any, duckdb.DuckDBPyConnection, str, dict]:
    """A 50-event file of `fmt` read straight in, as the load sends it: its record type, an
    empty database, the insert statement and its bound values."""
    table = _events(50)
    path = tmp_path / f"events.{fmt}"
    if fmt == "parquet":
        pq.write_table(table, path)
    elif fmt == "csv":
        pa_csv.write_csv(table, path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))
    src = readers.detect(path)
    assert src is not None and src.default_type is not None
    rt = src.default_type
    con = dbm.connect(":memory:")
    reading = readers.Reading(src, path, "none", [f.name for f in rt.fields], True, con, typed=rt)
    direct = readers.FORMATS[fmt].direct
    assert direct is not None
    inner = direct(reading)
    assert inner is not None
    sql = commit.direct_insert_sql(rt, validate.checked_sql(rt, f"({inner})", reading.native))
    params = {"path": str(path), "compression": "none", "file_id": 1, "t": rt.table, "shift": 0}
    params |= {"before": 0, "header": True}  # the file read whole (readers.NUMBERED)
    return rt, con, sql, {k: v for k, v in params.items() if f"${k}" in sql}


def _explain(con: duckdb.DuckDBPyConnection, sql: str, bound: dict) -> dict:
    """The plan of `sql` (EXPLAIN's JSON)."""
    return json.loads(con.execute(f"EXPLAIN (FORMAT json) {sql}", bound).fetchall()[0][1])[0]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_large_text_file_read_straight_in_keeps_its_lines(fmt, tmp_path, monkeypatch):
    """A text file large enough for DuckDB to read on several threads, read straight in
    (numbered in the read, readers.NUMBERED; in pieces side by side past
    pieces.PIECE_BYTES, tests/test_ingest_pieces.py), grown and read again: each row's
    `pos` is its line (its `seq` here), as the line-exact read loads it."""
    n = 90_000
    table = _events(n)
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / f"events.{fmt}"

    def write(t: pa.Table, mode: str) -> None:
        if fmt == "csv":
            buf = io.BytesIO()
            pa_csv.write_csv(t, buf, pa_csv.WriteOptions(include_header=mode == "w"))
            with open(path, mode + "b") as fh:
                fh.write(buf.getvalue())
        else:
            with open(path, mode) as fh:
                fh.write("".join(json.dumps(r) + "\n" for r in t.to_pylist()))

    write(table.slice(0, 70_000), "w")

    def grow(i: int) -> None:
        if i == 1:
            write(table.slice(70_000), "a")

    spy = assert_same([[folder], [folder]], tmp_path, monkeypatch, grow)
    assert spy.direct == [path.name] * 2
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT count(*), count(*) FILTER (WHERE pos = seq), min(pos), max(pos) FROM events"
        ).fetchone() == (n, n, 1, n)
    finally:
        con.close()


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_direct_insert_filters_no_typed_value(fmt, tmp_path):
    """A file read straight into its table is cast and checked in one projection: no
    filter of the insert's plan holds a field's typed value or its reason (DuckDB would
    write the cast into the filter once per mention of the value: a timestamp's four
    times), so a row that would not load fails the insert instead (commit.py)."""
    rt, con, sql, bound = _direct_insert(fmt, tmp_path)
    typed = {f"f_{f.name}" for f in rt.fields}
    for expr in _filters(_explain(con, sql, bound)):
        assert not typed & set(re.findall(r"\bf_\w+", expr)), expr
    # The statement loads every row of a clean file.
    assert con.execute(sql, bound).fetchall() == [(50,)]


def test_a_batch_loads_the_larger_files_first(tmp_path):
    """In a batch's transaction the files read straight in go first, and within each part
    the file with more to read (load._load_order): a small file's rows follow a large
    one's, so the checkpoint that ends the load has few partial row groups to merge."""
    folder = tmp_path / "in"
    folder.mkdir()
    # b and a are clean (read straight in); d and c each have a refused line (staged).
    for name, n, bad in (("a", 20, set()), ("b", 3000, set()), ("c", 10, {5}), ("d", 2000, {7})):
        rows = _events(n, bad).to_pylist()
        (folder / f"events-{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = dbm.connect(str(tmp_path / "db.duckdb"))
    try:
        load.ingest(con, [folder], CONFIG)
        first = con.execute(
            "SELECT name FROM events JOIN files USING (file_id) "
            "GROUP BY name ORDER BY min(events.rowid)"
        ).fetchall()
        assert [r[0] for r in first] == [f"events-{x}.jsonl" for x in "badc"]
        assert con.execute("SELECT count(*) FROM events").fetchone() == (3000 + 20 + 9 + 1999,)
    finally:
        con.close()


def _tagged(n: int, tag: str, bad: set[int] = frozenset()) -> pa.Table:
    t = _events(n, bad)
    ids = pa.array([f"{tag}{i}" for i in range(n)])
    return t.set_column(t.schema.get_field_index("event_id"), "event_id", ids)


def _write(path, table: pa.Table) -> None:
    if path.suffix == ".csv":
        buf = io.BytesIO()
        pa_csv.write_csv(table, buf)
        path.write_bytes(buf.getvalue())
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in table.to_pylist()))


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_positions_after_deletes_and_other_files_in_the_transaction(fmt, tmp_path, monkeypatch):
    """Rows numbered after the insert keep their line when the table already holds rows,
    a rewritten file's old rows were deleted in the same transaction and another file of
    the batch rolled back for a bad line."""
    folder = tmp_path / "in"
    folder.mkdir()
    a, b, c = (folder / f"events-{x}.{fmt}" for x in "abc")
    _write(a, _tagged(400, "a"))
    _write(b, _tagged(300, "b"))

    def step(i: int) -> None:
        if i == 1:
            _write(a, _tagged(350, "A"))  # rewritten: its old rows deleted, then read
            _write(c, _tagged(250, "c", bad={120}))  # a bad row: the batch rolls back

    spy = assert_same([[folder], [folder], [folder]], tmp_path, monkeypatch, step)
    assert spy.direct.count(a.name) >= 2 and b.name in spy.direct
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        got = con.execute(
            """SELECT f.name, count(*), count(*) FILTER (WHERE e.pos = e.seq)
               FROM events e JOIN files f USING (file_id) WHERE f.status = 'loaded'
               GROUP BY ALL ORDER BY 1"""
        ).fetchall()
        assert got == [(a.name, 350, 350), (b.name, 300, 300), (c.name, 249, 249)]
        where = "line" if fmt == "jsonl" else '"row"'
        q = con.execute(f"SELECT {where} FROM quarantine").fetchall()
        assert q == [(121,)]
    finally:
        con.close()


def test_positions_of_gzip_without_final_newline_and_blank_lines(tmp_path, monkeypatch):
    """A gzip file whose last line has no newline goes straight in (its last line is a
    row); a plain one waits for it; a file with a blank line is staged: every row's pos
    is its line."""
    folder = tmp_path / "in"
    folder.mkdir()
    text = "".join(json.dumps(r) + "\n" for r in _tagged(300, "g").to_pylist())
    (folder / "events-g.jsonl.gz").write_bytes(gzip.compress(text.rstrip("\n").encode(), mtime=0))
    (folder / "events-p.jsonl").write_text(text.rstrip("\n"))
    lines = [json.dumps(r) for r in _tagged(200, "k").to_pylist()]
    lines.insert(50, "")  # a blank line 51: rows after it are on line seq + 1
    (folder / "events-k.jsonl").write_text("\n".join(lines) + "\n")
    spy = assert_same([[folder], [folder]], tmp_path, monkeypatch)
    assert "events-g.jsonl.gz" in spy.direct
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        shifted = con.execute(
            """SELECT count(*), count(*) FILTER (WHERE e.pos = e.seq + (e.seq > 50)::INT)
               FROM events e JOIN files f USING (file_id) WHERE f.name = 'events-k.jsonl'"""
        ).fetchone()
        assert shifted == (200, 200)
        exact = con.execute(
            """SELECT f.name, count(*), count(*) FILTER (WHERE e.pos = e.seq)
               FROM events e JOIN files f USING (file_id)
               WHERE f.name <> 'events-k.jsonl' GROUP BY ALL ORDER BY 1"""
        ).fetchall()
        assert exact == [("events-g.jsonl.gz", 300, 300), ("events-p.jsonl", 299, 299)]
    finally:
        con.close()
