"""A large text file read straight into its table in pieces side by side (ingest/pieces.py)
loads exactly what the line-exact read loads: the same rows, positions, quarantine rows,
counts and reports, for clean files, for files with a refused, blank or hostile line in
a later piece (the file is then staged), for CSV with a quoted field (read whole) and
for a file that grows. A JSON Lines file larger than its format reads in pieces
(readers.Format.piece_limit: DuckDB's JSON reader keeps all it reads from a pipe) is read
whole, never through a pipe, and loads the same. The pieces here are small (PIECE_BYTES
and the scan's buffer shrunk), so a file of a few hundred kilobytes is cut as a large one
is. A JSON Lines file's first piece is read from the file itself, its reader limited to
the piece's lines, only when no line of it could give the reader no row (a blank line,
or one of whitespace): such a line there sends the piece through its pipe.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest

from replaygate.core import db as dbm
from replaygate.ingest import commit, identity, load, pieces, readers, validate
from replaygate.sim import simulate

from .test_ingest_direct import _diff, _events, _explain, _operators
from .test_ingest_fast import CONFIG

THREADS = 3
# The rows of a row group the pieces are cut to in these tests (an odd number: a piece's
# rows are a multiple of it only when cut so).
SMALL_GROUP = 97


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Pieces of 16 KB and up, cut at the scan's 16 KB buffers into row groups of
    GROUP_ROWS (shrunk too); returns the piece counts of every read in pieces (a spy on
    pieces.feeding)."""
    monkeypatch.setattr(pieces, "PIECE_BYTES", 16 << 10)
    monkeypatch.setattr(pieces, "GROUP_ROWS", SMALL_GROUP)
    monkeypatch.setattr(identity, "SCAN_CHUNK", 16 << 10)
    # Line starts looked at in every JSON Lines file (its first piece read from the file).
    monkeypatch.setattr(identity, "_STARTS_FILE", 0)
    real = pieces.cut
    monkeypatch.setattr(
        pieces,
        "cut",
        lambda cuts, end, k, least=16 << 10, lead=False: real(cuts, end, k, least, lead),
    )
    seen: list[int] = []
    feeding = pieces.feeding

    def spy(source, cut, pipes):
        seen.append(len(cut))
        return feeding(source, cut, pipes)

    monkeypatch.setattr(pieces, "feeding", spy)
    return seen


def _ingest(folder: Path, db: Path, exact: bool, monkeypatch: pytest.MonkeyPatch) -> tuple:
    monkeypatch.setattr(load, "FAST_READS", not exact)
    monkeypatch.setattr(load, "DIRECT_READS", not exact)
    con = dbm.connect(str(db))
    con.execute(f"SET threads = {THREADS}")
    try:
        report = load.ingest(con, [folder], CONFIG)
    finally:
        con.close()
    files = sorted(
        (f.path, f.status, sorted(f.rows.items()), f.quarantined, f.lines, f.blank, f.note)
        for f in report.files
    )
    return files, sorted(report.quarantine_reasons.items()), report.warnings


def assert_same(
    folder: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, steps: int = 1, grow=None
):
    """Ingest `folder` (`steps` times, `grow(i)` before step i) read straight in and line
    by line, each into a database of its own: the reports and every table agree."""
    dbs = {"direct": tmp / "direct.duckdb", "exact": tmp / "exact.duckdb"}
    for i in range(steps):
        if grow is not None:
            grow(i)
        reports = {way: _ingest(folder, db, way == "exact", monkeypatch) for way, db in dbs.items()}
        assert reports["direct"] == reports["exact"], i
        assert _diff(dbs["direct"], dbs["exact"]) == [], i


def _write(path: Path, table: pa.Table, mode: str = "w") -> None:
    if path.suffix == ".csv":
        opts = pa_csv.WriteOptions(include_header=mode == "w", quoting_style="none")
        with open(path, mode + "b") as fh:
            pa_csv.write_csv(table, fh, opts)
    else:
        with open(path, mode) as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in table.to_pylist()))


