"""Incremental ingest: the sample fleet written in steps, cut mid-line and rotated in every
form, ends up exactly as one ingest of the final files (rows, quarantine, findings)."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import random
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replaygate.core import config as cfg
from replaygate.core import db as dbm
from replaygate.core.contract import RECORD_TYPES
from replaygate.core.db import get_meta
from replaygate.ingest import identity
from replaygate.ingest.load import ingest
from replaygate.queries import incremental, runner

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
CONF = cfg.load(str(SAMPLE / "replaygate.toml"))


def _content(name: str) -> bytes:
    p = SAMPLE / name
    return gzip.decompress(p.read_bytes()) if name.endswith(".gz") else p.read_bytes()


def _cut(data: bytes, frac: float) -> bytes:
    """A prefix ending mid-line, as a writer leaves it."""
    n = int(len(data) * frac)
    while data[n - 1 : n] == b"\n" or data[n : n + 1] == b"\n":
        n += 1
    return data[:n]


def _line_end(data: bytes, frac: float) -> int:
    """The end of the line at `frac` of the data (where a rotation splits the file)."""
    return data.index(b"\n", int(len(data) * frac)) + 1


def _write(path: Path, data: bytes, gz: bool = False) -> None:
    path.write_bytes(gzip.compress(data) if gz else data)


def _snapshot(con) -> dict:
    out = {}
    for rt in RECORD_TYPES:
        out[rt.table] = con.execute(
            f"""SELECT f.path, t.* EXCLUDE (file_id) FROM {rt.table} t
                JOIN files f USING (file_id) ORDER BY ALL"""
        ).fetchall()
    out["quarantine"] = con.execute(
        "SELECT * EXCLUDE (file_id) FROM quarantine ORDER BY ALL"
    ).fetchall()
    out["files"] = con.execute(
        """SELECT path, rows_loaded, rows_quarantined, rows_by_type::VARCHAR FROM files
           WHERE status = 'loaded' ORDER BY path"""
    ).fetchall()
    # What each file can show (cannottell.py leaves files out by it): a grown file keeps
    # what its earlier rows showed and adds what only its new rows show.
    out["file_facts"] = con.execute(
        """SELECT f.path, x.fact, x.how FROM file_facts x JOIN files f USING (file_id)
           WHERE f.status = 'loaded' ORDER BY ALL"""
    ).fetchall()
    runner.analyse(con, CONF)
    rows = con.execute("SELECT * EXCLUDE (detail), detail FROM findings").fetchall()
    out["findings"] = sorted((r[:-1] + (_canonical(r[-1]),) for r in rows), key=repr)
    return out


def _canonical(detail: str | None) -> str:
    # Some detectors list ids in no particular order (list(DISTINCT ...)); compare as sets.
    d = json.loads(detail) if detail else {}
    return json.dumps(
        {k: sorted(map(str, v)) if isinstance(v, list) else v for k, v in d.items()},
        sort_keys=True,
    )


def test_growth_in_steps_with_every_rotation_equals_one_ingest(tmp_path, monkeypatch):
    S, E, P = (
        _content("sessions.jsonl"),
        _content("events.jsonl.gz"),
        _content("proxy-access.jsonl.gz"),
    )
    ST, D, R = _content("streams.csv.gz"), _content("dispatches.csv"), _content("rollout.csv")
    live = tmp_path / "live"
    live.mkdir()
    db = str(tmp_path / "inc.duckdb")
    statuses = []

    # Every analysis after the first is incremental, however much arrived.
    monkeypatch.setattr(incremental, "MAX_SHARE", 1.0)
    modes = []

    def run(paths, cwd):
        monkeypatch.chdir(cwd)
        con = dbm.connect(db)
        try:
            rep = ingest(con, paths, CONF)
            runner.analyse(con, CONF)
            modes.append(get_meta(con, "analysis_mode"))
        finally:
            con.close()
        statuses.append({Path(f.path).name: f.status for f in rep.files})
        return rep

    # Step 1: every text file cut at 40 % (the rollout log at 75 %), mid-line.
    _write(live / "sessions.jsonl", _cut(S, 0.4))
    _write(live / "events.jsonl", _cut(E, 0.4))
    _write(live / "proxy-access.jsonl", _cut(P, 0.4))
    _write(live / "streams.csv", _cut(ST, 0.4))
    _write(live / "dispatches.csv", _cut(D, 0.4))
    _write(live / "rollout.csv", _cut(R, 0.75))
    shutil.copy(SAMPLE / "inbox.parquet", live / "inbox.parquet")
    first = run([live], tmp_path)
    # The line still being written is neither loaded nor quarantined.
    assert first.quarantined == 0 or all("unparseable" not in r for r in first.quarantine_reasons)

    # Step 2, from inside the folder (relative paths): sessions, streams and dispatches
    # grow to 75 %; the event log is copied and truncated (copytruncate) and
    # goes on; the proxy log is renamed and a new one starts at its name in the same run.
    e1 = _line_end(E, 0.6)
    p1 = _line_end(P, 0.55)
    _write(live / "sessions.jsonl", _cut(S, 0.75))
    _write(live / "events.jsonl.1", E[:e1])
    _write(live / "events.jsonl", _cut(E, 0.75)[e1:])
    os.rename(live / "proxy-access.jsonl", live / "proxy-access.jsonl.1")
    _write(live / "proxy-access.jsonl.1", P[:p1])
    _write(live / "proxy-access.jsonl", _cut(P, 0.75)[p1:])
    _write(live / "streams.csv", _cut(ST, 0.75))
    _write(live / "dispatches.csv", _cut(D, 0.75))
    second = run(["."], live)
    assert second.files and statuses[-1]["events.jsonl.1"] == "appended"
    assert statuses[-1]["proxy-access.jsonl.1"] == "appended"
    assert statuses[-1]["proxy-access.jsonl"] == "loaded"
    assert statuses[-1]["inbox.parquet"] == "unchanged"
    assert statuses[-1]["rollout.csv"] == "unchanged"

    # Step 3, by absolute path: everything is whole. The sessions ledger grows and is
    # renamed with a date; the rotated event log is compressed; the proxy logs shift
    # (.1 -> .2.gz, the partly read current one -> .1.gz, a new current one); the stream
    # ledger is rotated with a date and a new one (with its header) starts; a dated,
    # compressed proxy log appears.
    p2 = _line_end(P, 0.75)
    s2 = _line_end(ST, 0.75)
    header = ST[: ST.index(b"\n") + 1]
    os.remove(live / "sessions.jsonl")
    _write(live / "sessions.jsonl-20261130", S)
    os.remove(live / "events.jsonl.1")
    _write(live / "events.jsonl.1.gz", E[:e1], gz=True)
    _write(live / "events.jsonl", E[e1:])
    os.remove(live / "proxy-access.jsonl.1")
    _write(live / "proxy-access.jsonl.2.gz", P[:p1], gz=True)
    os.remove(live / "proxy-access.jsonl")
    _write(live / "proxy-access.jsonl.1.gz", P[p1:p2], gz=True)
    _write(live / "proxy-access.jsonl", P[p2:])
    os.remove(live / "streams.csv")
    _write(live / "streams.csv-20261130", ST[:s2])
    _write(live / "streams.csv", header + ST[s2:])
    _write(live / "dispatches.csv", D)
    _write(live / "rollout.csv", R)
    _write(live / "proxy-edge.log-20261130.gz", (SAMPLE / "proxy-edge.jsonl").read_bytes(), True)
    run([str(live.resolve())], tmp_path)
    st = statuses[-1]
    assert st["sessions.jsonl-20261130"] == "appended"
    assert st["events.jsonl.1.gz"] == "unchanged"
    assert st["proxy-access.jsonl.2.gz"] == "unchanged"
    assert st["proxy-access.jsonl.1.gz"] == "appended"
    assert st["proxy-edge.log-20261130.gz"] == "loaded"

    # Step 4: nothing new.
    run([live], tmp_path)
    assert set(statuses[-1].values()) == {"unchanged"}

    # A grown rollout log (step 3) moves stage windows: a full analysis.
    assert modes == ["full", "incremental", "full", "full"]
    con = dbm.connect(db)
    grown = _snapshot(con)
    con.close()
    one = dbm.connect(str(tmp_path / "one.duckdb"))
    monkeypatch.chdir(tmp_path)
    ingest(one, [live], CONF)
    once = _snapshot(one)
    one.close()
    assert sum(len(v) for k, v in once.items() if k in ("sessions", "events", "proxy")) > 30000
    for key in once:
        assert grown[key] == once[key], key


@pytest.mark.parametrize("gz", [False, True])
def test_trailing_partial_line_waits(tmp_path, gz):
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    line = b'{"ts": "2026-11-29T07:00:00Z", "stage": "s1", "action": "start", "scope": "read"}\n'
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(line + line[:30])
    rep = ingest(con, [path], CONF)
    assert rep.rows_by_type() == {"rollout": 1} and rep.quarantined == 0
    assert "no newline yet" in rep.files[0].note
    path.write_bytes(line * 3)
    rep = ingest(con, [path], CONF)
    assert rep.rows_by_type() == {"rollout": 2} and rep.quarantined == 0
    assert con.execute("SELECT list(pos ORDER BY pos) FROM rollout").fetchone()[0] == [1, 2, 3]
    if gz:
        # The rotated, compressed file holds nothing new.
        gzp = tmp_path / "rollout.jsonl.1.gz"
        gzp.write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
        rep = ingest(con, [tmp_path], CONF)
        assert [f.status for f in rep.files] == ["unchanged"]
        assert con.execute("SELECT count(*) FROM rollout").fetchone()[0] == 3
    con.close()


def test_copy_of_a_loaded_file_is_a_duplicate_not_a_move(tmp_path):
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    line = b'{"ts": "2026-11-29T07:00:00Z", "stage": "s1", "action": "start", "scope": "read"}\n'
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "rollout.jsonl").write_bytes(line * 2)
    ingest(con, [tmp_path / "a"], CONF)
    (tmp_path / "b" / "rollout.jsonl").write_bytes(line * 3)
    rep = ingest(con, [tmp_path / "b"], CONF)
    assert [f.status for f in rep.files] == ["duplicate"]
    # Renamed away (the old path is gone): the same file, grown.
    (tmp_path / "a" / "rollout.jsonl").unlink()
    rep = ingest(con, [tmp_path / "b"], CONF)
    assert [f.status for f in rep.files] == ["appended"]
    assert con.execute("SELECT count(*) FROM rollout").fetchone()[0] == 3
    con.close()


def _found(con, tables: tuple[str, ...]) -> dict:
    """The findings (details canonical), the coverage and these tables, each sorted."""
    out = {}
    rows = con.execute("SELECT * EXCLUDE (detail), detail FROM findings").fetchall()
    out["findings"] = sorted((r[:-1] + (_canonical(r[-1]),) for r in rows), key=repr)
    out["coverage"] = con.execute(
        "SELECT detector, status, rows FROM coverage ORDER BY 1"
    ).fetchall()
    for t in tables:
        out[t] = sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
    return out


def _analysis_state(con) -> dict:
    from replaygate.queries import gates

    out = _found(con, ("cannot_tell", "cannot_tell_stages", "blind_files"))
    for (t,) in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name LIKE 'a\\_%' ESCAPE '\\'"
    ).fetchall():
        out[t] = sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=repr)
    out.update(_gate_facts_state(con))
    doc = gates.evaluate(con, CONF, all_stages=True)
    for s in doc["stages"]:
        for g in s["gates"]:
            g["evidence"] = sorted(map(repr, g.get("evidence") or []))
    out["gates"] = json.dumps(doc, sort_keys=True, default=str)
    return out


def _gate_facts_state(con) -> dict:
    """The gate facts as their readers read them (gate_facts()), their tables and what each
    session tells them: the integer key that names a session in them is the analysis's
    own (an incremental one numbers new sessions after the last), not compared."""
    return {
        "gate_facts": sorted(con.execute("SELECT * FROM gate_facts()").fetchall(), key=repr),
        **{
            t: sorted(con.execute(f"SELECT * EXCLUDE (sid) FROM {t}").fetchall(), key=repr)
            for t in (
                "a_gate_sessions",
                "a_gate_units",
                "a_gate_details",
                "a_gate_requests",
                "a_gate_findings",
            )
        },
    }


def _without_version(data: bytes, lines: int) -> bytes:
    rows = [json.loads(line) for line in data.splitlines()[:lines]]
    return b"".join(
        json.dumps({k: v for k, v in r.items() if k != "protocol_version"}).encode() + b"\n"
        for r in rows
    )


def _line_one(data: dict) -> bytes:
    s = data["sessions.jsonl"]
    return s[: s.index(b"\n") + 1]


def _proxy_row(ts: datetime, method: str, session: str | None, **extra) -> bytes:
    row = {"ts": ts.isoformat(), "method": method, "status": 200, "path": "/mcp"}
    if session:
        row["session_hmac"] = session
    return json.dumps(row | extra).encode() + b"\n"


def _gate_fact_units(con, data: dict[str, bytes]) -> tuple[dict[str, bytes], datetime]:
    """Rows to append (by file) whose gate facts an incremental analysis gets wrong if it
    builds them from the new rows alone (test above), and the time of the new requests."""
    getter, last_ms = con.execute(
        """SELECT arg_max(session_hmac, (ts, file_id, pos)), epoch_ms(max(ts)) FROM proxy
           WHERE method = 'GET' AND session_hmac IS NOT NULL"""
    ).fetchone()
    t = datetime.fromtimestamp((last_ms + 1000) / 1000, UTC)
    # A session of a stage's cohort in a stage where none of the other new rows' facts
    # fall (the getter's stages, the stage whose window holds t).
    moved, stage = con.execute(
        """SELECT min(session_hmac), min(g.stage) FROM gate_facts() g
           JOIN a_sessions a USING (session_hmac)
           WHERE g.fact = 'delivered_events' AND a.cohort = g.stage
             AND g.stage NOT IN (SELECT stage FROM gate_facts()
                                 WHERE session_hmac = $getter AND stage IS NOT NULL)
             AND g.stage NOT IN (SELECT stage FROM a_stage_windows
                                 WHERE $t >= start_ts AND (end_ts IS NULL OR $t < end_ts))
           GROUP BY g.stage ORDER BY g.stage LIMIT 1""",
        {"getter": getter, "t": t},
    ).fetchone()
    first = next(
        json.loads(line) for line in data["sessions.jsonl"].splitlines() if moved in str(line)
    )
    other = "shadow-10pct" if stage != "shadow-10pct" else "write-10pct-v2"
    earlier = datetime.fromtimestamp(datetime.fromisoformat(first["ts"]).timestamp() - 0.001, UTC)
    late = dict(first, rollout_stage=other, ts=earlier.isoformat())
    post = dict(jsonrpc_method="tools/call", request_id="r-new", body_bytes_sent=512)
    rows = {
        "proxy-access.jsonl": _proxy_row(t, "GET", getter)
        + _proxy_row(t, "POST", None, resp_content_type="text/event-stream", **post),
        "dispatches.csv": _dispatch(
            last_ms + 2000, "d-new", "pay", None, "svc-new", "r-new", None, "p-new"
        ),
        "sessions.jsonl": json.dumps(late).encode() + b"\n",
    }
    return rows, t


@pytest.mark.slow  # half a minute: ./dev test runs it beside the others
def test_analysis_after_appends_follows_what_changed_and_equals_a_full_one(tmp_path, monkeypatch):
    data = {
        "sessions.jsonl": _content("sessions.jsonl"),
        "events.jsonl": _content("events.jsonl.gz"),
        "proxy-access.jsonl": _content("proxy-access.jsonl.gz"),
        "streams.csv": _content("streams.csv.gz"),
        "dispatches.csv": _content("dispatches.csv"),
        # A log that cannot show Last-Event-ID: left out of the detectors that need it
        # in every run, its units `cannot_tell`, recounted as it grows.
        "proxy-edge.jsonl": _content("proxy-edge.jsonl"),
        # One that cannot show MCP-Protocol-Version, with session ids: left out of a
        # session-local detector (missing_protocol_version) in the scoped run as well.
        "proxy-old.jsonl": _without_version(_content("proxy-access.jsonl.gz"), 400),
    }
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(SAMPLE / "inbox.parquet", live / "inbox.parquet")
    shutil.copy(SAMPLE / "rollout.csv", live / "rollout.csv")
    con = dbm.connect(str(tmp_path / "t.duckdb"))

    def whole(*args):
        raise AssertionError("the gate facts were built whole after an append")

    for step, frac in enumerate((0.96, 0.975, 0.99, 1.0, None)):
        if frac is None:
            # Units whose gate facts depend on more than their own row: a GET of a
            # session that had GETs (a reconnect by its earlier GETs), a sessionless
            # answered POST and write (attributed by their time alone), and a line logged
            # late that puts a session of one stage's cohort into another's (its facts
            # leave a stage where no new fact lands: its samples must be summarised again).
            moving, t = _gate_fact_units(con, data)
            for name, rows in moving.items():
                with open(live / name, "ab") as fh:
                    fh.write(rows)
        else:
            for name, content in data.items():
                _write(live / name, _cut(content, frac) if frac < 1 else content)
        ingest(con, [live], CONF)
        with monkeypatch.context() as mp:
            if step:
                mp.setattr(runner, "_gate_facts", whole)
            runner.analyse(con, CONF)
        if step == 0:
            assert get_meta(con, "analysis_mode") == "full"
            continue
        assert get_meta(con, "analysis_mode") == "incremental"
        assert con.execute("SELECT count(*) FROM analysis_pending").fetchone()[0] == 0
        after_append = _analysis_state(con)
        if frac is None:
            assert con.execute(
                """SELECT fact, session_hmac IS NULL, reconnect FROM gate_facts()
                   WHERE ts = $t AND fact IN ('proxy_records', 'sized_answers')
                      OR ts = $t + INTERVAL 1 SECOND AND fact = 'write_dispatches'
                   ORDER BY ALL""",
                {"t": t},
            ).fetchall() == [
                ("proxy_records", False, True),
                ("proxy_records", True, False),
                ("sized_answers", True, None),
                ("write_dispatches", True, None),
            ]
        runner.analyse(con, CONF, force=True)
        assert get_meta(con, "analysis_mode") == "full"
        scratch = _analysis_state(con)
        for key in scratch:
            assert after_append[key] == scratch[key], (step, key)
    assert len(scratch["findings"]) > 20
    assert {r[0] for r in scratch["blind_files"]} >= {"missing_protocol_version", "cursor_on_post"}
    assert scratch["cannot_tell"]
    # Anything unexpected in an incremental run: rolled back, then a full one.
    import duckdb

    def broken(con, q):
        raise duckdb.BinderException("simulated")

    (live / "sessions.jsonl").write_bytes(data["sessions.jsonl"] + _line_one(data))
    ingest(con, [live], CONF)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(incremental, "_scoped_prep", broken)
        runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "full" and runner.is_current(con, CONF)
    # A statement that fails inside the scope aborts the transaction, which then refuses
    # the run's clean-up: the full analysis after the rollback still reads the tables.

    def failing(con, q):
        incremental._search(con, scoped=True)
        con.execute("SELECT * FROM no_such_table")

    (live / "sessions.jsonl").write_bytes(data["sessions.jsonl"] + _line_one(data) * 2)
    ingest(con, [live], CONF)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(incremental, "_scoped_prep", failing)
        runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "full" and runner.is_current(con, CONF)
    # A change nobody noted (a database last written by an older version): a full one.
    from replaygate.core.db import set_meta

    set_meta(con, "data_version", str(int(get_meta(con, "data_version")) + 1))
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "full"
    con.close()


def test_detectors_stand_when_the_tables_they_read_received_nothing(tmp_path):
    """A detector whose result reads only tables that received no new rows is not run
    again after an append (incremental.READS): its findings, undecided units and
    counts of what it cannot tell stand. The logs grow apart — the event log, then the
    proxy logs (one of them unable to show Last-Event-ID, one MCP-Protocol-Version), then
    the ledgers and dispatches, then a proxy log is moved — and each re-analysis equals a
    full one; declared without the proxy table, the proxy detectors' results of the second
    append differ, and standing after the move, the findings that name the log's path."""
    data = {
        "sessions.jsonl": _content("sessions.jsonl"),
        "events.jsonl": _content("events.jsonl.gz"),
        "proxy-access.jsonl": _content("proxy-access.jsonl.gz"),
        "proxy-edge.jsonl": _content("proxy-edge.jsonl"),
        "proxy-old.jsonl": _without_version(_content("proxy-access.jsonl.gz"), 400),
        "streams.csv": _content("streams.csv.gz"),
        "dispatches.csv": _content("dispatches.csv"),
    }
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(SAMPLE / "inbox.parquet", live / "inbox.parquet")
    shutil.copy(SAMPLE / "rollout.csv", live / "rollout.csv")
    for name, content in data.items():
        _write(live / name, _cut(content, 0.95))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    steps = [
        (("events.jsonl",), set(incremental.READS)),
        (("proxy-access.jsonl", "proxy-edge.jsonl", "proxy-old.jsonl"),
         {"conflict_executed", "idempotency_conflict"}),
        (("sessions.jsonl", "streams.csv", "dispatches.csv"), set()),
        # A proxy log moved, nothing added: its findings name the file where it is now.
        ((), set()),
    ]  # fmt: skip
    for names, standing in steps:
        for name in names:
            _write(live / name, data[name])
        if not names:
            (live / "proxy-access.jsonl").rename(live / "proxy-access-1.jsonl")
        ingest(con, [live], CONF)
        before = dict(con.execute("SELECT detector, seconds FROM coverage").fetchall())
        runner.analyse(con, CONF)
        assert get_meta(con, "analysis_mode") == "incremental"
        after = dict(con.execute("SELECT detector, seconds FROM coverage").fetchall())
        assert {d for d in incremental.READS if after[d] == before[d]} == standing
        after_append = _analysis_state(con)
        runner.analyse(con, CONF, force=True)
        scratch = _analysis_state(con)
        for key in scratch:
            assert after_append[key] == scratch[key], (names, key)
    con.close()


