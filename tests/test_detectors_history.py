"""Focused test of the detector that reads the decision history (its cases, near misses
included, are built in test_history.py)."""

import pytest

from replaygate.queries import catalog

from .test_history import check_proceeded_while_rollback


def test_proceeded_while_rollback(tmp_path):
    assert "decision_history" in catalog.detectors()["proceeded_while_rollback"].needs
    check_proceeded_while_rollback(tmp_path)


def test_proceeded_while_rollback_with_releases(tmp_path):
    """The rollout log names releases: the history keeps `stage@release`, the action the
    bare stage and its release; the finding is filed under the stage acted on, and an
    ack by `--stage S --release R` names it."""
    from replaygate.audit import decisionlog
    from replaygate.core import db as dbm
    from replaygate.core.config import Config
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    from .conftest import findings_of, run_cli
    from .test_history import _at, _doc

    (tmp_path / "in").mkdir()
    # Two releases' canaries; 2.5.0's proceed happens inside 2.6.0's later window.
    (tmp_path / "in" / "rollout.csv").write_text(
        "ts,stage,release,action,percent,scope,actor,note\n"
        "2026-11-28T00:00:00Z,canary,2.5.0,start,1,read,deploy-bot,\n"
        "2026-11-28T00:30:00Z,canary,2.6.0,start,1,read,deploy-bot,\n"
        "2026-11-28T01:00:00Z,canary,2.5.0,proceed,,,carol,\n"
    )
    db = tmp_path / "r.duckdb"
    con = dbm.connect(str(db))
    conf = Config()
    ingest(con, [tmp_path / "in"], conf)
    runner.analyse(con, conf)
    doc = _doc("canary@2.5.0", "ROLLBACK")
    doc["stages"][0]["release"] = "2.5.0"
    decisionlog.record_evaluation(con, doc, conf, "gates", now=_at(30))
    # A stage without release whose name is the other's key: refused at validation, so
    # no evaluation of it can stand for canary of 2.5.0.
    runner.analyse(con, conf)
    found = [f for f in findings_of(con) if f["detector"] == "proceeded_while_rollback"]
    assert len(found) == 1
    assert found[0]["stage"] == "canary@2.5.0"  # not 2.6.0's window, open at the time
    assert found[0]["detail"]["release"] == "2.5.0"
    con.close()
    r = run_cli("ack", "--db", db, "--stage", "canary", "--release", "2.5.0", "--by", "alice")
    assert r.returncode == 0, r.stderr
    assert decisionlog.read(decisionlog.file_for_db(db))[-1]["stage"] == "canary@2.5.0"


def test_stage_names_cannot_forge_a_stage_at_release_key():
    from replaygate.core.errors import ReplaygateError
    from replaygate.ingest import rolloutlog

    rec = rolloutlog.record("start", release=None, stage="canary@2.5.0", ts="2026-11-28T00:00:00Z")
    with pytest.raises(ReplaygateError, match="stage: must not contain @"):
        rolloutlog.check([rec])
