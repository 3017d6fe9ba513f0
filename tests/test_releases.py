"""Stages are scoped by release: two releases with the same stage names stay apart, a
session's cohort is its release's stage within that stage's window, and a log without
releases keeps working as before."""

from __future__ import annotations

import json

from replaygate.core import db as dbm
from replaygate.ingest.load import ingest
from replaygate.queries import gates as gm
from replaygate.queries import runner

from .conftest import FLEET_CONFIG

EVIL = "https://evil.example"
# EVIL is foreign to this allow-list (with none configured, a foreign Origin is not judged).
CONF = FLEET_CONFIG


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _session(ts, hmac, release=None, stage=None):
    return {
        "schema": "mcpHttpSession.v1",
        "ts": ts,
        "session_hmac": hmac,
        "generation": 1,
        "state": "SESSION_ACTIVE",
        "release": release,
        "rollout_stage": stage,
    }


def _request(ts, hmac, status):
    return {
        "schema": "mcpProxyLog.v1",
        "ts": ts,
        "method": "POST",
        "status": status,
        "session_hmac": hmac,
        "origin": EVIL,
    }


def _rollout(ts, stage, action, release=None, scope="read"):
    rec = {"schema": "mcpRollout.v1", "ts": ts, "stage": stage, "action": action}
    if release:
        rec["release"] = release
    if action == "start":
        rec["scope"] = scope
    return rec


def _db(tmp_path, rows):
    _write(tmp_path / "fleet.jsonl", rows)
    con = dbm.connect(str(tmp_path / "fleet.duckdb"))
    ingest(con, [tmp_path / "fleet.jsonl"], CONF)
    runner.analyse(con, CONF)
    return con


def _two_releases(tmp_path):
    # v1 rolls out canary then full (never completed, so full stays open); v2 then starts
    # its own canary while v1's full is still serving.
    return _db(
        tmp_path,
        [
            _rollout("2026-11-30T00:00:00Z", "canary", "start", "v1"),
            _rollout("2026-11-30T01:00:00Z", "full", "start", "v1"),
            _rollout("2026-11-30T02:00:00Z", "canary", "start", "v2"),
            _rollout("2026-11-30T03:00:00Z", "canary", "rollback", "v2"),
            _session("2026-11-30T00:10:00Z", "s-v1-early", release="v1"),
            _session("2026-11-30T02:05:00Z", "s-v1-late", release="v1"),
            _session("2026-11-30T02:05:00Z", "s-v2", release="v2"),
            _session("2026-11-30T02:05:00Z", "s-v0", release="v0"),  # baseline
            _request("2026-11-30T00:30:00Z", "s-v1-early", 200),
            _request("2026-11-30T02:30:00Z", "s-v1-late", 403),
            _request("2026-11-30T02:30:00Z", "s-v2", 200),
            _request("2026-11-30T02:31:00Z", "s-v0", 200),
            _request("2026-11-30T02:40:00Z", None, 403),  # no session: the timeline
        ],
    )


def test_two_releases_with_the_same_stage_names_stay_apart(tmp_path):
    con = _two_releases(tmp_path)
    stages = con.execute(
        "SELECT stage, release, stage_name, end_ts IS NULL FROM a_stages ORDER BY start_ts"
    ).fetchall()
    assert stages == [
        ("canary@v1", "v1", "canary", False),
        ("full@v1", "v1", "full", True),
        ("canary@v2", "v2", "canary", False),
    ]
    doc = gm.evaluate(con, CONF, all_stages=True)
    origin = {
        s["stage"]: next(g for g in s["gates"] if g["id"] == "invalid_origin_rejection")
        for s in doc["stages"]
    }
    assert {k: (g["sample"], g["failures"]) for k, g in origin.items()} == {
        "canary@v1": (1, 1),
        "full@v1": (1, 0),
        "canary@v2": (2, 1),
    }
    by_stage = {s["stage"]: s for s in doc["stages"]}
    assert by_stage["canary@v2"]["release"] == "v2"
    assert by_stage["canary@v2"]["stage_name"] == "canary"
    assert by_stage["canary@v2"]["rolled_back"] and not by_stage["canary@v1"]["rolled_back"]
    found = con.execute(
        """SELECT stage, session_hmac FROM findings
           WHERE detector = 'invalid_origin_accepted' ORDER BY ts"""
    ).fetchall()
    # The baseline release's finding belongs to no stage.
    assert found == [("canary@v1", "s-v1-early"), ("canary@v2", "s-v2"), (None, "s-v0")]


def test_stage_is_resolved_by_name_and_release(tmp_path):
    import pytest

    from replaygate.core.errors import ReplaygateError

    con = _two_releases(tmp_path)
    assert gm.resolve_stage(con, "canary", "v1") == "canary@v1"
    assert gm.resolve_stage(con, "canary@v2") == "canary@v2"
    assert gm.resolve_stage(con, "full") == "full@v1"
    assert gm.resolve_stage(con, None, "v1") == "full@v1"  # the release's newest stage
    with pytest.raises(ReplaygateError, match="several releases"):
        gm.resolve_stage(con, "canary")
    with pytest.raises(ReplaygateError, match="no stage named 'full' of release 'v2'"):
        gm.resolve_stage(con, "full", "v2")


def test_log_without_releases_uses_the_stamped_stage(tmp_path):
    # A log that names no release; sessions stamped with a stage (older recorders) or with
    # a release the log does not know: the stage stamp decides, windows are global.
    con = _db(
        tmp_path,
        [
            _rollout("2026-11-30T00:00:00Z", "canary", "start"),
            _rollout("2026-11-30T01:00:00Z", "full", "start"),
            _session("2026-11-30T00:10:00Z", "a", release="v9", stage="canary"),
            _session("2026-11-30T00:10:00Z", "b"),
            _request("2026-11-30T00:30:00Z", "a", 200),
            _request("2026-11-30T00:31:00Z", "b", 200),
            _request("2026-11-30T01:30:00Z", "a", 200),  # after canary's window: no stage
            _request("2026-11-30T01:31:00Z", None, 200),
        ],
    )
    assert con.execute("SELECT stage, release FROM a_stages ORDER BY start_ts").fetchall() == [
        ("canary", None),
        ("full", None),
    ]
    found = con.execute(
        """SELECT stage, session_hmac FROM findings
           WHERE detector = 'invalid_origin_accepted' ORDER BY ts"""
    ).fetchall()
    assert found == [("canary", "a"), (None, "b"), (None, "a"), ("full", None)]


def test_database_from_before_the_release_field_gets_the_column(tmp_path):
    import duckdb

    path = str(tmp_path / "old.duckdb")
    con = dbm.connect(path)
    con.execute("ALTER TABLE rollout DROP COLUMN release")
    con.execute("ALTER TABLE sessions DROP COLUMN release")
    con.close()
    con = dbm.connect(path)
    cols = {r[0] for r in con.execute("DESCRIBE rollout").fetchall()}
    assert "release" in cols
    con.close()
    assert duckdb.connect(path, read_only=True).execute(
        "SELECT count(*) FROM sessions WHERE release IS NULL"
    ).fetchone() == (0,)