def test_what_a_standing_detector_reads_is_declared():
    """Every record table a detector of incremental.READS names, itself or through the
    prepared tables it reads (those its prepare query names), is declared, and `sessions`
    with them (its units' stages). The blind tables are left to the tests above: a row of
    theirs is of its own table's file (a proxy fact's of a proxy log)."""
    import re

    from replaygate.core.contract import RECORD_TYPES
    from replaygate.queries import catalog

    records = {rt.table for rt in RECORD_TYPES}
    named = re.compile(r"\b(?:FROM|JOIN)\s+(\w+)", re.IGNORECASE)
    made = re.compile(r"CREATE\s+OR\s+REPLACE\s+TABLE\s+(\w+)", re.IGNORECASE)
    prepared = {t: q for q in catalog.load("prep") for t in made.findall(q.sql)}
    for name, declared in incremental.READS.items():
        read = set(named.findall(catalog.detectors()[name].sql))
        through = {
            t
            for p in read & set(prepared)
            if not p.startswith("a_blind_")
            for t in named.findall(prepared[p].sql)
        }
        assert (read | through) & records | {"sessions"} <= set(declared), name


def test_record_counts_per_stage_are_added_to_after_an_append(tmp_path):
    """After an append the counts of records per stage and source (a_stage_sources) are
    the last analysis's plus the new rows' counts, not a recount of every record: a count
    planted before the append is still there after it (a recount, the old way, loses it),
    and without it the counts equal a full analysis's."""
    data = {
        "sessions.jsonl": _content("sessions.jsonl"),
        "events.jsonl": _content("events.jsonl.gz"),
        "proxy-access.jsonl": _content("proxy-access.jsonl.gz"),
    }
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(SAMPLE / "rollout.csv", live / "rollout.csv")
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    for name, content in data.items():
        _write(live / name, _cut(content, 0.9))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    before = dict(con.execute("SELECT (stage, source), n FROM a_stage_sources").fetchall())
    assert before
    con.execute("UPDATE a_stage_sources SET n = n + 7")
    for name, content in data.items():
        _write(live / name, content)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    added = dict(con.execute("SELECT (stage, source), n FROM a_stage_sources").fetchall())
    runner.analyse(con, CONF, force=True)
    full = dict(con.execute("SELECT (stage, source), n FROM a_stage_sources").fetchall())
    assert full != before  # the append added records to some stage's window
    assert added == {k: n + 7 if k in before else n for k, n in full.items()}
    con.close()


