"""No reader of a prepared table depends on the order of its rows.

DuckDB stores a table's rows in the order its statement produced them only while
`preserve_insertion_order` is on, and even then a join's output comes in the order its
threads finish (`a_gate_requests`' rows moved between two runs of one 10M-event
database), and the load keeps no order of the records either. So the analysis is run here
on records shuffled after their load, with every table it writes shuffled right after it
is written — each prepare file's tables before the next file and the detectors read them,
the findings and their companions before the gate facts read them, the gate facts before
the gates and the report read them — and everything a user sees must come out byte for
byte as from an analysis left in its own order: findings, coverage, the units it cannot
tell, the gates and decisions of every stage, and the report in each format.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from replaygate.audit import reportdoc
from replaygate.core import db as dbm
from replaygate.core.contract import RECORD_TYPES
from replaygate.dashboard import report
from replaygate.ingest.load import ingest
from replaygate.queries import buckets, catalog, gates, named, runner
from replaygate.queries.filters import Filters
from replaygate.sim import simulate

from .conftest import FLEET_CONFIG

# The analysis' own tables besides the prepared ones (a_*): what the detectors write and
# the gate facts and the report read.
RESULTS = (
    "findings",
    "coverage",
    "cannot_tell",
    "cannot_tell_stages",
    "cannot_tell_units",
    "blind_files",
)


def _tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    names = {
        t
        for (t,) in con.execute(
            "SELECT table_name FROM duckdb_tables() WHERE NOT temporary AND schema_name = 'main'"
        ).fetchall()
    }
    return sorted(t for t in names if t.startswith("a_") or t in RESULTS)


def shuffle(con: duckdb.DuckDBPyConnection, seed: int, tables: list[str] | None = None) -> None:
    """Every prepared and result table's rows (or `tables`') rewritten in an order drawn
    from their places and `seed` (an ORDER BY holds whatever `preserve_insertion_order` is)."""
    for t in _tables(con) if tables is None else tables:
        con.execute(f"CREATE OR REPLACE TEMP TABLE rg_rows AS SELECT *, rowid AS rg_place FROM {t}")
        con.execute(f"DELETE FROM {t}")
        con.execute(
            f"INSERT INTO {t} SELECT * EXCLUDE (rg_place) FROM rg_rows "
            "ORDER BY hash(rg_place + $seed)",
            {"seed": seed},
        )
        con.execute("DROP TABLE rg_rows")


def _seen(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """What a user sees of an analysis: its tables as sets (ordered here), the gates and
    decisions of every stage, and the report of each stage in every text format."""
    out: dict[str, Any] = {
        t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
        for t in ("findings", "coverage", "cannot_tell", "cannot_tell_stages", "cannot_tell_units")
    }
    # the analysis' own seconds per detector vary run to run
    out["coverage"] = [r[:-1] for r in out["coverage"]]
    out["findings_doc"] = json.dumps(runner.findings_doc(con), default=str)
    out.update(_dashboard(con))
    doc = gates.document(con, FLEET_CONFIG, all_stages=True)
    out["gates"] = json.dumps(doc, default=str, sort_keys=False)
    for judged in doc["stages"]:
        rd = reportdoc.build(con, FLEET_CONFIG, judged["stage"], db_path="fleet.duckdb")
        rd.pop("generated_at", None)
        out[f"report {judged['stage']}"] = (
            report.to_markdown(rd),
            report.to_json(rd),
            report.to_html(rd),
        )
    return out


def _dashboard(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """Every dashboard query as it lists its rows (their order is what a page shows), for
    the whole fleet and for the session with the most findings."""
    named.prepare(con)
    (s,) = con.execute(
        "SELECT session_hmac FROM findings WHERE session_hmac IS NOT NULL "
        "GROUP BY ALL ORDER BY count(*) DESC, session_hmac LIMIT 1"
    ).fetchone()
    args = {
        "flt": Filters(),
        "dets": sorted(catalog.detectors()),
        "bucket": "1 hour",
        "limit": 500,
        "s": s,
        "stream": None,
    }
    out = {}
    for name, q in named.load("dashboard").items():
        # freshness and files show when each database was loaded: the two differ by that
        if name in ("setup", "freshness", "files") or not set(q.params) <= set(args):
            continue
        rows = named.execute(con, name, **args).fetchall()
        if name == "coverage":  # the detectors' own seconds vary run to run
            rows = [r[:-1] for r in rows]
        # A query that orders its rows is shown in that order; one that does not is read
        # into a mapping by its caller (dashboard/model.py)
        ordered = re.search(r"\bORDER\s+BY\b(?:(?!\bFROM\b|\bSELECT\b).)*$", q.body(), re.I | re.S)
        out[f"dashboard {name}"] = rows if ordered else sorted(rows, key=repr)
    return out


@pytest.fixture(scope="module")
def fleet_files(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("order") / "fleet"
    simulate(out, seed=11, sessions=300, fmt="mixed", faults="all", config=FLEET_CONFIG)
    return out


def _analysed(path: Path, files: Path) -> duckdb.DuckDBPyConnection:
    con = dbm.connect(str(path))
    ingest(con, [files], FLEET_CONFIG)
    return con


def test_the_analysis_reads_no_table_by_the_order_of_its_rows(fleet_files, tmp_path, monkeypatch):
    plain = _analysed(tmp_path / "plain.duckdb", fleet_files)
    runner.analyse(plain, FLEET_CONFIG, force=True)
    expected = _seen(plain)
    assert expected["findings"] and len(expected) > 7, "nothing to compare"

    seed = 1
    run_prep, gate_facts = buckets.run, runner._gate_facts

    def prep_then_shuffle(con: duckdb.DuckDBPyConnection, q: Any) -> None:
        run_prep(con, q)
        shuffle(con, seed)

    def shuffle_then_facts(con: duckdb.DuckDBPyConnection, values: dict[str, Any]) -> None:
        shuffle(con, seed)
        gate_facts(con, values)
        shuffle(con, seed)

    monkeypatch.setattr(buckets, "run", prep_then_shuffle)
    monkeypatch.setattr(runner, "_gate_facts", shuffle_then_facts)
    shuffled = _analysed(tmp_path / "shuffled.duckdb", fleet_files)
    # The records too: the load keeps no order of its rows either (ingest/load.py).
    shuffle(shuffled, 3, [rt.table for rt in RECORD_TYPES])
    for seed in (1, 7):
        runner.analyse(shuffled, FLEET_CONFIG, force=True)
        got = _seen(shuffled)
        for key in expected:
            assert got[key] == expected[key], f"{key} depends on the order of rows (seed {seed})"

    # The shuffle has teeth: a reader by position sees other rows.
    def first_rows(con: duckdb.DuckDBPyConnection, t: str) -> list[Any]:
        return con.execute(f"SELECT * FROM {t} LIMIT 20").fetchall()

    moved = [
        t
        for t in ("a_sessions", "a_streams", "a_gate_units", "findings")
        if first_rows(plain, t) != first_rows(shuffled, t)
    ]
    assert moved == ["a_sessions", "a_streams", "a_gate_units", "findings"]