def test_cut_at_line_ends_into_equal_shares():
    cuts = [(o, o // 10) for o in range(100, 1001, 100)]  # a line end every 100 bytes
    assert pieces.cut(cuts, 1000, 2, least=100) == [
        pieces.Piece(0, 500, 0),
        pieces.Piece(500, 1000, 50),
    ]
    assert [p.start for p in pieces.cut(cuts, 1000, 3, least=100)] == [0, 300, 700]
    # Too small for two pieces of the least size, or no line end to cut at: whole.
    assert pieces.cut(cuts, 1000, 2, least=600) == [pieces.Piece(0, 1000, 0)]
    assert pieces.cut([], 1000, 4, least=100) == [pieces.Piece(0, 1000, 0)]
    assert pieces.cut(cuts, 1000, 1, least=100) == [pieces.Piece(0, 1000, 0)]
    # A first piece read from the file itself takes LEAD_WEIGHT times a piped one's share.
    assert pieces.shares(2, lead=True) == [pieces.LEAD_WEIGHT / (pieces.LEAD_WEIGHT + 1)]
    assert [p.start for p in pieces.cut(cuts, 1000, 2, least=100, lead=True)] == [0, 600]
    assert [p.start for p in pieces.cut(cuts, 1000, 3, least=100, lead=True)] == [0, 400, 700]


def test_duckdb_fills_row_groups_of_group_rows(tmp_path):
    """pieces.GROUP_ROWS is the rows of a row group of a database the load makes."""
    con = dbm.connect(str(tmp_path / "g.duckdb"))
    try:
        con.execute("CREATE TABLE t AS SELECT range AS i FROM range(300000)")
        counts = con.execute(
            "SELECT max(count) FROM pragma_storage_info('t') GROUP BY row_group_id "
            "ORDER BY row_group_id"
        ).fetchall()
    finally:
        con.close()
    assert [c[0] for c in counts] == [pieces.GROUP_ROWS, pieces.GROUP_ROWS, 300000 - 2 * 122_880]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_every_piece_but_the_last_holds_whole_row_groups(fmt, small_pieces, tmp_path, monkeypatch):
    """A piece's insert fills row groups of its own: cut anywhere else, each piece left a
    partial group, which the next checkpoint merges by writing its rows again."""
    path = tmp_path / f"events.{fmt}"
    _write(path, _events(4000))
    got: list[list[pieces.Piece]] = []
    feeding = pieces.feeding

    def spy(source, cut, pipes):
        got.append(list(cut))
        return feeding(source, cut, pipes)

    monkeypatch.setattr(pieces, "feeding", spy)
    _ingest(tmp_path, tmp_path / "g.duckdb", False, monkeypatch)
    assert [len(c) for c in got] == [THREADS], got
    header = 1 if fmt == "csv" else 0
    raw = path.read_bytes()
    for piece in got[0][1:]:
        assert raw[piece.start - 1 : piece.start] == b"\n"
        assert piece.before == raw[: piece.start].count(b"\n")
        assert (piece.before - header) % SMALL_GROUP == 0, piece
    shares = [p.end - p.start for p in got[0]]
    assert max(shares) < 2 * min(shares), shares  # near equal shares still


def test_group_ends_are_line_ends_of_whole_groups(tmp_path, monkeypatch):
    monkeypatch.setattr(pieces, "GROUP_ROWS", 10)
    monkeypatch.setattr(pieces, "_SEEK_CHUNK", 64)  # a line end looked for over chunks
    path = tmp_path / "f.csv"
    data = b"h\n" + b"".join(b"%d,x\n" % i for i in range(95))
    path.write_bytes(data)
    cuts = [(o, data[:o].count(b"\n")) for o in range(1, len(data)) if data[o - 1] == 10][::17]
    for k, want in ((2, [41, 51]), (3, [31, 41, 61, 71]), (4, [21, 31, 41, 51, 71, 81])):
        ends = pieces.group_ends(path, cuts, 96, k, header=1)
        assert [n for _, n in ends] == want, k
        for offset, before in ends:
            assert data[:offset].count(b"\n") == before and data[offset - 1] == 10
    # Fewer rows than a group: nowhere to cut.
    assert pieces.group_ends(path, cuts, 9, 2) == []


def test_the_scan_notes_where_a_file_may_be_cut(tmp_path, monkeypatch):
    """identity.Scan.cuts: a line end per buffer with the lines before it, also when the
    lines before a known prefix are counted after the pass (a new file of a format some
    loaded file has)."""
    monkeypatch.setattr(identity, "SCAN_CHUNK", 1000)
    path = tmp_path / "f.jsonl"
    data = b"".join(b'{"a": %d}\n' % i for i in range(3000))
    path.write_bytes(data)
    for lines_at in (None, {(5000, "x"): 7}):
        sc = identity.scan(path, False, False, {5000}, lines_at)
        assert len(sc.cuts) > 10
        for offset, before in sc.cuts:
            assert data[offset - 1 : offset] == b"\n"
            assert before == data[:offset].count(b"\n")


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_large_file_read_in_pieces_loads_as_read_line_by_line(
    fmt, small_pieces, tmp_path, monkeypatch
):
    folder = tmp_path / "in"
    folder.mkdir()
    n = 4000
    _write(folder / f"events-clean.{fmt}", _events(n))
    # A refused row and (JSON Lines) a blank line in the last piece: staged.
    _write(folder / f"events-bad.{fmt}", _events(n, {n - 10}))
    if fmt == "jsonl":
        text = (folder / "events-clean.jsonl").read_text().splitlines(keepends=True)
        (folder / "events-blank.jsonl").write_text("".join(text[:3500] + ["\n"] + text[3500:]))
    else:
        # A quoted field: a record may span lines, so the file is read whole.
        quoted = (folder / "events-clean.csv").read_text().replace(",e7,", ',"e,7",', 1)
        (folder / "events-quoted.csv").write_text(quoted)
    assert_same(folder, tmp_path, monkeypatch)
    # Not vacuous: the clean file (and the bad ones, before they were staged) was read in
    # as many pieces as DuckDB has threads.
    assert small_pieces and set(small_pieces) == {THREADS}, small_pieces
    con = duckdb.connect(str(tmp_path / "direct.duckdb"), read_only=True)
    try:
        assert con.execute(
            "SELECT count(*), count(*) FILTER (WHERE pos = seq) FROM events "
            "JOIN files USING (file_id) WHERE name LIKE 'events-clean%'"
        ).fetchone() == (n, n)
    finally:
        con.close()


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_file_read_in_pieces_then_grown(fmt, small_pieces, tmp_path, monkeypatch):
    """Read in pieces, then its new lines (read whole), then rotated and compressed."""
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / f"events.{fmt}"
    table = _events(5000)
    _write(path, table.slice(0, 4000))

    def grow(i: int) -> None:
        if i == 1:
            _write(path, table.slice(4000), "a")

    assert_same(folder, tmp_path, monkeypatch, steps=2, grow=grow)
    assert small_pieces == [THREADS], small_pieces


def test_a_json_lines_file_over_the_piece_limit_is_read_whole(small_pieces, tmp_path, monkeypatch):
    """Its reader would hold every piece it reads from a pipe: a file larger than the
    limit is read whole, on one thread (its memory then stays that of one buffer), and
    loads as read line by line; one no larger is read in pieces."""
    assert readers.FORMATS["jsonl"].piece_limit == readers.JSONL_PIECE_LIMIT
    assert readers.FORMATS["csv"].piece_limit is None
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder / "events-large.jsonl", _events(4000))
    _write(folder / "events-small.jsonl", _events(1500))
    large = (folder / "events-large.jsonl").stat().st_size
    limit = (folder / "events-small.jsonl").stat().st_size
    assert large > limit
    jsonl = dataclasses.replace(readers.FORMATS["jsonl"], piece_limit=limit)
    monkeypatch.setitem(readers.FORMATS, "jsonl", jsonl)
    assert_same(folder, tmp_path, monkeypatch)
    # Only the small file went through pipes (once, as many pieces as threads).
    assert small_pieces == [THREADS], small_pieces


# Lines the line-exact read refuses, quarantines or reads otherwise than a typed reader
# would; one of them in the last piece of a file read in pieces.
HOSTILE = {
    "number-as-string": '"seq": "12"',
    "exponent": '"seq": 1e3',
    "exponent-as-string": '"seq": "1e3"',
    "leading-space": '"seq": " 12"',
    "true-as-number": '"seq": true',
    "false-as-number": '"buffer_depth": false',
    "offset": '"ts": "2026-11-29T09:00:01.123+02:00"',
    "hour-24": '"ts": "2026-11-29T24:00:00Z"',
    "duplicate-key": '"seq": 1, "seq": 2',
    "nan": '"buffer_depth": NaN',
    "nested": '"stream_id": {"a": [1, 2]}',
    "fraction": '"seq": 1.5',
    "hex": '"seq": "0x10"',
}


def _hostile_files() -> dict[str, bytes]:
    """A file of 3,000 events per case, its hostile line in its last piece."""
    lines = [json.dumps(r) for r in _events(3000).to_pylist()]
    out = {}
    for name, field in HOSTILE.items():
        rec = json.loads(lines[2500])
        rec.pop(field.split(":")[0].strip('"'), None)
        bad = json.dumps(rec)[:-1] + ", " + field + "}"
        out[name] = ("\n".join([*lines[:2500], bad, *lines[2501:]]) + "\n").encode()
    raw = ("\n".join(lines) + "\n").encode()
    cut = raw.index(b"\n", len(raw) * 5 // 6) + 1
    out["invalid-utf8"] = raw[:cut] + b'{"ts": "\xff\xfe"}\n' + raw[cut:]
    long = json.loads(lines[0]) | {"jsonrpc_id": "x" * (10 << 20)}
    out["10MB-line"] = ("\n".join([*lines, json.dumps(long)]) + "\n").encode()
    return out


@pytest.mark.slow
@pytest.mark.parametrize("case", [*HOSTILE, "invalid-utf8", "10MB-line"])
def test_a_hostile_line_in_a_later_piece(case, small_pieces, tmp_path, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "events.jsonl").write_bytes(_hostile_files()[case])
    assert_same(folder, tmp_path, monkeypatch)
    # Not vacuous: read in pieces (then staged, if the line does not load).
    assert small_pieces and max(small_pieces) > 1, small_pieces


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_the_pieces_are_numbered_reads_side_by_side(fmt, tmp_path):
    """The insert of a file read in pieces is a UNION of one numbered read per piece
    (each window runs on a thread of its own: DuckDB runs the branches side by side when
    the insert need not hold the order of its rows), each numbered from its lines
    before."""
    table = _events(50)
    path = tmp_path / f"events.{fmt}"
    _write(path, table)
    src = readers.detect(path)
    assert src is not None and src.default_type is not None
    rt = src.default_type
    con = dbm.connect(":memory:")
    reading = readers.Reading(src, path, "none", [f.name for f in rt.fields], True, con, typed=rt)
    inner = readers.FORMATS[fmt].direct(reading)  # type: ignore[misc]
    assert inner is not None
    sql = commit.direct_insert_sql(
        rt, validate.checked_sql(rt, f"({readers.in_pieces(inner, 2)})", reading.native)
    )
    bound = {"compression": "none", "file_id": 1, "t": rt.table, "shift": 0}
    # The same file twice, as two pieces: the second numbered after the first's rows.
    bound |= {"path_0": str(path), "path_1": str(path), "before_0": 0, "before_1": 50}
    bound |= {"header_0": True, "header_1": True}
    bound = {k: v for k, v in bound.items() if f"${k}" in sql}
    names = _operators(_explain(con, sql, bound))
    assert names.count("UNION") == 1 and len([n for n in names if "WINDOW" in n]) == 2, names
    con.execute("SET preserve_insertion_order = false")
    assert con.execute(sql, bound).fetchall() == [(100,)]
    pos = con.execute("SELECT pos FROM events ORDER BY pos").fetchall()
    assert [p[0] for p in pos] == list(range(1, 101))


def test_a_feeder_never_outlives_its_statement(tmp_path):
    """A pipe nobody opens (the statement failed first) and a reader that stops early end
    their feeders with the statement; a file shorter than its piece is an error."""
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n' * 100_000)
    size = path.stat().st_size
    cut = [pieces.Piece(0, size // 2, 0), pieces.Piece(size // 2, size, 50_000)]
    pipes = pieces.pipe_paths(tmp_path, "0", cut)
    start = time.monotonic()
    with pieces.feeding(path, cut, pipes):
        pass  # nothing reads
    with pieces.feeding(path, cut, pipes), open(pipes[0], "rb") as fh:
        fh.read(10)  # reads a little, then stops
    assert time.monotonic() - start < 5
    assert not any(p.exists() for p in pipes)
    assert threading.active_count() < 10
    short = [pieces.Piece(0, size + 10, 0)]
    with (
        pytest.raises(OSError, match="could not be read"),
        pieces.feeding(path, short, pipes[:1]),
        open(pipes[0], "rb") as fh,
    ):
        assert len(fh.read()) == size


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_simulated_fleet_read_in_pieces(fmt, small_pieces, tmp_path, monkeypatch):
    """Every fault of the simulator, in both text formats: its larger files read in
    pieces load as read line by line."""
    folder = tmp_path / "in"
    simulate(folder, seed=5, sessions=600, fmt=fmt, faults="all")
    (folder / "truth.json").unlink()
    assert_same(folder, tmp_path, monkeypatch)
    assert small_pieces and max(small_pieces) == THREADS, small_pieces


def _lead_spy(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each read in pieces read its first piece from the file itself."""
    seen: list[bool] = []
    feeding = pieces.feeding

    def spy(source, cut, pipes):
        seen.append(pipes[0] is None)
        return feeding(source, cut, pipes)

    monkeypatch.setattr(pieces, "feeding", spy)
    return seen


def test_the_first_piece_is_read_from_the_file(small_pieces, tmp_path, monkeypatch):
    """A clean JSON Lines file: its first piece from the file itself (DuckDB's JSON
    reader holds what it reads from a pipe), the others piped; loaded as read line by
    line. CSV keeps every piece piped."""
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder / "events.jsonl", _events(4000))
    _write(folder / "events.csv", _events(4000))
    lead = _lead_spy(monkeypatch)
    assert_same(folder, tmp_path, monkeypatch)
    assert sorted(lead) == [False, True], lead


# Lines DuckDB's JSON reader skips without a row (a limit on the first piece's rows would
# then take the next piece's first rows), and one it reads whatever its first byte.
LOOSE = {
    "blank": b"\n",
    "spaces": b"   \n",
    "vertical-tab": b"\x0b\n",
    "form-feed": b"\x0c\n",
    "leading-space": b' {"schema": "mcpSseEvent.v1"}\n',
}


@pytest.mark.parametrize("case", [*LOOSE, "first-line"])
def test_a_loose_line_in_the_first_piece(case, small_pieces, tmp_path, monkeypatch):
    """Such a line in the first piece (in its middle, at the start of a scan buffer, or
    as the file's first line) keeps the piece piped: the count then tells, and the file
    loads as read line by line. Fails when the first piece is read from the file anyway
    (the limit takes a row of the second piece again; the count is even)."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps(r).encode() + b"\n" for r in _events(4000).to_pylist()]
    line = LOOSE.get(case, b"\n")
    at = 0 if case == "first-line" else 700
    data = b"".join([*lines[:at], line, *lines[at:]])
    (folder / "events.jsonl").write_bytes(data)
    lead = _lead_spy(monkeypatch)
    assert_same(folder, tmp_path, monkeypatch)
    assert lead == [False], lead
    # The scan saw it where it is (at a buffer's start too: the buffer before ends a line).
    path = folder / "events.jsonl"
    start = len(b"".join(lines[:at]))
    for chunk in (16 << 10, start or 1000):
        monkeypatch.setattr(identity, "SCAN_CHUNK", chunk)
        sc = identity.scan(path, False, False, set(), {}, starts=True)
        assert sc.clean_to == start, chunk
        assert sc.lines == data.count(b"\n")
    # A clean file is clean to its end; not asked, nothing is known clean.
    (folder / "events.jsonl").write_bytes(b"".join(lines))
    assert identity.scan(path, False, False, set(), {}, starts=True).clean_to == path.stat().st_size
    assert identity.scan(path, False, False, set(), {}).clean_to == 0


def _cut_spy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[pieces.Piece], bool]]:
    """The pieces of each read in pieces, and whether its first was read from the file."""
    seen: list[tuple[list[pieces.Piece], bool]] = []
    feeding = pieces.feeding

    def spy(source, cut, pipes):
        seen.append((list(cut), pipes[0] is None))
        return feeding(source, cut, pipes)

    monkeypatch.setattr(pieces, "feeding", spy)
    return seen


def _rows(cut: list[pieces.Piece], lines: int) -> list[int]:
    """The lines of each piece of a file of `lines` lines."""
    ends = [p.before for p in cut[1:]] + [lines]
    return [end - p.before for p, end in zip(cut, ends, strict=True)]


@pytest.mark.parametrize("loose_at", [None, 300, 1500])
def test_a_first_piece_read_from_the_file_takes_a_larger_share(
    loose_at, small_pieces, tmp_path, monkeypatch
):
    """A first piece read from the file itself takes a larger share than each piped one
    (pieces.LEAD_WEIGHT: a line through a pipe costs DuckDB's JSON reader more), piped
    pieces take equal shares: a clean JSON Lines file's first piece holds more rows than
    each other piece, CSV's pieces (all piped) near equal ones. A loose line within the
    larger share but past the equal one (1500 of 4000 lines) reads the first piece, of
    an equal share, from the file; one within both (300) keeps equal shares, all piped.
    Loaded as read line by line either way. Fails when the first piece keeps an equal
    share, or a larger one that goes through its pipe or past the file's clean lines."""
    folder = tmp_path / "in"
    folder.mkdir()
    lines = [json.dumps(r).encode() + b"\n" for r in _events(4000).to_pylist()]
    if loose_at is not None:
        lines.insert(loose_at, b"\n")
    (folder / "events.jsonl").write_bytes(b"".join(lines))
    if loose_at is None:
        _write(folder / "events.csv", _events(4000))
    seen = _cut_spy(monkeypatch)
    assert_same(folder, tmp_path, monkeypatch)
    by_lead = {lead: _rows(cut, len(lines)) for cut, lead in seen}
    assert len(seen) == len(by_lead) == (2 if loose_at is None else 1), seen
    for lead, rows in by_lead.items():
        assert len(rows) == THREADS, rows
        if lead and loose_at is None:
            assert min(rows[0] / r for r in rows[1:]) > 1.2, rows
        else:
            assert max(rows) < 1.2 * min(rows), rows
    want = [False, True] if loose_at is None else [loose_at == 1500]
    assert sorted(by_lead) == want, seen
