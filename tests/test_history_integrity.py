"""The decision history cannot be quietly cut or edited: its head is anchored in the
database (and in bundles), a break is an error wherever it is read, a torn last line
never swallows the next row, and an append does not read the whole history."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from replaygate.audit import decisionlog
from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.queries import decisionfile, runner

from .conftest import SAMPLE, run_cli
from .test_history import _at, _doc

SAMPLE_CONF = str(SAMPLE / "replaygate.toml")


def _recorded(tmp_path: Path, sample_db: Path, n: int = 3) -> tuple[str, Path]:
    db = tmp_path / "fleet.duckdb"
    shutil.copy(sample_db, db)
    for i in range(n):
        r = run_cli("gates", "--db", str(db), "--config", SAMPLE_CONF, "--all-stages", "--record")
        assert r.returncode in (0, 2, 3), r.stderr
        assert i >= 0
    return str(db), decisionlog.file_for_db(db)


def test_deleting_the_newest_rows_is_an_error_everywhere(tmp_path, sample_db):
    db, path = _recorded(tmp_path, sample_db)
    lines = path.read_text().splitlines(keepends=True)
    con = dbm.connect(db, read_only=True)
    assert decisionlog.anchor(con) == (len(lines), json.loads(lines[-1])["sha256"])
    con.close()
    assert decisionlog.verify_chain(decisionlog.read(path)) is None
    path.write_text("".join(lines[:-2]))  # a valid chain, two rows short
    assert decisionlog.verify_chain(decisionlog.read(path)) is None
    for args in (
        ("history", "--db", db),
        ("findings", "--db", db, "--config", SAMPLE_CONF),
        ("gates", "--db", db, "--config", SAMPLE_CONF),
        ("report", "--db", db, "--config", SAMPLE_CONF, "--format", "md", "-o", "r.md"),
    ):
        r = run_cli(*args, cwd=tmp_path)
        assert r.returncode == 1, (args, r.stdout)
        assert "newest rows were deleted" in r.stderr, (args, r.stderr)
    with pytest.raises(decisionlog.HistoryBroken):
        decisionlog.checked_for_db(db)


def test_a_middle_edit_stops_findings_and_gates(tmp_path, sample_db):
    db, path = _recorded(tmp_path, sample_db)
    lines = path.read_text().splitlines(keepends=True)
    row = json.loads(lines[1])
    row["decision"] = "PROCEED" if row["decision"] != "PROCEED" else "HOLD"
    lines[1] = json.dumps(row) + "\n"
    path.write_text("".join(lines))
    for args in (("findings", "--db", db), ("gates", "--db", db, "--all-stages")):
        r = run_cli(*args, "--config", SAMPLE_CONF)
        assert r.returncode == 1 and "row 2: content changed" in r.stderr, (args, r.stderr)


def test_a_torn_last_line_never_swallows_the_next_row(tmp_path):
    con = dbm.connect(str(tmp_path / "h.duckdb"))
    conf = Config()
    decisionlog.record_evaluation(con, _doc("s", "HOLD"), conf, "gates", now=_at(1))
    path = decisionlog.file_for(con)
    assert path is not None
    with open(path, "a") as fh:  # a crash in the middle of an append
        fh.write('{"seq": 2, "recorded_at": "2026-11-28T00:0')
    decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), conf, "gates", now=_at(3))
    rows = decisionlog.read(path)
    assert [r.get("decision") for r in rows if not r.get("unreadable")] == ["HOLD", "ROLLBACK"]
    assert decisionlog.verify_chain(rows) is None
    assert runner.analyse(con, conf) is not None
    assert con.execute("SELECT list(decision ORDER BY seq) FROM decision_history").fetchone()[
        0
    ] == [
        "HOLD",
        "ROLLBACK",
    ]


def test_gates_record_fails_when_it_cannot_append(tmp_path, sample_db, monkeypatch):
    db = tmp_path / "fleet.duckdb"
    shutil.copy(sample_db, db)

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(decisionlog.os, "fsync", disk_full)
    r = run_cli("gates", "--db", str(db), "--config", SAMPLE_CONF, "--record")
    assert r.returncode == 1
    assert "cannot append to the decision history" in r.stderr
    assert "No space left on device" in r.stderr


def test_an_append_reads_only_the_tail(tmp_path, monkeypatch):
    con = dbm.connect(str(tmp_path / "h.duckdb"))
    conf = Config()
    for i in range(50):
        decisionlog.record_evaluation(con, _doc(f"s{i}", "HOLD"), conf, "gates", now=_at(i))

    def whole_read(*_a, **_k):
        raise AssertionError("the whole history was read for an append")

    # the file is read by the analysis' module; the history re-exports its reader
    for module in (decisionfile, decisionlog):
        monkeypatch.setattr(module, "parse_rows", whole_read)
        monkeypatch.setattr(module, "read", whole_read)
    rows = decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), conf, "gates", now=_at(99))
    assert rows[0]["seq"] == 51
    monkeypatch.undo()
    assert decisionlog.verify_chain(decisionlog.read(decisionlog.file_for(con))) is None


def test_history_at_is_data_time_and_the_readme_example_works(tmp_path, sample_db):
    db, path = _recorded(tmp_path, sample_db, n=1)
    r = run_cli("history", "--db", db, "--stage", "write-10pct", "--at", "2026-11-28T04:30:00Z")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("write-10pct: ") and "on data up to 2026-11-28" in r.stdout
    # By wall clock the same moment is before anything was recorded.
    r = run_cli(
        "history", "--db", db, "--stage", "write-10pct", "--recorded-at", "2026-11-28T04:30:00Z"
    )
    assert r.returncode == 1 and "no decision recorded at or before" in r.stderr
    rows = decisionlog.read(path)
    assert all(r["data_end"] for r in rows)


def test_bundles_carry_the_head_and_a_cut_copy_does_not_verify(tmp_path, sample_db):
    from replaygate.audit import attest

    db, path = _recorded(tmp_path, sample_db, n=2)
    out = tmp_path / "evidence"
    r = run_cli("report", "--db", db, "--config", SAMPLE_CONF, "--bundle", str(out))
    assert r.returncode == 0, r.stderr
    st = json.loads((out / "statement.json").read_text())
    con = dbm.connect(db, read_only=True)
    rows, head = decisionlog.anchor(con)
    con.close()
    assert st["predicate"]["decisionHistory"] == {"rows": rows, "head": head}
    # Cut the bundled copy and make its listed digest agree: the head still tells.
    copy = out / "decision_history.jsonl"
    copy.write_text("".join(copy.read_text().splitlines(keepends=True)[:-1]))
    for s in st["subject"]:
        if s["name"] == copy.name:
            s["digest"]["sha256"] = attest.sha256_bytes(copy.read_bytes())
    (out / "statement.json").write_bytes(attest.encode(st))
    v = attest.verify(out)
    assert any("newest rows were deleted" in p for p in v.problems), v.problems


@pytest.mark.parametrize("damage", ["middle edit", "file deleted"])
def test_the_dashboard_shows_a_broken_history_as_an_error_not_its_rows(
    tmp_path, sample_db, monkeypatch, damage
):
    """The dashboard reads the history file itself: an edited row or a deleted file is
    an error on the page, not a timeline (`history` fails the same way)."""
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    from .test_dashboard import APP

    db, path = _recorded(tmp_path, sample_db)
    if damage == "file deleted":
        path.unlink()
    else:
        lines = path.read_text().splitlines(keepends=True)
        row = json.loads(lines[1])
        row["decision"] = "PROCEED" if row["decision"] != "PROCEED" else "HOLD"
        lines[1] = json.dumps(row) + "\n"
        path.write_text("".join(lines))
    r = run_cli("history", "--db", db)
    assert r.returncode == 1, r.stdout
    monkeypatch.setenv("REPLAYGATE_DB", db)
    monkeypatch.setenv("REPLAYGATE_CONFIG", SAMPLE_CONF)
    data.store.clear()
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("views/rollout.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    errors = [e.value for e in at.error]
    assert any("The decision history does not verify" in e for e in errors), errors


def test_a_document_of_many_stages_is_one_append_read_once(tmp_path, monkeypatch):
    """`watch` and `gates --all-stages --record` record every stage of a document: one
    append (one lock, one write, one sync) whose look for each stage's last evaluation
    is one pass over the history, not one per stage (100,000 stages: a pass and an
    fsync per stage made a cycle quadratic, hours)."""
    import os
    import time

    con = dbm.connect(str(tmp_path / "h.duckdb"))
    conf = Config()
    n = 5_000
    stages = [_doc(f"stage-{i}", "HOLD")["stages"][0] for i in range(n)]
    syncs, read = [], []
    real_sync, newest_first = os.fsync, decisionlog._newest_first
    monkeypatch.setattr(decisionlog.os, "fsync", lambda fd: syncs.append(fd) or real_sync(fd))

    def counted(fh):
        for row in newest_first(fh):
            read.append(1)
            yield row

    monkeypatch.setattr(decisionlog, "_newest_first", counted)
    cpu = time.process_time()
    first = decisionlog.record_evaluation(
        con, {"stages": stages}, conf, "watch", now=_at(1), only_changes=True
    )
    again = decisionlog.record_evaluation(
        con, {"stages": stages}, conf, "watch", now=_at(2), only_changes=True
    )
    stages[7] = _doc("stage-7", "ROLLBACK")["stages"][0]
    changed = decisionlog.record_evaluation(
        con, {"stages": stages}, conf, "watch", now=_at(3), only_changes=True
    )
    cpu = time.process_time() - cpu
    assert (len(first), len(again), [r["stage"] for r in changed]) == (n, 0, ["stage-7"])
    assert len(syncs) == 2  # the document that changed nothing wrote nothing
    # Each row read back at most once per call (a tail read or two aside).
    assert len(read) <= 2 * n + 10
    rows = decisionlog.checked(con)
    assert len(rows) == n + 1 and [r["seq"] for r in rows] == list(range(1, n + 2))
    assert cpu < 30, f"{cpu:.0f} s of CPU"