def test_row_detectors_judge_the_new_rows_alone_and_find_each_finding_once(tmp_path):
    """The detectors whose finding of a row depends on that row alone (ROW_DETECTORS) judge
    an append's new rows alone: a new row whose finding equals one found before (the same
    request logged again) adds none to a detector that returns each finding once, as a
    full analysis finds it once; every result equals a full analysis's; and a finding
    planted before an append stands (judged whole, it is lost)."""
    data = {
        "sessions.jsonl": _content("sessions.jsonl"),
        "events.jsonl": _content("events.jsonl.gz"),
        "proxy-access.jsonl": _content("proxy-access.jsonl.gz"),
    }
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(SAMPLE / "rollout.csv", live / "rollout.csv")
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    for name, content in data.items():
        _write(live / name, _cut(content, 0.9))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    t = con.execute("SELECT max(ts) FROM proxy").fetchone()[0]
    session = con.execute("SELECT min(session_hmac) FROM sessions").fetchone()[0]
    # Served to a foreign Origin (invalid_origin_accepted), refused to an allowed one
    # (allowed_origin_refused), refused to a foreign one with a 404 (origin_refused_not_403).
    rows = b"".join(
        _proxy_row(t, "POST", session, origin=origin, status=status, jsonrpc_method="tools/call")
        for origin, status in (
            ("https://evil.example", 200),
            ("https://app.example.com", 403),
            ("https://evil.example", 404),
        )
    )
    found = {}
    for step in (1, 2):
        for name, content in data.items():
            _write(live / name, content)
        # The same three requests once in the first append, twice after the second.
        _write(live / "proxy-access.jsonl", data["proxy-access.jsonl"] + rows * step)
        ingest(con, [live], CONF)
        runner.analyse(con, CONF)
        assert get_meta(con, "analysis_mode") == "incremental"
        after_append = _analysis_state(con)
        found[step] = dict(
            con.execute(
                """SELECT detector, count(*) FROM findings
                   WHERE ts = $t AND list_contains($d, detector) GROUP BY ALL""",
                {"t": t, "d": list(incremental.ROW_DETECTORS)},
            ).fetchall()
        )
        runner.analyse(con, CONF, force=True)
        assert _analysis_state(con) == after_append
    assert (
        found[1]
        == found[2]
        == {
            "invalid_origin_accepted": 1,
            "allowed_origin_refused": 1,
            "origin_refused_not_403": 1,
        }
    )
    con.execute(
        """INSERT INTO findings (detector, dispatch_id, severity, ts, detail)
           VALUES ('missing_idempotency_key', 'planted', 'high', now(), '{}')"""
    )
    _write(live / "proxy-access.jsonl", data["proxy-access.jsonl"] + rows * 3)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    assert con.execute(
        "SELECT count(*) FROM findings WHERE dispatch_id = 'planted'"
    ).fetchone() == (1,)
    con.close()


