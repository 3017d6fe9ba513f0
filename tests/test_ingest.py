"""Ingest: every record type in every format, bad input to quarantine, idempotency,
atomicity, and raw session ids never stored."""

from __future__ import annotations

import csv
import gzip
import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES
from replaygate.ingest import load as loadmod
from replaygate.ingest.load import ingest
from replaygate.ingest.redact import hmac_hex

KEY = b"test-key-not-secret"

SAMPLES = {
    "sessions": {
        "ts": "2026-11-29T07:45:01.123Z",
        "session_hmac": "a" * 64,
        "generation": 1,
        "state": "SESSION_ACTIVE",
        "rollout_stage": "s1",
        "resumable": True,
    },
    "streams": {
        "ts": 1795938301123,
        "session_hmac": "a" * 64,
        "generation": 1,
        "stream_id": "1",
        "state": "STREAM_OPEN",
        "method": "POST",
        "retry_ms": 1000,
    },
    "events": {
        "ts": "2026-11-29T07:45:01.123+01:00",
        "session_hmac": "a" * 64,
        "generation": 1,
        "stream_id": "1",
        "event_id": "1:0",
        "seq": 0,
        "kind": "priming",
        "disposition": "sent",
    },
    "inbox": {
        "ts": "2026-11-29T07:45:01Z",
        "session_hmac": "a" * 64,
        "generation": 1,
        "stream_id": "1",
        "event_id": "1:0",
        "verdict": "accepted",
    },
    "dispatches": {
        "ts": "2026-11-29T07:45:01Z",
        "dispatch_id": "d1",
        "outcome": "executed",
        "tool_name": "create_ticket",
        "tool_class": "write",
        "http_status": 200,
    },
    "proxy": {
        "ts": "2026-11-29T07:45:01Z",
        "method": "POST",
        "status": 200,
        "session_id": "raw-session-id-0001",
        "origin": "https://app.example.com",
        "duration_ms": 12.5,
    },
    "rollout": {
        "ts": "2026-11-29T07:00:00Z",
        "stage": "s1",
        "action": "start",
        "scope": "read",
        "percent": 25.0,
    },
}


def _write(path: Path, fmt: str, rows: list[dict], gz: bool = False) -> Path:
    if fmt == "jsonl":
        text = "".join(json.dumps(r) + "\n" for r in rows)
        if gz:
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
    elif fmt == "csv":
        cols = list(dict.fromkeys(k for r in rows for k in r))
        lines = [cols] + [
            [
                ""
                if r.get(c) is None
                else str(r.get(c)).lower()
                if isinstance(r.get(c), bool)
                else str(r.get(c))
                for c in cols
            ]
            for r in rows
        ]
        import io

        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows(lines)
        data = buf.getvalue().encode()
        path.write_bytes(gzip.compress(data) if gz else data)
    else:
        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


@pytest.fixture
def con(tmp_path):
    c = dbm.connect(str(tmp_path / "t.duckdb"))
    yield c
    c.close()


FORMATS = [
    ("jsonl", False, ".jsonl"),
    ("jsonl", True, ".jsonl.gz"),
    ("csv", False, ".csv"),
    ("csv", True, ".csv.gz"),
    ("parquet", False, ".parquet"),
]


@pytest.mark.parametrize("table", [rt.table for rt in RECORD_TYPES])
@pytest.mark.parametrize(("fmt", "gz", "ext"), FORMATS)
def test_each_record_type_in_each_format(con, tmp_path, table, fmt, gz, ext):
    path = _write(tmp_path / f"{table}-x{ext}", fmt, [SAMPLES[table]], gz)
    report = ingest(con, [path], Config())
    assert report.rows_by_type() == {table: 1}, report.quarantine_reasons
    assert report.quarantined == 0
    ts = con.execute(f"SELECT ts FROM {table}").fetchone()[0]
    assert ts.tzinfo is not None
    assert ts.year == 2026


def test_timestamps_epoch_and_rfc3339_agree(con, tmp_path):
    rows = [
        dict(SAMPLES["dispatches"], dispatch_id="a", ts="2026-11-29T07:45:01.123Z"),
        dict(SAMPLES["dispatches"], dispatch_id="b", ts=1795938301123),
        dict(SAMPLES["dispatches"], dispatch_id="c", ts="2026-11-29T08:45:01.123+01:00"),
    ]
    ingest(con, [_write(tmp_path / "dispatches.jsonl", "jsonl", rows)], Config())
    assert con.execute("SELECT count(DISTINCT ts) FROM dispatches").fetchone()[0] == 1


