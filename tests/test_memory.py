"""Memory limits: connections, ingest and the dashboard run under bounded limits, not
DuckDB's default of 80 % of RAM; an analysis' limit grows with the events stored."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replaygate.core import db
from replaygate.core.config import Config
from replaygate.ingest import load
from replaygate.queries import runner

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


GB = 10**9
M = 10**6


@pytest.mark.parametrize(
    ("events", "ram", "limit"),
    [
        (0, 64 * GB, 3 * GB),
        (M, 64 * GB, 3 * GB),
        (10 * M, 64 * GB, 3 * GB),  # 3 GB up to 10M events
        (20 * M, 64 * GB, 6 * GB),
        (25 * M, 64 * GB, 7.5 * GB),  # 0.3 GB a million
        (40 * M, 64 * GB, 12 * GB),
        (100 * M, 64 * GB, 12 * GB),  # capped at 12 GB
        (100 * M, 23 * GB, 12 * GB),  # this machine: 60 % is 13.8 GB
        (100 * M, 16 * GB, 9.6 * GB),  # 60 % of the machine's memory
        (25 * M, 8 * GB, 4.8 * GB),
        (100 * M, 4 * GB, 3 * GB),  # never below 3 GB, though that is 75 % of it
        (100 * M, None, 3 * GB),  # memory not known: the floor
    ],
)
def test_the_analysis_limit_grows_with_the_events_up_to_its_cap(events, ram, limit):
    assert db.analysis_limit(events, ram) == limit


@given(
    st.integers(min_value=0, max_value=10**11),
    st.integers(min_value=0, max_value=10**11),
    st.one_of(st.none(), st.integers(min_value=GB, max_value=10**13)),
)
def test_the_analysis_limit_is_monotone_and_bounded(a, b, ram):
    low, high = sorted((a, b))
    assert db.analysis_limit(low, ram) <= db.analysis_limit(high, ram)
    limit = db.analysis_limit(high, ram)
    assert limit >= 3 * GB
    if limit > 3 * GB:
        assert ram is not None
        assert limit <= min(12 * GB, 0.6 * ram)
        assert limit == min(high * 300, 12 * GB, int(0.6 * ram))


def test_the_override_wins_over_the_rule(monkeypatch):
    monkeypatch.setenv("REPLAYGATE_MEMORY_LIMIT", "1GB")
    for work in ("analysis", "dashboard", "ingest"):
        assert db.memory_limit(work, 100 * M) == "1GB"
    monkeypatch.delenv("REPLAYGATE_MEMORY_LIMIT")
    monkeypatch.setattr(db, "physical_memory", lambda: 64 * GB)
    assert db.memory_limit("analysis", 25 * M) == "7500MB"
    assert db.memory_limit("dashboard") == "3000MB"
    assert db.memory_limit("ingest") == "1.5GB"


def test_physical_memory_is_known_here():
    ram = db.physical_memory()
    assert ram is not None and ram > GB


@pytest.fixture
def small_millions(monkeypatch, no_override):
    """A million events stands for a thousand (a store of 25,000 events is ruled as one
    of 25M), on a machine of 64 GB."""
    monkeypatch.setattr(db, "ANALYSIS_PER_EVENT", 300 * 1000)
    monkeypatch.setattr(db, "physical_memory", lambda: 64 * GB)


def _add_events(con, n: int) -> None:
    con.execute("INSERT INTO events (event_id) SELECT 'e' || range FROM range($n)", {"n": n})


def test_a_connection_to_a_large_store_gets_the_rule_s_limit(tmp_path, small_millions):
    path = str(tmp_path / "a.duckdb")
    con = db.connect(path)
    _add_events(con, 25_000)
    con.close()
    for read_only in (False, True):
        con = db.connect(path, read_only=read_only)
        assert db.stored_events(con) == 25_000
        assert _setting(con) == pytest.approx(7.5e9, rel=0.05)
        con.close()


def test_an_analysis_raises_the_limit_for_the_events_stored_since_the_open(
    tmp_path, small_millions
):
    con = db.connect(str(tmp_path / "a.duckdb"))
    assert _setting(con) == pytest.approx(3e9, rel=0.05)
    _add_events(con, 40_000)  # as an ingest or a watch cycle adds them
    said = []
    runner.analyse(con, Config(), note=said.append)
    assert _setting(con) == pytest.approx(12e9, rel=0.05)
    assert said == [
        "analysing 40,000 events under a memory limit of 12.0 GB "
        "(3 GB up to 10M events; REPLAYGATE_MEMORY_LIMIT overrides)"
    ]


def test_an_analysis_under_the_floor_or_the_override_says_nothing(tmp_path, small_millions):
    con = db.connect(str(tmp_path / "a.duckdb"))
    _add_events(con, 5_000)
    said = []
    runner.analyse(con, Config(), note=said.append)
    assert said == [] and _setting(con) == pytest.approx(3e9, rel=0.05)


def test_ingest_restores_the_limit_for_the_events_it_stored(tmp_path, small_millions):
    (tmp_path / "events.jsonl").write_text("{}\n")
    con = db.connect(str(tmp_path / "a.duckdb"))
    _add_events(con, 20_000)
    assert _setting(con) == pytest.approx(3e9, rel=0.05)  # opened before them
    load.ingest(con, [tmp_path / "events.jsonl"], Config())
    assert _setting(con) == pytest.approx(6e9, rel=0.05)


def test_the_events_are_counted_by_the_system_s_functions_not_the_database_s_macros(
    tmp_path, no_override
):
    # Counted before the database's objects are checked: its macros may shadow a name.
    import duckdb

    path = str(tmp_path / "a.duckdb")
    con = duckdb.connect(path)
    con.execute("CREATE TABLE events (event_id VARCHAR)")
    con.execute("INSERT INTO events VALUES ('a'), ('b')")
    con.execute("CREATE MACRO count_star() AS 40000000000")
    con.execute("CREATE MACRO current_database() AS 'elsewhere'")
    con.execute("CREATE MACRO duckdb_tables() AS TABLE SELECT 1 AS x")
    con.close()
    con = duckdb.connect(path, read_only=True)
    assert db.stored_events(con) == 2


def test_the_cli_help_states_the_rule_from_its_one_place():
    from click.testing import CliRunner

    from replaygate.cli import cli

    out = CliRunner().invoke(cli, ["--help"]).output
    assert "REPLAYGATE_MEMORY_LIMIT" in " ".join(out.split())
    assert " ".join(db.memory_help().split()) in " ".join(out.split())
    assert "0.3 GB more per million" in db.memory_help()