def test_stage_windows_stand_after_an_append_and_follow_a_grown_rollout_log(tmp_path):
    """The stage windows (01_stages.sql) read the rollout log alone: an append of other
    records leaves them as the last analysis made them (a row planted in one of their
    tables is still there: rebuilt, they lose it), and the results equal a full analysis's;
    a grown rollout log asks for a full analysis, which rebuilds them."""
    data = {
        "sessions.jsonl": _content("sessions.jsonl"),
        "events.jsonl": _content("events.jsonl.gz"),
        "proxy-access.jsonl": _content("proxy-access.jsonl.gz"),
    }
    rollout = (SAMPLE / "rollout.csv").read_bytes()
    live = tmp_path / "live"
    live.mkdir()
    _write(live / "rollout.csv", _cut(rollout, 0.75))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    for name, content in data.items():
        _write(live / name, _cut(content, 0.9))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    planted = "SELECT count(*) FROM a_hygiene WHERE stage = 'planted'"
    con.execute("INSERT INTO a_hygiene VALUES ('planted', now(), now())")
    for name, content in data.items():
        _write(live / name, content)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    assert con.execute(planted).fetchone()[0] == 1
    con.execute("DELETE FROM a_hygiene WHERE stage = 'planted'")
    tables = ("a_stages", "a_stage_windows", "a_hygiene", "a_stage_spans", "a_stage_cells")
    kept = _found(con, tables)
    runner.analyse(con, CONF, force=True)
    assert _found(con, tables) == kept
    con.execute("INSERT INTO a_hygiene VALUES ('planted', now(), now())")
    _write(live / "rollout.csv", rollout)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "full"
    assert con.execute(planted).fetchone()[0] == 0
    con.close()


@pytest.mark.parametrize(
    ("name", "table", "gz"),
    [
        ("access.log.1", "proxy", False),
        ("access.log.2.gz", "proxy", True),
        ("events.jsonl-20261130", "events", False),
        ("access.log-20261130.gz", "proxy", True),
        ("streams.csv.3", "streams", False),
        ("sessions.jsonl-2026113014.gz", "sessions", True),
    ],
)
def test_logrotate_names_are_input_files(tmp_path, name, table, gz):
    from replaygate.ingest.readers import detect

    src = detect(tmp_path / name)
    assert src is not None and src.default_type.table == table and src.gzip == gz