def test_native_parquet_timestamp(con, tmp_path):
    t = pa.table(
        {
            "ts": pa.array([1795938301123], pa.timestamp("ms", tz="UTC")),
            "stage": ["s"],
            "action": ["start"],
        }
    )
    pq.write_table(t, tmp_path / "rollout.parquet")
    ingest(con, [tmp_path / "rollout.parquet"], Config())
    ts = con.execute("SELECT epoch_ms(ts) FROM rollout").fetchone()[0]
    assert ts == 1795938301123


def test_mixed_file_routes_by_schema(con, tmp_path):
    schemas = {rt.table: rt.schema for rt in RECORD_TYPES}
    rows = [dict(SAMPLES[t], schema=schemas[t]) for t in SAMPLES]
    report = ingest(con, [_write(tmp_path / "everything.jsonl", "jsonl", rows)], Config())
    assert report.rows_by_type() == {t: 1 for t in SAMPLES}


def test_prefixed_file_with_a_foreign_schema_row(con, tmp_path):
    rows = [SAMPLES["proxy"], dict(SAMPLES["rollout"], schema="mcpRollout.v1")]
    report = ingest(con, [_write(tmp_path / "proxy-1.jsonl", "jsonl", rows)], Config())
    assert report.rows_by_type() == {"proxy": 1, "rollout": 1}


def _quarantine(con):
    return con.execute(
        'SELECT line, "row", record_type, reason FROM quarantine ORDER BY line, "row"'
    ).fetchall()


BAD_LINES = [
    ('{"ts": "2026-11-29T07:45:01Z", "method": "GET", "status": 200', "unparseable JSON"),
    ("[1, 2, 3]", "not a JSON object"),
    ('{"method": "GET", "status": 200}', "missing required field ts"),
    ('{"ts": "yesterday", "method": "GET", "status": 200}', "ts: expected"),
    (
        '{"ts": "2026-11-29T07:45:01Z", "method": "GET", "status": "ok"}',
        "status: expected an integer",
    ),
    (
        '{"ts": "2026-11-29T07:45:01Z", "method": "GET", "status": 200.5}',
        "status: expected an integer",
    ),
    ('{"schema": "mcpNope.v9", "ts": 1}', "unknown record type"),
]


@pytest.mark.parametrize(("line", "reason"), BAD_LINES)
def test_bad_line_is_quarantined_and_neighbours_load(con, tmp_path, line, reason):
    good = json.dumps(SAMPLES["proxy"])
    path = tmp_path / "proxy-bad.jsonl"
    path.write_text(f"{good}\n{line}\n{good}\n")
    report = ingest(con, [path], Config())
    assert report.rows_by_type() == {"proxy": 2}
    q = _quarantine(con)
    assert len(q) == 1
    assert q[0][0] == 2
    assert q[0][3].startswith(reason)


def test_unknown_enum_value(con, tmp_path):
    row = dict(SAMPLES["sessions"], state="SESSION_ZOMBIE")
    path = _write(tmp_path / "sessions.jsonl", "jsonl", [SAMPLES["sessions"], row])
    ingest(con, [path], Config())
    assert _quarantine(con) == [(2, None, "mcpHttpSession.v1", "state: not an allowed value")]


def test_no_record_type(con, tmp_path):
    path = tmp_path / "misc.jsonl"
    path.write_text(json.dumps({"ts": 1}) + "\n")
    ingest(con, [path], Config())
    assert _quarantine(con)[0][3].startswith("no record type")


def test_blank_lines_keep_line_numbers(con, tmp_path):
    good = json.dumps(SAMPLES["proxy"])
    path = tmp_path / "proxy.jsonl"
    path.write_text(f"{good}\n\n\n{{broken\n{good}\n")
    report = ingest(con, [path], Config())
    assert report.rows_by_type() == {"proxy": 2}
    assert _quarantine(con)[0][0] == 4
    assert con.execute("SELECT list(pos ORDER BY pos) FROM proxy").fetchone()[0] == [1, 5]


