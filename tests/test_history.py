"""Decision history: recorded evaluations, operator actions, the decision in force at a
past time, the hash chain, and the proceeded_while_rollback detector."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from replaygate import api
from replaygate.audit import decisionlog, reportdoc
from replaygate.core import config as cfg
from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.errors import ReplaygateError
from replaygate.dashboard import report as render
from replaygate.ingest.load import ingest
from replaygate.queries import runner
from replaygate.queries.gatedefs import effective_settings

from .conftest import SAMPLE, findings_of, run_cli

T0 = datetime(2026, 11, 28, 0, 0, tzinfo=UTC)


def _at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _doc(stage: str, decision: str, reasons=("a reason",)) -> dict:
    gate = {"id": "duplicate_dispatches", "status": "fail", "value": 1, "sample": 3}
    gate |= {"min_sample": 0, "threshold": 0}
    return {
        "stages": [
            {"stage": stage, "decision": decision, "reasons": list(reasons), "gates": [gate]}
        ]
    }


def _sample(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "replaygate-demo-key")
    src = tmp_path / "in"
    shutil.copytree(SAMPLE, src)
    conf = cfg.load(str(src / "replaygate.toml"))
    con = dbm.connect(str(tmp_path / "fleet.duckdb"))
    ingest(con, [src], conf)
    runner.analyse(con, conf)
    return con, conf, src


def _late_invalid_origin(src) -> None:
    # A request from a foreign Origin served in the newest stage: its decision flips.
    line = {
        "ts": "2026-11-28T06:30:00.000Z",
        "method": "POST",
        "status": 200,
        "path": "/mcp",
        "origin": "https://evil.example",
        "jsonrpc_method": "tools/list",
        "request_id": "9",
    }
    (src / "proxy-late.jsonl").write_text(json.dumps(line) + "\n")


def test_decision_in_force_at_a_past_time_after_the_data_changed(tmp_path, monkeypatch):
    con, conf, src = _sample(tmp_path, monkeypatch)
    stage = "write-10pct-v2"
    first = api.gates_doc(con, conf, stage=stage)
    assert first["stages"][0]["decision"] == "PROCEED"
    api.record_decisions(con, first, conf, "gates", now=_at(60 * 24 * 2))
    v1 = dbm.get_meta(con, "data_version")

    _late_invalid_origin(src)
    ingest(con, [src], conf)
    runner.analyse(con, conf)
    assert dbm.get_meta(con, "data_version") != v1
    second = api.gates_doc(con, conf, stage=stage)
    assert second["stages"][0]["decision"] == "ROLLBACK"
    api.record_decisions(con, second, conf, "gates", now=_at(60 * 24 * 2 + 60))

    # Reconstructed from the history, not recomputed from today's data.
    then = decisionlog.in_force(decisionlog.file_for(con), stage, at=_at(60 * 24 * 2 + 30))
    assert then["decision"] == "PROCEED"
    assert then["data_version"] == v1
    assert then["config_sha256"] == effective_settings(conf)["sha256"]
    assert then["gates"]["invalid_origin_rejection"]["status"] == "pass"
    assert then["reasons"] == []
    now = decisionlog.in_force(decisionlog.file_for(con), stage, at=_at(60 * 24 * 3))
    assert now["decision"] == "ROLLBACK"
    assert now["gates"]["invalid_origin_rejection"]["status"] == "fail"
    assert decisionlog.in_force(decisionlog.file_for(con), stage, at=_at(60 * 24 * 2 - 1)) is None

    changes = [
        e
        for e in decisionlog.timeline(decisionlog.file_for(con), stage)
        if e["kind"] == "evaluation"
    ]
    assert [(e["previous"], e["decision"]) for e in changes] == [
        (None, "PROCEED"),
        ("PROCEED", "ROLLBACK"),
    ]
    assert changes[0]["until"] == changes[1]["recorded_at"]
    assert decisionlog.verify_chain(decisionlog.read(decisionlog.file_for(con))) is None

    # The report shows the change and who acted, the operator's words as text only.
    decisionlog.record_action(
        decisionlog.file_for(con),
        "override",
        stage,
        by="mallory`<b>",
        decision="PROCEED",
        reason="<img src=x onerror=alert(1)>",
        now=_at(60 * 24 * 2 + 90),
    )
    doc = reportdoc.build(con, conf, stage)
    assert [e["kind"] for e in doc["decision_history"]["timeline"]] == [
        "evaluation",
        "evaluation",
        "override",
    ]
    md = render.to_markdown(doc)
    assert "PROCEED → **ROLLBACK**" in md and "ROLLBACK overridden to **PROCEED**" in md
    page = render.to_html(doc)
    assert "<img src=x" not in page and "<b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page

    # The same answer from the command line.
    db = str(tmp_path / "fleet.duckdb")
    con.close()
    r = run_cli(
        "history", "--db", db, "--stage", stage, "--recorded-at", "2026-11-30T00:30:00Z", "--json"
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["in_force"][stage]["decision"] == "PROCEED"


def test_only_changes_skips_identical_re_evaluations(tmp_path):
    con = dbm.connect(str(tmp_path / "h.duckdb"))
    conf = Config()
    assert decisionlog.record_evaluation(con, _doc("s", "HOLD"), conf, "watch", now=_at(1))
    assert not decisionlog.record_evaluation(
        con, _doc("s", "HOLD"), conf, "watch", now=_at(2), only_changes=True
    )
    assert decisionlog.record_evaluation(
        con, _doc("s", "ROLLBACK"), conf, "watch", now=_at(3), only_changes=True
    )
    # Without only_changes every evaluation is kept.
    assert decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), conf, "gates", now=_at(4))
    assert [r["decision"] for r in decisionlog.read(decisionlog.file_for(con))] == [
        "HOLD",
        "ROLLBACK",
        "ROLLBACK",
    ]
    [hold, rollback] = decisionlog.timeline(decisionlog.file_for(con))
    assert rollback["evaluations"] == 2 and hold["until"] == rollback["recorded_at"]


def test_operator_actions(tmp_path):
    con = dbm.connect(str(tmp_path / "h.duckdb"))
    conf = Config()
    with pytest.raises(ReplaygateError, match="no recorded decision"):
        decisionlog.record_action(decisionlog.file_for(con), "ack", "s", by="alice", now=_at(0))
    decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), conf, "gates", now=_at(1))
    with pytest.raises(ReplaygateError, match="in force .* is ROLLBACK"):
        decisionlog.record_action(
            decisionlog.file_for(con), "ack", "s", by="alice", decision="PROCEED", now=_at(2)
        )
    with pytest.raises(ReplaygateError, match="--reason"):
        decisionlog.record_action(
            decisionlog.file_for(con), "override", "s", by="alice", decision="PROCEED", now=_at(2)
        )
    with pytest.raises(ReplaygateError, match="--by"):
        decisionlog.record_action(decisionlog.file_for(con), "ack", "s", by=" ", now=_at(2))
    ack = decisionlog.record_action(decisionlog.file_for(con), "ack", "s", by="alice", now=_at(2))
    assert (ack["decision"], ack["in_force"]) == ("ROLLBACK", "ROLLBACK")
    ov = decisionlog.record_action(
        decisionlog.file_for(con),
        "override",
        "s",
        by="bob",
        decision="PROCEED",
        reason="test tenant",
        now=_at(3),
    )
    assert (ov["actor"], ov["note"], ov["in_force"]) == ("bob", "test tenant", "ROLLBACK")
    # An override is recorded next to the evaluation; it does not rewrite it.
    assert decisionlog.in_force(decisionlog.file_for(con), "s", at=_at(4))["decision"] == "ROLLBACK"
    assert [r["kind"] for r in decisionlog.read(decisionlog.file_for(con))] == [
        "evaluation",
        "ack",
        "override",
    ]


def test_chain_names_the_edited_row(tmp_path):
    con = dbm.connect(str(tmp_path / "h.duckdb"))
    path = decisionlog.file_for(con)
    assert path == tmp_path / "h.duckdb.history.jsonl"
    conf = Config()
    for i, d in enumerate(["HOLD", "ROLLBACK", "PROCEED"]):
        decisionlog.record_evaluation(con, _doc("s", d), conf, "gates", now=_at(i))
    assert decisionlog.verify_chain(decisionlog.read(path)) is None
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1].replace("ROLLBACK", "PROCEED") + lines[2])
    assert (
        decisionlog.verify_chain(decisionlog.read(path))
        == "decision history row 2: content changed"
    )
    path.write_text(lines[0] + lines[2])
    assert decisionlog.verify_chain(decisionlog.read(path)) == (
        "decision history row 3: previous-row link broken"
    )
    path.write_text(lines[0] + "not json\n" + lines[2])
    assert "line 2: not a JSON object" in decisionlog.verify_chain(decisionlog.read(path))


def test_appends_from_several_processes_keep_one_chain(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "h.duckdb"
    dbm.connect(str(db)).close()
    code = (
        "import sys; from replaygate.core import db as dbm; "
        "from replaygate.core.config import Config; from replaygate.audit import decisionlog; "
        "con = dbm.connect(sys.argv[1], read_only=True); "
        "doc = {'stages': [{'stage': sys.argv[2], 'decision': 'HOLD', 'reasons': [], "
        "'gates': []}]}; "
        "[decisionlog.record_evaluation(con, doc, Config(), 'gates') for _ in range(20)]"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(db), f"s{i}"]) for i in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    rows = decisionlog.read(decisionlog.file_for_db(db))
    assert [r["seq"] for r in rows] == list(range(1, 61))
    assert decisionlog.verify_chain(rows) is None


def test_cli_ack_override_history(tmp_path):
    db = str(tmp_path / "h.duckdb")
    con = dbm.connect(db)
    decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), Config(), "gates", now=_at(1))
    con.close()
    r = run_cli("ack", "--db", db, "--stage", "s", "--decision", "HOLD", "--by", "alice")
    assert r.returncode == 1 and "is ROLLBACK" in r.stderr and "not HOLD" in r.stderr
    r = run_cli("override", "--db", db, "--stage", "s", "--decision", "PROCEED", "--by", "bob")
    assert r.returncode == 1 and "--reason" in r.stderr
    r = run_cli(
        "override", "--db", db, "--stage", "s", "--decision", "proceed", "--by", "bob",
        "--reason", "test tenant", "--json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["decision"] == "PROCEED"
    r = run_cli("history", "--db", db, "--json")
    kinds = [e["kind"] for e in json.loads(r.stdout)["timeline"]]
    assert kinds == ["evaluation", "override"]
    assert json.loads(r.stdout)["chain"] == "intact"


ROLLOUT = """ts,stage,action,percent,scope,actor,note
2026-11-28T00:00:00Z,a,start,1,read,deploy-bot,
2026-11-28T01:00:00Z,a,proceed,,,carol,looks fine to me
2026-11-28T02:00:00Z,b,start,5,read,deploy-bot,
2026-11-28T02:30:00Z,b,proceed,,,dave,
2026-11-28T04:00:00Z,c,start,10,read,deploy-bot,
2026-11-28T04:30:00Z,c,proceed,,,erin,
2026-11-28T05:00:00Z,d,start,10,read,deploy-bot,
2026-11-28T05:30:00Z,d,proceed,,,frank,
2026-11-28T06:00:00Z,e,start,10,read,deploy-bot,
2026-11-28T06:30:00Z,e,proceed,,,grace,
2026-11-28T07:00:00Z,f,start,10,read,deploy-bot,
2026-11-28T07:30:00Z,f,hold,,,heidi,
"""


def check_proceeded_while_rollback(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "rollout.csv").write_text(ROLLOUT)
    con = dbm.connect(str(tmp_path / "r.duckdb"))
    conf = Config()
    ingest(con, [tmp_path / "in"], conf)
    runner.analyse(con, conf)
    assert runner.coverage(con)["proceeded_while_rollback"] == "no decision recorded"

    def rec(stage, decision, minute):
        decisionlog.record_evaluation(con, _doc(stage, decision), conf, "gates", now=_at(minute))

    rec("a", "ROLLBACK", 30)  # a: ROLLBACK in force at the proceed -> critical
    rec("b", "ROLLBACK", 130)  # b: overridden to PROCEED before the proceed -> high
    decisionlog.record_action(
        decisionlog.file_for(con),
        "override",
        "b",
        by="bob",
        decision="PROCEED",
        reason="INC-231",
        now=_at(140),
    )
    decisionlog.record_action(decisionlog.file_for(con), "ack", "b", by="alice", now=_at(141))
    # Near misses: superseded by PROCEED (c), HOLD (d), ROLLBACK recorded only after the
    # proceed (e), ROLLBACK and a hold action (f), another stage's ROLLBACK in force (d).
    rec("c", "ROLLBACK", 250)
    rec("c", "PROCEED", 260)
    rec("d", "HOLD", 310)
    rec("e", "ROLLBACK", 395)
    rec("f", "ROLLBACK", 425)
    assert not runner.is_current(con, conf)
    runner.analyse(con, conf)
    assert runner.is_current(con, conf)

    found = [f for f in findings_of(con) if f["detector"] == "proceeded_while_rollback"]
    by_stage = {f["detail"]["stage"]: f for f in found}
    assert set(by_stage) == {"a", "b"}
    a, b = by_stage["a"], by_stage["b"]
    assert a["severity"] == "critical" and a["stage"] == "a"
    assert a["detail"]["actor"] == "carol" and a["detail"]["note"] == "looks fine to me"
    assert a["detail"]["decision_in_force"] == "ROLLBACK" and a["detail"]["override"] is None
    assert a["ts"] == _at(60)
    assert b["severity"] == "high"
    assert b["detail"]["override"]["by"] == "bob"
    assert b["detail"]["override"]["reason"] == "INC-231"
    assert b["detail"]["acknowledged_by"] == "alice"
    assert b["detail"]["actor"] == "dave" and b["detail"]["note"] is None
    assert runner.coverage(con)["proceeded_while_rollback"] == "ok"


def test_watch_records_changes_and_keeps_actions_taken_while_it_runs(tmp_path, monkeypatch):
    from replaygate.watch import Watcher

    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "replaygate-demo-key")
    logs = tmp_path / "logs"
    shutil.copytree(SAMPLE, logs)
    conf = cfg.load(str(logs / "replaygate.toml"))
    db = tmp_path / "fleet.duckdb"
    w = Watcher([str(logs)], str(db), conf, say=lambda *_: None)
    try:
        assert w.cycle(1).error is None
        path = decisionlog.file_for_db(db)
        first = decisionlog.read(path)
        assert {r["source"] for r in first} == {"watch"} and len(first) == 4
        assert w.cycle(2).error is None
        assert decisionlog.read(path) == first  # nothing changed, nothing recorded
        # An operator acts on the published database while watch holds its copy.
        decisionlog.record_action(path, "ack", "write-10pct", by="alice")
        _late_invalid_origin(logs)
        assert w.cycle(3).error is None
        assert w.cycle(4).error is None
    finally:
        w.close()
    rows = decisionlog.read(path)
    assert decisionlog.verify_chain(rows) is None
    assert [r["kind"] for r in rows].count("ack") == 1
    v2 = [r["decision"] for r in rows if r["stage"] == "write-10pct-v2"]
    assert v2 == ["PROCEED", "ROLLBACK"]
    # Published with findings current for the history, the ack included.
    con = dbm.connect(str(db), read_only=True)
    assert runner.is_current(con, conf)


def test_rollout_page_shows_the_history_and_the_decision_in_force(sample_db, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    db = tmp_path / "fleet.duckdb"
    shutil.copy(sample_db, db)
    conf = cfg.load(str(SAMPLE / "replaygate.toml"))
    con = dbm.connect(str(db), read_only=True)
    doc = api.gates_doc(con, conf, all_stages=True)
    api.record_decisions(con, doc, conf, "gates", now=_at(60 * 24))
    con.close()
    decisionlog.record_action(
        decisionlog.file_for_db(db),
        "override",
        "write-10pct",
        by="<b>mallory</b>",
        decision="PROCEED",
        reason="test tenant",
        now=_at(60 * 24 + 5),
    )
    monkeypatch.setenv("REPLAYGATE_DB", str(db))
    monkeypatch.setenv("REPLAYGATE_CONFIG", str(SAMPLE / "replaygate.toml"))
    data.store.clear()
    app = AppTest.from_file(str(Path(render.__file__).parent / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("views/rollout.py").run()
    assert not app.exception, [e.message for e in app.exception]
    frames = {f.key: f.value for f in app.dataframe if getattr(f, "key", None)}
    hist = frames.get("decision_history")
    if hist is None:  # older Streamlit: frames without keys, in page order
        hist, in_force = app.dataframe[-2].value, app.dataframe[-1].value
    else:
        in_force = frames["decision_in_force"]
    assert list(hist["event"]).count("override") == 1
    assert "<b>mallory</b>" in list(hist["by"])
    assert dict(zip(in_force["stage"], in_force["in force"], strict=True))["write-10pct"] == (
        "ROLLBACK"
    )


def test_analysis_reads_the_history_without_importing_pandas(tmp_path, sample_db):
    # Building Arrow arrays from Python values imports pandas: 0.7 s of every re-analysis
    # that `watch` runs in a fresh process, more than a small append's own work.
    db = tmp_path / "h.duckdb"
    shutil.copy(sample_db, db)
    con = dbm.connect(str(db))
    decisionlog.record_evaluation(con, _doc("s", "ROLLBACK"), Config(), "gates", now=_at(1))
    decisionlog.record_evaluation(con, _doc("s", "HOLD"), Config(), "gates", now=_at(2))
    con.close()
    code = (
        "import sys; from replaygate.core import db as dbm; "
        "from replaygate.core.config import Config; from replaygate.queries import runner; "
        "con = dbm.connect(sys.argv[1]); runner.analyse(con, Config(), force=True); "
        "rows = con.execute('SELECT stage, decision, reasons::VARCHAR FROM decision_history "
        "ORDER BY seq').fetchall(); print(rows); assert 'pandas' not in sys.modules"
    )
    r = subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(
        [("s", "ROLLBACK", '["a reason"]'), ("s", "HOLD", '["a reason"]')]
    )