@settings(max_examples=150, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=60),
    cut=st.floats(0, 1),
    tail=st.binary(max_size=30),
    change=st.booleans(),
    other=st.integers(0, 400),
)
def test_scan_counts_lines_the_same_with_known_prefixes(
    tmp_path_factory, lines, cut, tail, change, other
):
    # A known prefix's count replaces counting it again; a prefix that changed, or one of
    # another file, is counted in full. Either way the figures equal a plain scan's.
    content = b"".join(line + b"\n" for line in lines) + tail
    end = content.rfind(b"\n", 0, int(len(content) * cut) + 1) + 1
    p = tmp_path_factory.mktemp("scan") / "f.jsonl"
    p.write_bytes(content[:end])
    first = identity.scan(p, False, False, set())
    if change and end:
        content = b"#" + content[1:]
    p.write_bytes(content)
    offsets = {first.complete, other}
    known = {(first.complete, first.digest): first.lines, (other, "0" * 64): 10**6}
    plain = identity.scan(p, False, False, offsets)
    fast = identity.scan(p, False, False, offsets, known)
    assert (fast.lines, fast.complete, fast.digest, fast.prefixes) == (
        plain.lines,
        plain.complete,
        plain.digest,
        plain.prefixes,
    )
    assert fast.lines == content[: fast.complete].count(b"\n")