def test_csv_wrong_column_count_and_bad_value(con, tmp_path):
    path = tmp_path / "proxy.csv"
    path.write_text(
        "ts,method,status\n2026-11-29T07:45:01Z,GET,200\n2026-11-29T07:45:02Z,GET\n"
        "2026-11-29T07:45:03Z,GET,abc\n2026-11-29T07:45:04Z,POST,201\n"
    )
    report = ingest(con, [path], Config())
    assert report.rows_by_type() == {"proxy": 2}
    reasons = {r[3] for r in _quarantine(con)}
    assert "malformed CSV row: missing columns" in reasons
    assert "status: expected an integer" in reasons


def test_truncated_gzip_keeps_the_readable_prefix(con, tmp_path):
    good = json.dumps(SAMPLES["proxy"])
    data = gzip.compress(("\n".join([good] * 2000) + "\n").encode())
    path = tmp_path / "proxy.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    report = ingest(con, [path], Config())
    loaded = report.rows_by_type()["proxy"]
    assert 0 < loaded < 2000
    reasons = [r[3] for r in _quarantine(con)]
    assert any(r.startswith("truncated gzip") for r in reasons)


def test_unreadable_parquet(con, tmp_path):
    path = tmp_path / "inbox.parquet"
    path.write_bytes(b"PAR1 definitely not parquet")
    good = _write(tmp_path / "rollout.jsonl", "jsonl", [SAMPLES["rollout"]])
    report = ingest(con, [path, good], Config())
    assert report.rows_by_type() == {"rollout": 1}
    assert _quarantine(con)[0][3].startswith("unreadable file")


def test_reingest_same_content_adds_nothing(con, tmp_path):
    path = _write(tmp_path / "proxy.jsonl", "jsonl", [SAMPLES["proxy"]] * 3)
    ingest(con, [path], Config())
    again = ingest(con, [tmp_path], Config())
    assert [f.status for f in again.files] == ["unchanged"]
    copy = tmp_path / "copy" / "proxy-copy.jsonl"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    third = ingest(con, [copy], Config())
    assert [f.status for f in third.files] == ["duplicate"]
    assert con.execute("SELECT count(*) FROM proxy").fetchone()[0] == 3


def test_changed_file_replaces_its_rows(con, tmp_path):
    path = _write(tmp_path / "proxy.jsonl", "jsonl", [SAMPLES["proxy"]] * 3)
    ingest(con, [path], Config())
    # The first line changed: not the same file grown, a rewritten one.
    _write(path, "jsonl", [{**SAMPLES["proxy"], "status": 201}] + [SAMPLES["proxy"]] * 4)
    report = ingest(con, [path], Config())
    assert report.files[0].status == "replaced"
    assert con.execute("SELECT count(*) FROM proxy").fetchone()[0] == 5


def test_grown_file_is_read_from_where_it_stopped(con, tmp_path):
    path = _write(tmp_path / "proxy.jsonl", "jsonl", [SAMPLES["proxy"]] * 3)
    ingest(con, [path], Config())
    _write(path, "jsonl", [SAMPLES["proxy"]] * 5)
    report = ingest(con, [path], Config())
    assert report.files[0].status == "appended"
    assert report.rows_by_type() == {"proxy": 2}
    assert con.execute("SELECT list(pos ORDER BY pos) FROM proxy").fetchone()[0] == [1, 2, 3, 4, 5]


