"""`history`, `rollout` and `watch` take --config and, without it, use the configuration
the database was last analysed with, like every reader (replaygate/api.py resolve_config)."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import ROOT, SAMPLE_CONF
from .conftest import run_cli as run

# The sample's settings with a narrower time range: records after 2030 are implausible.
NARROW = (ROOT / SAMPLE_CONF).read_text() + '\n[ts_bounds]\nmax = "2030-01-01T00:00:00Z"\n'


@pytest.fixture
def narrow_db(sample_db, tmp_path):
    """A copy of the sample database analysed with the narrow configuration (stored)."""
    db = tmp_path / "narrow.duckdb"
    shutil.copy(sample_db, db)
    conf = tmp_path / "narrow.toml"
    conf.write_text(NARROW)
    r = run("findings", "--db", db, "--config", conf, "--json")
    assert r.returncode == 0, r.stderr
    status = json.loads(run("status", "--db", db, "--json").stdout)
    assert status["configuration"]["findings_current"]
    return db, conf, status["configuration"]["sha256"]


def test_rollout_checks_records_against_the_stored_configuration(narrow_db, tmp_path):
    db, _, _ = narrow_db
    late = ["--release", "r9", "--stage", "late", "--scope", "read", "--at", "2031-01-01T00:00:00Z"]
    r = run("rollout", "start", *late, "--db", db)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "outside the plausible time range" in r.stderr
    # --config wins: the defaults accept the time; the line after success names it.
    defaults = tmp_path / "defaults.toml"
    defaults.write_text("")
    r = run("rollout", "start", *late, "--db", db, "--config", defaults)
    assert r.returncode == 0, r.stderr
    assert "configuration: " in r.stderr and "--config" in r.stderr
    # Without --config, the line says the stored configuration was used.
    r = run("rollout", "start", *late, "--to", tmp_path / "log.jsonl", "--db", db)
    assert r.returncode == 1 and "outside the plausible time range" in r.stderr
    r = run("rollout", "hold", "--release", "r9", "--stage", "late", "--db", db,
            "--config", defaults)  # fmt: skip
    assert r.returncode == 0, r.stderr


def test_history_takes_config_and_marks_decisions_of_another(narrow_db, tmp_path):
    db, _, _ = narrow_db
    r = run("gates", "--db", db, "--stage", "write-10pct", "--record", "--json")
    assert r.returncode == 3, r.stderr
    # Without --config: the stored configuration, the one the decision was made with.
    r = run("history", "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    # The digest the history records (of every setting in force) is the current one.
    (entry,) = doc["timeline"]
    digest = entry["config_sha256"]
    assert doc["configuration"]["sha256"] == digest
    assert "as stored with the analysis" in r.stderr
    text = run("history", "--db", db, "--stage", "write-10pct").stdout
    assert "write-10pct" in text and "another configuration" not in text
    at = ["--stage", "write-10pct", "--at", "2026-11-28T04:30:00Z"]
    r = run("history", "--db", db, *at)
    assert r.returncode == 0, r.stderr
    assert f"configuration {digest[:12]})" in r.stdout
    # With another configuration the decisions made with this one say so.
    other = tmp_path / "other.toml"
    other.write_text("")
    r = run("history", "--db", db, *at, "--config", other)
    assert r.returncode == 0, r.stderr
    assert f"configuration {digest[:12]} (not the current one)" in r.stdout
    assert "--config" in r.stderr
    r = run("history", "--db", db, "--stage", "write-10pct", "--config", other)
    assert "another configuration" in r.stdout
    assert (
        json.loads(run("history", "--db", db, "--json", "--config", other).stdout)["configuration"][
            "sha256"
        ]
        != digest
    )


def test_watch_keeps_the_stored_configuration(narrow_db, tmp_path):
    db, _, digest = narrow_db
    logs = tmp_path / "nothing-new"
    logs.mkdir()
    r = run("watch", logs, "--db", db, "--every", "0.2s", "--cycles", "1")
    assert r.returncode == 0, r.stderr
    assert "configuration: " in r.stderr and "as stored with the analysis" in r.stderr
    # It analysed (if at all) with the stored configuration: still the one in the database.
    status = json.loads(run("status", "--db", db, "--json").stdout)["configuration"]
    assert status["sha256"] == digest and status["findings_current"]


def test_ingest_keeps_the_stored_configuration(narrow_db, tmp_path):
    """`ingest` without --config reads the stored configuration through the connection
    it loads with (not one opened for it apart), and analyses with it: the database keeps
    the narrow configuration, where the defaults would replace it."""
    db, _, digest = narrow_db
    logs = tmp_path / "nothing-new"
    logs.mkdir()
    r = run("ingest", logs, "--db", db, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["findings"] is not None
    status = json.loads(run("status", "--db", db, "--json").stdout)["configuration"]
    assert status["sha256"] == digest and status["findings_current"]
    # A configuration that does not load fails the command before it makes a database.
    (tmp_path / "replaygate.toml").write_text("no_such_key = 1\n")
    fresh = tmp_path / "fresh.duckdb"
    r = run("ingest", logs, "--db", fresh, cwd=tmp_path)
    assert r.returncode == 1 and "no_such_key" in r.stderr
    assert not fresh.exists()