@pytest.mark.parametrize("size", [0, 5, identity.SCAN_CHUNK, 2 * identity.SCAN_CHUNK + 12345])
def test_scan_takes_the_sha256_in_the_same_read(tmp_path, size, monkeypatch):
    """The scan's SHA-256 (hashed in a thread of its own over buffers read into in turn)
    is the file's, over several buffers and at their edges; its lines, counted in large
    segments with numpy, are the file's; and nothing else of the scan changes."""
    rng = random.Random(size)
    alphabet = bytes(b"ab\n{}"[i % 5] for i in range(256))
    content = rng.randbytes(size).translate(alphabet)
    p = tmp_path / "f.jsonl"
    p.write_bytes(content)
    plain = identity.scan(p, False, False, {size // 3})
    monkeypatch.setattr(identity, "_NUMPY_FILE", 0)  # its large files' count, with numpy
    both = identity.scan(p, False, False, {size // 3}, sha=True)
    assert both.sha256 == hashlib.sha256(content).hexdigest()
    assert plain.sha256 == ""
    assert replace(both, sha256="") == plain
    assert both.lines == content[: both.complete].count(b"\n")


def _dispatch(ts, did, tool, session, principal, request, key, payload, status=200) -> bytes:
    cells = [ts, did, "executed", tool, "write", session or "", 1 if session else ""]
    cells += [principal or "", request, key or "", payload, f"rcpt-{did}", "", status]
    return (",".join(map(str, cells)) + "\n").encode()


@pytest.mark.slow  # half a minute: ./dev test runs it beside the others
def test_duplicate_dispatch_groups_across_sessions_after_appends(tmp_path):
    # duplicate_dispatch's groups span sessions: a re-send from a new session of a write
    # whose first attempt had no session, a key reused in another session, a sessionless
    # principal's blind re-send, then a proxy error that turns it into a retry, then a
    # re-send of a write whose stream broke in a session that receives nothing. Each
    # append is analysed incrementally (queries/groups.py) and equals a full analysis.
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    broke = con.execute(
        """SELECT epoch_ms(ts), tool_name, principal, payload_digest FROM dispatches
           WHERE session_hmac IS NULL AND http_status >= 400 AND tool_class = 'write'
           ORDER BY ts LIMIT 1"""
    ).fetchone()
    keyed = con.execute(
        """SELECT epoch_ms(ts), tool_name, principal, idempotency_key, payload_digest
           FROM dispatches WHERE session_hmac IS NOT NULL AND idempotency_key IS NOT NULL
             AND outcome = 'executed' ORDER BY ts LIMIT 1"""
    ).fetchone()
    keyed_first = con.execute(
        "SELECT min(dispatch_id) FROM dispatches WHERE idempotency_key = $k", {"k": keyed[3]}
    ).fetchone()[0]
    # A write of a session whose stream broke: its re-send from another session is a
    # retry by the first attempt's stream alone (that session receives nothing).
    dropped = con.execute(
        """SELECT d.dispatch_id, epoch_ms(d.ts), d.tool_name, d.principal, d.payload_digest
           FROM dispatches d JOIN a_streams s USING (session_hmac, generation, request_id)
           WHERE s.disconnected AND d.outcome = 'executed' AND d.tool_class = 'write'
             AND d.principal IS NOT NULL AND coalesce(d.http_status, 200) < 400
           ORDER BY d.ts LIMIT 1"""
    ).fetchone()
    t0 = keyed[0] + 60_000
    new_session = "ab" * 32
    steps = [
        ("dispatches.csv", _dispatch(broke[0] + 5000, "d-x1", broke[1], new_session,
                                     broke[2], "r-x1", "idem-other", broke[3])
                           + _dispatch(keyed[0] + 1000, "d-x2", keyed[1], "cd" * 32,
                                       keyed[2], "r-x2", keyed[3], keyed[4])),
        ("dispatches.csv", _dispatch(t0, "d-x3", "pay", None, "svc-x", "r-x3", None, "p1")),
        ("dispatches.csv", _dispatch(t0 + 2000, "d-x4", "pay", None, "svc-x", "r-x4", None, "p1")),
        ("proxy-edge.jsonl", json.dumps({
            "ts": datetime.fromtimestamp((t0 + 100) / 1000, UTC).isoformat(),
            "method": "POST", "status": 502, "path": "/mcp",
            "jsonrpc_method": "tools/call", "request_id": "r-x3", "principal": "svc-x",
        }).encode() + b"\n"),
        ("dispatches.csv", _dispatch(dropped[1] + 5000, "d-x5", dropped[2], "ef" * 32,
                                     dropped[3], "r-x5", None, dropped[4])),
    ]  # fmt: skip
    bases = []
    for name, rows in steps:
        with open(live / name, "ab") as fh:
            fh.write(rows)
        ingest(con, [live], CONF)
        runner.analyse(con, CONF)
        assert get_meta(con, "analysis_mode") == "incremental"
        after_append = _analysis_state(con)
        bases.append(
            con.execute(
                """SELECT dispatch_id, detail->>'basis' FROM findings
                   WHERE detector = 'duplicate_dispatch' AND dispatch_id LIKE 'd-x%'
                      OR detail->>'$.dispatches' LIKE '%d-x%' ORDER BY ALL"""
            ).fetchall()
        )
        runner.analyse(con, CONF, force=True)
        assert after_append == _analysis_state(con), name
    con.close()
    x1 = ("d-00000053", "retry")  # the sessionless first attempt, re-sent from a session
    x2 = (keyed_first, "idempotency_key")
    assert bases == [
        [x2, x1],
        [x2, x1],
        [x2, x1, ("d-x3", "suspected")],
        [x2, x1, ("d-x3", "retry")],
        sorted([x2, x1, ("d-x3", "retry"), (dropped[0], "retry")]),
    ]


def test_key_attempts_are_recomputed_for_the_new_rows_keys(tmp_path):
    """After an append, the attempts that reuse an idempotency key with another payload
    than its first (a_key_differing) are recomputed for the new rows' keys alone. A new
    attempt of an old key with another payload, and one dated before a key's first
    attempt (the new reference: the old attempt now differs), give a full analysis's rows
    and findings; a row planted for a key no new row has stays (recomputed whole, the old
    way, it is lost)."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    keys = con.execute(
        """SELECT idempotency_key, epoch_ms(min(ts)), min(tool_name), min(principal),
                  min(dispatch_id)
           FROM dispatches WHERE idempotency_key IS NOT NULL AND outcome = 'executed'
           GROUP BY ALL HAVING count(*) = 1 ORDER BY 1 LIMIT 3"""
    ).fetchall()
    (k1, t1, tool1, who1, _), (k2, t2, tool2, who2, first2), (_, *_, planted) = keys

    def differing() -> set:
        return {r[0] for r in con.execute("SELECT dispatch_id FROM a_key_differing").fetchall()}

    def append(*rows: bytes) -> None:
        with open(live / "dispatches.csv", "ab") as fh:
            fh.write(b"".join(rows))
        ingest(con, [live], CONF)
        runner.analyse(con, CONF)
        assert get_meta(con, "analysis_mode") == "incremental"

    append(
        _dispatch(t1 + 1000, "d-k1", tool1, None, who1, "r-k1", k1, "p-other"),
        _dispatch(t2 - 1000, "d-k2", tool2, None, who2, "r-k2", k2, "p-earlier"),
    )
    assert {"d-k1", first2} <= differing()
    after_append = _analysis_state(con)
    runner.analyse(con, CONF, force=True)
    assert after_append == _analysis_state(con)
    con.execute("INSERT INTO a_key_differing SELECT * FROM dispatches WHERE dispatch_id = $d",
                {"d": planted})  # fmt: skip
    append(_dispatch(t1 + 2000, "d-k1b", tool1, None, who1, "r-k1b", k1, "p-third"))
    after_append = differing()
    assert {planted, "d-k1", "d-k1b"} <= after_append
    runner.analyse(con, CONF, force=True)
    assert differing() == after_append - {planted}
    con.close()


def test_blind_log_growth_reaches_the_sessions_it_may_hide(tmp_path):
    """session_after_terminal and delete_fabricated are run, after an append, for the
    pending sessions and those the growth of a log blind to session ids may now hide
    (incremental.BLIND_LOCAL): a request that log served after an untouched session's
    end to that session's client makes it undecided, and the log's longer span undecides
    the TERMINATED sessions without a DELETE that began in it, each as a full analysis
    finds; a finding of a session the growth cannot reach stays as it was (fails when
    the two detectors are run whole, and when they read the scope's copies of the pending
    sessions' rows for sessions beyond them)."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)

    def undecided(detector: str) -> set:
        return {
            r[0]
            for r in con.execute(
                "SELECT session_hmac FROM cannot_tell_units WHERE detector = $d", {"d": detector}
            ).fetchall()
        }

    ended, who, end_ms = con.execute(
        """SELECT session_hmac, principal, epoch_ms(terminal_ts) FROM a_sessions
           WHERE terminal_ts IS NOT NULL AND principal IS NOT NULL
             AND session_hmac NOT IN (SELECT session_hmac FROM findings
                                      WHERE detector = 'session_after_terminal')
           ORDER BY terminal_ts DESC LIMIT 1"""
    ).fetchone()
    assert ended not in undecided("session_after_terminal")
    before = undecided("delete_fabricated")
    (kept,) = con.execute(
        "SELECT min(session_hmac) FROM findings WHERE detector = 'session_after_terminal'"
    ).fetchone()
    planted = {"s": kept, "d": "session_after_terminal"}
    mine = "detector = $d AND session_hmac = $s"
    (detail,) = con.execute(f"SELECT detail FROM findings WHERE {mine}", planted).fetchone()
    con.execute(f"""UPDATE findings SET detail = '{{"kept": 1}}' WHERE {mine}""", planted)
    served = datetime.fromtimestamp((end_ms + 1000) / 1000, UTC)
    row = _proxy_row(served, "POST", None, principal=who, jsonrpc_method="tools/call")
    with open(live / "proxy-blind.jsonl", "ab") as fh:
        fh.write(row)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    assert con.execute(f"SELECT detail->>'kept' FROM findings WHERE {mine}", planted).fetchone()[0]
    con.execute(f"UPDATE findings SET detail = $x WHERE {mine}", {"x": detail, **planted})
    assert ended in undecided("session_after_terminal")
    assert before < undecided("delete_fabricated")
    after_append = _analysis_state(con)
    runner.analyse(con, CONF, force=True)
    assert after_append == _analysis_state(con)
    con.close()


def test_auth_subject_mismatch_follows_the_pending_sessions(tmp_path):
    """auth_subject_mismatch is session-local (incremental.SESSION_DETECTORS): after an
    append it judges the pending sessions alone, on the scope's copies of their rows with
    the proxy files that cannot show a subject left out (the scoped shadow): a request
    served to another subject in a session finds it, a subject-less ledger file's session
    newly served is undecided, each as a full analysis finds; a finding of a session the
    append did not touch stands (fails when the detector is run whole)."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    mine = "detector = 'auth_subject_mismatch' AND session_hmac = $s"
    (kept,) = con.execute(
        "SELECT min(session_hmac) FROM findings WHERE detector = 'auth_subject_mismatch'"
    ).fetchone()
    assert kept is not None
    (detail,) = con.execute(f"SELECT detail FROM findings WHERE {mine}", {"s": kept}).fetchone()
    con.execute(f"""UPDATE findings SET detail = '{{"kept": 1}}' WHERE {mine}""", {"s": kept})
    t = con.execute("SELECT max(ts) FROM proxy").fetchone()[0]
    # A session with a subject and no finding, and one whose subject a blind ledger file
    # may hide, not undecided yet (else the first such one).
    served, subject = con.execute(
        """SELECT session_hmac, auth_subject FROM a_sessions
           WHERE auth_subject IS NOT NULL AND session_hmac IN (SELECT session_hmac FROM proxy)
             AND session_hmac NOT IN (SELECT session_hmac FROM findings
                                      WHERE detector = 'auth_subject_mismatch')
           ORDER BY session_hmac LIMIT 1"""
    ).fetchone()
    (hidden,) = con.execute(
        """SELECT session_hmac FROM a_subject_unknown
           ORDER BY session_hmac IN (SELECT session_hmac FROM cannot_tell_units
                                     WHERE detector = 'auth_subject_mismatch'), session_hmac
           LIMIT 1"""
    ).fetchone()
    rows = _proxy_row(t, "POST", served, auth_subject=subject + "-other") + _proxy_row(
        t, "POST", hidden, auth_subject="sub-someone"
    )
    # proxy-edge.jsonl shows subjects and session ids: the same files are left out after.
    with open(live / "proxy-edge.jsonl", "ab") as fh:
        fh.write(rows)
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    kept_now = con.execute(f"SELECT detail->>'kept' FROM findings WHERE {mine}", {"s": kept})
    assert kept_now.fetchall() == [("1",)]
    found = con.execute(f"SELECT count(*) FROM findings WHERE {mine}", {"s": served})
    assert found.fetchone() == (1,)
    assert con.execute(
        """SELECT count(*) FROM cannot_tell_units
           WHERE detector = 'auth_subject_mismatch' AND session_hmac = $s""",
        {"s": hidden},
    ).fetchone()[0]
    con.execute(f"UPDATE findings SET detail = $x WHERE {mine}", {"x": detail, "s": kept})
    after_append = _analysis_state(con)
    runner.analyse(con, CONF, force=True)
    assert after_append == _analysis_state(con)
    con.close()


def test_cannot_tell_by_stage_of_untouched_blind_files_stands(tmp_path):
    """After an append, the counts by stage of a detector's units in a file left out of
    its input (cannot_tell_stages) stand when that file received no new rows and holds no
    row of a pending session (incremental._standing_stage_counts): a count planted before
    the append is still there after it (counted again, the old way, it is lost: the test
    fails so); the counts of a file that grew, and of one holding a row of a session the
    append touched, are counted again (kept, the planted counts stay: the test fails so),
    and the whole equals a full analysis."""
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    entry = "detector = $d AND file = $f AND missing = $m"
    planted = {
        "untouched": {"d": "cursor_on_post", "f": "proxy-redacted.jsonl"},
        "grown": {"d": "cursor_on_post", "f": "proxy-edge.jsonl"},
        "touched": {"d": "auth_subject_mismatch", "f": "proxy-nginx.jsonl"},
    }
    for p in planted.values():
        p["f"] = str(live / p["f"])
        p["m"] = "proxy.last_event_id" if p["d"] == "cursor_on_post" else "proxy.auth_subject"
        assert con.execute(f"SELECT count(*) FROM cannot_tell_stages WHERE {entry}", p).fetchone()[
            0
        ], p
        con.execute(f"UPDATE cannot_tell_stages SET units = units + 7 WHERE {entry}", p)
    # A session with a unit of auth_subject_mismatch in the nginx log, given a request in
    # the edge log (which shows what it showed: the same files are left out after).
    (touched,) = con.execute(
        """SELECT min(p.session_hmac) FROM proxy p JOIN files f USING (file_id)
           WHERE f.path = $f AND p.session_hmac IS NOT NULL AND p.status BETWEEN 200 AND 299""",
        {"f": planted["touched"]["f"]},
    ).fetchone()
    assert touched is not None
    subject = con.execute(
        "SELECT auth_subject FROM a_sessions WHERE session_hmac = $s", {"s": touched}
    ).fetchone()
    t = con.execute("SELECT max(ts) FROM proxy").fetchone()[0]
    with open(live / "proxy-edge.jsonl", "ab") as fh:
        fh.write(_proxy_row(t, "POST", touched, auth_subject=subject[0] if subject else None))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    assert get_meta(con, "analysis_mode") == "incremental"
    planted_now = {
        k: sorted(
            con.execute(f"SELECT stage, units FROM cannot_tell_stages WHERE {entry}", p).fetchall()
        )
        for k, p in planted.items()
    }
    p = planted["untouched"]
    con.execute(f"UPDATE cannot_tell_stages SET units = units - 7 WHERE {entry}", p)
    after_append = _analysis_state(con)
    runner.analyse(con, CONF, force=True)
    assert after_append == _analysis_state(con)
    full = {
        k: sorted(
            con.execute(f"SELECT stage, units FROM cannot_tell_stages WHERE {entry}", p).fetchall()
        )
        for k, p in planted.items()
    }
    assert planted_now["untouched"] == [(stage, n + 7) for stage, n in full["untouched"]]
    assert planted_now["grown"] == full["grown"]
    assert planted_now["touched"] == full["touched"]
    con.close()


def test_report_hashes_what_was_read_of_a_grown_file(tmp_path):
    # An append leaves files.sha256 empty (hashing the whole file each cycle would cost
    # more than the append); the report hashes what was read, or says it cannot.
    import hashlib

    from replaygate.audit import reportdoc

    events = _content("events.jsonl.gz")
    live = tmp_path / "live"
    live.mkdir()
    _write(live / "events.jsonl", _cut(events, 0.5))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    grown = _cut(events, 0.8) + b'{"partial": '  # a writer mid-line: not read yet
    _write(live / "events.jsonl", grown)
    ingest(con, [live], CONF)
    (row,) = reportdoc._inputs(con)
    read = grown[: grown.rfind(b"\n") + 1]  # complete lines only
    assert (row["sha256"], row["bytes"]) == (hashlib.sha256(read).hexdigest(), len(read))
    _write(live / "events.jsonl", b"x" + grown[1:])  # what was read is not there any more
    (row,) = reportdoc._inputs(con)
    assert row["sha256"] is None
    con.close()


def _stream_row(ms: int, session: str, stream: str, state: str, method: str = "", **cols) -> bytes:
    ts = datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    cells = [ts, session, 1, stream, state, method, cols.get("request_id", "")]
    cells += ["", "", "", cols.get("last_sent", ""), "", cols.get("resume_from", "")]
    cells += ["", cols.get("close_reason", ""), ""]
    return (",".join(map(str, cells)) + "\n").encode()


def _event_row(ms: int, session: str, stream: str, seq: int, kind: str = "message") -> bytes:
    row = {"ts": ms, "session_hmac": session, "generation": 1, "stream_id": stream,
           "event_id": f"{stream}:{seq}", "seq": seq, "kind": kind, "disposition": "sent",
           "message_digest": f"{seq:064x}", "buffer_depth": 0}  # fmt: skip
    return json.dumps(row).encode() + b"\n"


def _empty_answer(ms: int, duration_ms: float) -> bytes:
    """A POST a proxy answered 200 with an event stream of 0 bytes, logged without its
    session (undelivered_result places it on the stream found opened nearest its run)."""
    ts = datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    row = {"ts": ts, "method": "POST", "status": 200, "path": "/mcp", "duration_ms": duration_ms,
           "jsonrpc_method": "tools/call", "body_bytes_sent": 0,
           "resp_content_type": "text/event-stream"}  # fmt: skip
    return json.dumps(row).encode() + b"\n"


def _ledger_row(first: dict, session: str, ms: int, **changes) -> bytes:
    ts = datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps(dict(first, session_hmac=session, ts=ts, **changes)).encode() + b"\n"


def _undecided_state(con) -> dict:
    """What the detectors' findings and undecided units make of an analysis (lighter than
    _analysis_state: no prepared tables, no gate evaluation)."""
    out = _found(con, ("cannot_tell", "cannot_tell_stages", "cannot_tell_units"))
    out["a_stage_samples"] = sorted(
        con.execute("SELECT * FROM a_stage_samples").fetchall(), key=repr
    )
    out.update(_gate_facts_state(con))
    return out


@pytest.mark.slow
def test_stream_detectors_follow_the_touched_sessions_after_appends(tmp_path):
    # priming_lost, resume_without_cursor and undelivered_result are recomputed for the
    # sessions that received rows; their undecided units are kept per session and counted
    # again. Appends to new sessions (decided and undecided) and an old undecided one, with
    # empty answers logged without a session near an old session's stream and a new one's;
    # then to an old decided one, an empty answer near nothing and late ledger lines that
    # move sessions out of their stage; each equal to a full analysis. Then one that makes
    # the blind file show resumability (deciding sessions that received nothing): a full one.
    live = tmp_path / "live"
    shutil.copytree(SAMPLE, live, ignore=shutil.ignore_patterns("*.md", "*.json", "*.toml", "*.gz"))
    _write(live / "streams.csv", _content("streams.csv.gz"))
    _write(live / "events.jsonl", _content("events.jsonl.gz"))
    _write(live / "proxy-access.jsonl", _content("proxy-access.jsonl.gz"))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [live], CONF)
    runner.analyse(con, CONF)
    # an old session's stream that lost its answer, and when it opened
    (lost, opened) = con.execute(
        """SELECT session_hmac, epoch_ms(ts) FROM findings
           WHERE detector = 'undelivered_result' AND stream_id IS NOT NULL
             AND detail->>'basis' = 'client' AND session_hmac NOT IN (
                 SELECT session_hmac FROM findings
                 WHERE detector IN ('priming_lost', 'resume_without_cursor'))
           ORDER BY ts DESC LIMIT 1"""
    ).fetchone()
    found = dict(
        con.execute(
            """SELECT detector, min(session_hmac) FROM findings
               WHERE detector IN ('priming_lost', 'resume_without_cursor') GROUP BY ALL"""
        ).fetchall()
    )
    primed, resumed = found["priming_lost"], found["resume_without_cursor"]
    (unknown,) = con.execute("SELECT session_hmac FROM a_resumability_unknown").fetchone()
    blind_row = json.loads((live / "sessions-blind.jsonl").read_bytes().splitlines()[0])
    ledger_row = next(
        json.loads(line)
        for line in (live / "sessions.jsonl").read_bytes().splitlines()
        if primed in str(line)
    )
    t = 1795841100000  # 2026-11-28T04:45:00Z, inside write-10pct's window
    new, new_blind, late_blind = "e1" * 32, "e2" * 32, "e3" * 32
    earlier = t - 3_600_000 * 4  # before either session's first ledger line
    steps = [
        # new sessions: one that loses its priming and one that re-opens without a cursor;
        # one only in the blind file; a new stream of an old session the blind file hides
        {
            "sessions.jsonl": _ledger_row(ledger_row, new, t, rollout_stage="write-10pct"),
            "sessions-blind.jsonl": _ledger_row(blind_row, new_blind, t),
            "events.jsonl": _event_row(t + 100, new, "2", 1)
            + _event_row(t + 2100, new, "2", 2)
            + _event_row(t + 450, new, "1", 1, "result")
            + _event_row(t + 100, new_blind, "2", 1),
            # near the old session's lost answer, and the new session's
            "proxy-access.jsonl": _empty_answer(opened - 200, 500) + _empty_answer(t - 300, 100),
            "streams.csv": _stream_row(t + 1, new, "1", "STREAM_OPEN", "POST")
            + _stream_row(t + 400, new, "1", "DISCONNECTED", close_reason="network")
            + _stream_row(t + 50, new, "2", "STREAM_OPEN", "POST")
            + _stream_row(t + 2000, new, "2", "DISCONNECTED", last_sent="2:1")
            + _stream_row(t + 3000, new, "2", "RESUME_PENDING")
            + _stream_row(t + 1, new_blind, "1", "STREAM_OPEN", "POST")
            + _stream_row(t + 400, new_blind, "1", "DISCONNECTED")
            + _stream_row(t, unknown, "9", "STREAM_OPEN", "POST")
            + _stream_row(t + 500, unknown, "9", "DISCONNECTED"),
        },
        # an old decided session's new stream breaks; a late ledger line of each kind puts
        # an old session into another stage's cohort
        {
            "streams.csv": _stream_row(t, primed, "9", "STREAM_OPEN", "POST")
            + _stream_row(t + 500, primed, "9", "DISCONNECTED", close_reason="client_gone"),
            "events.jsonl": _event_row(t + 600, primed, "9", 1, "result"),
            "proxy-access.jsonl": _empty_answer(t - 3_600_000, 10),
            "sessions.jsonl": _ledger_row(
                ledger_row, primed, earlier, rollout_stage="shadow-10pct"
            ),
            "sessions-blind.jsonl": _ledger_row(
                blind_row, unknown, earlier, rollout_stage="shadow-10pct"
            ),
        },
        # the blind file now shows resumability: the undecided sessions are decided
        {
            "sessions-blind.jsonl": _ledger_row(
                blind_row, late_blind, t, resumable=True, protocol_version="2025-11-25"
            )
        },
    ]
    states = []
    for step, rows in enumerate(steps):
        if step == 0:
            # What is not recomputed stays as it was (findings of sessions that receive
            # nothing, altered here): the detectors run for the touched sessions alone.
            untouched = {"p": primed, "r": resumed}
            mine = """session_hmac IN ($p, $r) AND detector IN
                      ('priming_lost', 'resume_without_cursor', 'undelivered_result')"""
            before = con.execute(
                f"SELECT detector, session_hmac, detail FROM findings WHERE {mine}", untouched
            ).fetchall()
            con.execute(f"""UPDATE findings SET detail = '{{"kept": 1}}' WHERE {mine}""", untouched)
        for name, data in rows.items():
            with open(live / name, "ab") as fh:
                fh.write(data)
        ingest(con, [live], CONF)
        runner.analyse(con, CONF)
        assert get_meta(con, "analysis_mode") == ("full" if step == 2 else "incremental"), step
        if step == 0:
            kept = con.execute(
                "SELECT DISTINCT detector FROM findings WHERE detail->>'kept' = '1' ORDER BY 1"
            ).fetchall()
            assert kept == [("priming_lost",), ("resume_without_cursor",), ("undelivered_result",)]
            for detector, session, detail in before:
                con.execute(
                    "UPDATE findings SET detail = $x WHERE detector = $d AND session_hmac = $s",
                    {"x": detail, "d": detector, "s": session},
                )
        states.append(
            con.execute(
                """SELECT detector, session_hmac, stream_id, stage FROM findings
                   WHERE detector IN ('priming_lost', 'resume_without_cursor')
                   UNION ALL
                   SELECT detector, file, missing || ':' || units, stage FROM cannot_tell_stages
                   WHERE detector IN ('priming_lost', 'resume_without_cursor')
                   UNION ALL
                   SELECT detector, coalesce(session_hmac, '-'), stream_id,
                          detail->>'bases' FROM findings
                   WHERE detector = 'undelivered_result'
                   UNION ALL
                   SELECT detector, file, missing || ':' || units, 'all' FROM cannot_tell
                   WHERE detector = 'undelivered_result' ORDER BY ALL"""
            ).fetchall()
        )
        if step < 2:
            after_append = _undecided_state(con)
            runner.analyse(con, CONF, force=True)
            assert after_append == _undecided_state(con), step
    con.close()
    undecided = [
        [r[2].rsplit(":", 1)[1] for r in s if r[1].endswith("sessions-blind.jsonl")] for s in states
    ]
    assert undecided == [["3"], ["1"], []]
    # The empty answers without a session: one is evidence for the old session's stream,
    # one for the new session's until an old session's stream opens nearer it; the one
    # near nothing cannot tell whether its client hung up.
    proxy = '["client","proxy"]'
    assert {("undelivered_result", lost, "1", proxy)} <= set(states[0])
    assert ("undelivered_result", new, "1", '["proxy","server"]') in states[0]
    assert {
        ("undelivered_result", new, "1", '["server"]'),
        ("undelivered_result", primed, "9", proxy),
    } <= set(states[1])
    assert [r[2] for r in states[1] if r[1].endswith("proxy-access.jsonl")] == [
        "proxy.client_closed:1"
    ]
    assert {("priming_lost", new, "1"), ("resume_without_cursor", new, "2")} <= {
        r[:3] for r in states[0]
    }
    assert ("priming_lost", primed, "9", None) in states[1]
    assert {("priming_lost", unknown, "9"), ("priming_lost", new_blind, "1")} <= {
        r[:3] for r in states[2]
    }