class _Sent:
    """A connection that keeps the text of every statement sent through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con = con
        self.sql: list[str] = []

    def execute(self, sql, params=None):
        self.sql.append(" ".join(sql.split()))
        return self._con.execute(sql, params) if params is not None else self._con.execute(sql)

    def __getattr__(self, name):
        return getattr(self._con, name)


# What a load may ask of a file's id before it writes it: its facts, its quarantine rows'
# path, its manifest row's counts.
_LOOK_UPS = (
    "DELETE FROM file_facts",
    "SELECT fact FROM file_facts WHERE file_id = $f AND how = 'values'",
    "UPDATE quarantine SET path",
    "SELECT rows_by_type FROM files",
)


def test_a_new_file_is_not_looked_up_by_the_id_drawn_for_it(con, tmp_path):
    """A new file's id is drawn for its load, so nothing is stored under it yet: its load
    neither deletes nor reads back facts, renames no quarantine row's path and does not
    read back the manifest row it wrote (a statement each per file, paid again by every
    batch of a load in batches). A grown file's load still reads what it adds to. Either
    way the manifest, the facts and the quarantine rows are what they were."""
    good = json.dumps(SAMPLES["proxy"])
    path = tmp_path / "proxy.jsonl"
    path.write_text(f"{good}\n{{broken\n{good}\n")
    sent = _Sent(con)
    ingest(sent, [path], Config())  # type: ignore[arg-type]
    assert [s for s in sent.sql if s.startswith(_LOOK_UPS)] == []
    shown = con.execute("SELECT path FROM files").fetchone()[0]
    assert con.execute("SELECT path, line FROM quarantine").fetchall() == [(shown, 2)]
    assert con.execute("SELECT rows_by_type FROM files").fetchone()[0] == '{"proxy": 2}'
    facts = con.execute("SELECT fact, how FROM file_facts ORDER BY fact").fetchall()
    assert ("proxy.origin", "values") in facts
    with open(path, "a") as fh:
        fh.write(f"{good}\n")
    sent.sql.clear()
    report = ingest(sent, [path], Config())  # type: ignore[arg-type]
    assert report.files[0].status == "appended"
    assert [s for s in sent.sql if s.startswith(_LOOK_UPS)] != []
    assert con.execute("SELECT rows_by_type FROM files").fetchone()[0] == '{"proxy": 3}'
    assert con.execute("SELECT fact, how FROM file_facts ORDER BY fact").fetchall() == facts


def test_failure_mid_ingest_leaves_db_unchanged(con, tmp_path, monkeypatch):
    first = (
        _write(tmp_path / "a" / "rollout.jsonl", "jsonl", [SAMPLES["rollout"]])
        if (tmp_path / "a").mkdir() is None
        else None
    )
    ingest(con, [first], Config())
    before = {
        t.table: con.execute(f"SELECT count(*) FROM {t.table}").fetchone()[0] for t in RECORD_TYPES
    }
    files_before = con.execute("SELECT count(*) FROM files").fetchone()[0]
    (tmp_path / "b").mkdir()
    _write(tmp_path / "b" / "proxy.jsonl", "jsonl", [SAMPLES["proxy"]])
    _write(tmp_path / "b" / "sessions.csv", "csv", [SAMPLES["sessions"]])
    real = loadmod._Loader._manifest
    calls = {"n": 0}

    def boom(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated kill")
        return real(self, *a, **k)

    monkeypatch.setattr(loadmod._Loader, "_manifest", boom)
    with pytest.raises(KeyboardInterrupt):
        ingest(con, [tmp_path / "b"], Config())
    after = {
        t.table: con.execute(f"SELECT count(*) FROM {t.table}").fetchone()[0] for t in RECORD_TYPES
    }
    assert after == before
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == files_before
    assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 0


def _all_text(con) -> list[str]:
    out = []
    tables = [
        r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()
    ]
    for t in tables:
        cols = [
            r[0]
            for r in con.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = $t "
                "AND data_type IN ('VARCHAR', 'JSON')",
                {"t": t},
            ).fetchall()
        ]
        for c in cols:
            out += [v for (v,) in con.execute(f'SELECT "{c}" FROM "{t}"').fetchall() if v]
    return out


def test_raw_session_id_never_stored(con, tmp_path):
    raw = SAMPLES["proxy"]["session_id"]
    bad = dict(SAMPLES["proxy"], status="oops")
    path = _write(tmp_path / "proxy.jsonl", "jsonl", [SAMPLES["proxy"], bad])
    _write(tmp_path / "proxy.csv", "csv", [SAMPLES["proxy"]])
    ingest(con, [path, tmp_path / "proxy.csv"], Config())
    texts = _all_text(con)
    assert not any(raw in t for t in texts)
    hm = con.execute("SELECT DISTINCT session_hmac FROM proxy").fetchall()
    assert hm == [(hmac_hex(KEY, raw),)]
    assert con.execute("SELECT bool_and(raw_session_id) FROM proxy").fetchone()[0]


def test_raw_session_id_without_key_is_dropped_with_a_warning(con, tmp_path, monkeypatch):
    monkeypatch.delenv("REPLAYGATE_HMAC_KEY")
    path = _write(tmp_path / "proxy.jsonl", "jsonl", [SAMPLES["proxy"]])
    report = ingest(con, [path], Config())
    assert any("REPLAYGATE_HMAC_KEY" in w for w in report.warnings)
    assert con.execute("SELECT session_hmac, raw_session_id FROM proxy").fetchall() == [
        (None, True)
    ]
    assert not any(SAMPLES["proxy"]["session_id"] in t for t in _all_text(con))


def test_sql_hmac_matches_python(con):
    from replaygate.ingest.redact import hmac_sql, padded_keys

    for key in (b"k", b"x" * 100):
        got = con.execute(
            f"SELECT {hmac_sql('$v')}", {"v": "sessión-☃", **padded_keys(key)}
        ).fetchone()[0]
        assert got == hmac_hex(key, "sessión-☃")


def test_read_only_connection_to_missing_db_is_an_error(tmp_path):
    from replaygate.core.errors import ReplaygateError

    with pytest.raises(ReplaygateError):
        dbm.connect(str(tmp_path / "nope.duckdb"), read_only=True)


def test_duckdb_is_the_store(con):
    assert isinstance(con, duckdb.DuckDBPyConnection)


def test_empty_files_are_neither_errors_nor_duplicates(con, tmp_path):
    (tmp_path / "sessions.jsonl").write_text("")
    (tmp_path / "proxy.csv").write_text("")
    (tmp_path / "proxy-header-only.csv").write_text("ts,method,status\n")
    (tmp_path / "events-blank.jsonl").write_text("\n\n")
    report = ingest(con, [tmp_path], Config())
    status = {Path(f.path).name: f.status for f in report.files}
    assert status == {
        "sessions.jsonl": "empty",
        "proxy.csv": "empty",
        "proxy-header-only.csv": "loaded",
        "events-blank.jsonl": "loaded",
    }
    assert report.quarantined == 0


def test_invalid_utf8_and_long_lines_are_quarantined_with_their_lines(con, tmp_path):
    good = json.dumps(SAMPLES["proxy"]).encode()
    path = tmp_path / "proxy.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                good,
                b'{"ts": "2026\xff", "method": "GET", "status": 200}',
                good,
                b'{"pad": "' + b"a" * (33 << 20) + b'"}',
                b"\xfe\xfe",
                good,
            ]
        )
        + b"\n"
    )
    report = ingest(con, [path], Config())
    assert report.rows_by_type() == {"proxy": 3}
    assert sorted(_quarantine(con)) == [
        (2, None, None, "invalid UTF-8"),
        (4, None, None, "line too long"),
        (5, None, None, "invalid UTF-8"),
    ]
    assert con.execute("SELECT list(pos ORDER BY pos) FROM proxy").fetchone()[0] == [1, 3, 6]


def _loaded(con) -> dict[str, list[tuple]]:
    """Every loaded row, quarantine row and manifest row, in a stable order."""
    out = {
        t.table: sorted(map(repr, con.execute(f"SELECT * FROM {t.table}").fetchall()))
        for t in RECORD_TYPES
    }
    out["quarantine"] = sorted(map(repr, con.execute("SELECT * FROM quarantine").fetchall()))
    out["files"] = sorted(
        map(repr, con.execute("SELECT * EXCLUDE (ingested_at) FROM files").fetchall())
    )
    return out


def test_large_files_staged_in_a_scratch_database_load_the_same(tmp_path, monkeypatch):
    """A file over SCRATCH_BYTES is staged into a scratch database instead of a temporary
    table: the same rows, positions and quarantine, in every format, grown files too; the
    scratch database is gone after each batch, and after a failed one."""
    good = json.dumps(SAMPLES["proxy"])
    src = tmp_path / "in"
    src.mkdir()
    (src / "proxy.jsonl").write_text(f"{good}\n\n{{broken\n{good}\n" + f"{good}\n" * 50)
    (src / "streams.csv").write_text(
        "ts,session_hmac,generation,stream_id,state,method\n"
        f"2026-11-29T07:45:01Z,{'a' * 64},1,1,STREAM_OPEN,POST\n"
        f"2026-11-29T07:45:02Z,{'a' * 64},1,1,NOPE,POST\n"
        f"2026-11-29T07:45:03Z,{'a' * 64},1\n"
    )
    _write(src / "events.parquet", "parquet", [SAMPLES["events"]] * 20)
    _write(src / "inbox.jsonl.gz", "jsonl", [SAMPLES["inbox"]] * 30, gz=True)
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", KEY.decode())
    scratch: list[str] = []
    real = loadmod._Loader._staging_table

    def spy(self, n, read_path):
        name = real(self, n, read_path)
        scratch.append(name)
        return name

    monkeypatch.setattr(loadmod._Loader, "_staging_table", spy)
    # Every file staged (none read straight into its table), so each format is staged.
    monkeypatch.setattr(loadmod, "DIRECT_READS", False)
    results = []
    for limit in (loadmod.SCRATCH_BYTES, 0):
        monkeypatch.setattr(loadmod, "SCRATCH_BYTES", limit)
        scratch.clear()
        c = dbm.connect(str(tmp_path / f"db-{limit}.duckdb"))
        ingest(c, [src], Config())
        with (src / "proxy.jsonl").open("a") as fh:
            fh.write(f"{good}\nnot json\n{good}\n")
        grown = {Path(f.path).name: f.status for f in ingest(c, [src], Config()).files}
        assert grown["proxy.jsonl"] == "appended"
        (src / "proxy.jsonl").write_text(f"{good}\n\n{{broken\n{good}\n" + f"{good}\n" * 50)
        staged_in_scratch = all(t.startswith(f"{loadmod.SCRATCH}.") for t in scratch)
        assert staged_in_scratch == (limit == 0) and len(scratch) >= 5
        names = [r[0] for r in c.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
        assert loadmod.SCRATCH not in names
        results.append(_loaded(c))
        c.close()
    assert results[0] == results[1]
    assert results[0]["quarantine"] and results[0]["proxy"]

    # A batch that fails after staging rolls back and leaves no scratch database attached.
    c = dbm.connect(str(tmp_path / "db-fail.duckdb"))
    monkeypatch.setattr(
        loadmod._Loader, "_manifest", lambda *a, **k: (_ for _ in ()).throw(OSError("disk"))
    )
    with pytest.raises(OSError):
        ingest(c, [src], Config())
    assert c.execute("SELECT count(*) FROM files").fetchone()[0] == 0
    assert all(
        c.execute(f"SELECT count(*) FROM {t.table}").fetchone()[0] == 0 for t in RECORD_TYPES
    )
    names = [r[0] for r in c.execute("SELECT database_name FROM duckdb_databases()").fetchall()]
    assert loadmod.SCRATCH not in names
    c.close()


@pytest.mark.parametrize("direct", [True, False])
def test_sessions_noted_only_for_an_analysis_to_bring_up_to_date(tmp_path, monkeypatch, direct):
    """An ingest notes the new rows' sessions for an incremental analysis
    (queries/incremental.py) only when one can follow: not before the first analysis,
    nor after a change left unnoted (the next analysis is a full one either way); once
    an analysis has run, an append notes them (read straight in, or staged)."""
    from replaygate.queries import incremental

    from .test_ingest_fast import CONFIG, _session

    monkeypatch.setattr(loadmod, "DIRECT_READS", direct)
    folder = tmp_path / "in"
    folder.mkdir()
    log = folder / "sessions.jsonl"
    log.write_text("".join(json.dumps(_session(i)) + "\n" for i in range(3)))
    con = dbm.connect(str(tmp_path / "db.duckdb"))
    try:

        def pending() -> tuple[int, int]:
            return (
                con.execute("SELECT count(*) FROM analysis_pending").fetchone()[0],
                con.execute("SELECT count(*) FROM analysis_pending_rows").fetchone()[0],
            )

        ingest(con, [folder], CONFIG)
        assert pending() == (0, 0)  # never analysed: the next analysis is a full one
        incremental.clear_pending(con)  # what an analysis leaves
        with open(log, "a") as fh:
            fh.write(json.dumps(_session(3, session_hmac="cd" * 32)) + "\n")
        ingest(con, [folder], CONFIG)
        assert pending() == (1, 1)
        assert con.execute("SELECT session_hmac FROM analysis_pending").fetchall() == [("cd" * 32,)]
        # A change since that was not noted (an older version's ingest): nothing more is.
        con.execute("UPDATE meta SET value = '0' WHERE key = 'analysis_noted_through'")
        with open(log, "a") as fh:
            fh.write(json.dumps(_session(4, session_hmac="ef" * 32)) + "\n")
        ingest(con, [folder], CONFIG)
        assert pending() == (1, 1)
    finally:
        con.close()
