"""Memory limits: connections, ingest and the dashboard run under bounded limits, not
DuckDB's default of 80 % of RAM."""

from __future__ import annotations

import pytest

from replaygate.core import db
from replaygate.core.config import Config
from replaygate.ingest import load

GIB = 1 << 30


def _setting(con) -> float:
    """The connection's memory limit in bytes (DuckDB prints it as e.g. "2.7 GiB")."""
    text = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    number, unit = text.split()
    return float(number) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": GIB, "TiB": 1 << 40}[unit]


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("REPLAYGATE_MEMORY_LIMIT", raising=False)


def test_a_connection_has_the_default_limit(tmp_path, no_override):
    con = db.connect(str(tmp_path / "a.duckdb"))
    assert _setting(con) == pytest.approx(3e9, rel=0.1)


def test_ingest_stages_under_its_limit_then_restores_the_default(
    tmp_path, no_override, monkeypatch
):
    (tmp_path / "sessions.jsonl").write_text("{}\n")
    con = db.connect(str(tmp_path / "a.duckdb"))
    during = []
    stage = load._Loader.stage

    def watched(self, *args):
        during.append(_setting(self.con))
        return stage(self, *args)

    monkeypatch.setattr(load._Loader, "stage", watched)
    load.ingest(con, [tmp_path / "sessions.jsonl"], Config())
    # Staged once, or twice when a read straight into its table did not load it whole
    # (an empty object: load.DIRECT_READS), each time under the ingest's limit.
    assert during and during == [pytest.approx(1.5e9, rel=0.1)] * len(during)
    # The analysis that follows on the same connection is bounded too.
    assert _setting(con) == pytest.approx(3e9, rel=0.1)


def test_the_override_applies_to_both(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYGATE_MEMORY_LIMIT", "1GB")
    con = db.connect(str(tmp_path / "a.duckdb"))
    assert _setting(con) == pytest.approx(1e9, rel=0.1)
    assert db.memory_limit("ingest") == "1GB"
