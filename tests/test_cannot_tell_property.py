"""Property: removing an optional column or a whole source from a fleet never adds a
finding, except for the rules about a field's absence (listed in docs/detectors.md) and
the server bases: without client receipts a session's stream findings are judged from the
server's own records (basis `server`), which can see a replay fault the client's view
had cleared (say, a crossed event the client rejected)."""

from __future__ import annotations

import shutil

import duckdb
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest.capabilities import optional_facts
from replaygate.ingest.load import ingest
from replaygate.queries import runner
from replaygate.sim import simulate

# (detector, removed field): rules about that field's absence, or that read its absence
# as "none" by definition.
ABSENCE_RULES = {
    ("missing_idempotency_key", "dispatches.idempotency_key"),
    ("duplicate_dispatch", "dispatches.idempotency_key"),
    ("reinit_missing", "proxy.principal"),
}
TABLES = ("sessions", "streams", "events", "inbox", "dispatches", "proxy")
KEY = ("detector", *runner.UNIT_COLUMNS, "ts")


def _findings(folder, db) -> dict[tuple, str | None]:
    """Each finding's unit, with its basis."""
    con = dbm.connect(str(db))
    ingest(con, [folder], Config())
    runner.analyse(con, Config())
    rows = con.execute(
        f"SELECT {', '.join(KEY)}, json_extract_string(detail, '$.basis') FROM findings"
    ).fetchall()
    con.close()
    return {r[:-1]: r[-1] for r in rows}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("prop") / "fleet"
    simulate(out, seed=5, sessions=60, fmt="parquet")
    (out / "truth.json").unlink()
    # one proxy file: removal is one table (a column removed from one of several proxy
    # files is partial blindness, a different question)
    for extra in out.glob("proxy-*.jsonl"):
        extra.unlink()
    return out, _findings(out, out.parent / "base.duckdb")


# Removing a session's id also removes what only names a part of that session.
_IMPLIED = {("session_hmac", "generation")}


def _mask(key: tuple, positions: set[int]) -> tuple:
    return tuple(None if i in positions else v for i, v in enumerate(key))


def _removals():
    columns = [f for t in TABLES for f in optional_facts(t)]
    return st.one_of(st.sampled_from(columns), st.sampled_from([f"{t}.*" for t in TABLES]))


@pytest.mark.slow
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(removal=_removals())
@example(removal="events.*")  # receipts whose origin only the event log could resolve
@example(removal="dispatches.idempotency_key")
@example(removal="proxy.principal")
@example(removal="proxy.session_hmac")  # the unit column itself
def test_removing_data_never_adds_findings(fleet, tmp_path_factory, removal):
    src, base = fleet
    table, column = removal.split(".", 1)
    work = tmp_path_factory.mktemp("cut")
    folder = work / "fleet"
    shutil.copytree(src, folder)
    target = folder / f"{table}.parquet"
    if column == "*":
        target.unlink()
    else:
        con = duckdb.connect()
        tmp = work / "cut.parquet"
        con.execute(
            f"COPY (SELECT * EXCLUDE ({column}) FROM read_parquet($p)) TO '{tmp}' (FORMAT parquet)",
            {"p": str(target)},
        )
        con.close()
        shutil.move(tmp, target)
    cut = _findings(folder, work / "cut.duckdb")
    # A removed unit column (a proxy log without session ids) leaves the same finding
    # under a unit without that column: compare units with it masked on both sides.
    masked = {i for i, c in enumerate(KEY) if c == column or (column, c) in _IMPLIED}
    known = {_mask(k, masked) for k in base}
    added = {k for k in cut if _mask(k, masked) not in known}
    if removal == "inbox.*":
        added = {k for k in added if cut[k] != "server"}
    allowed = {d for d, f in ABSENCE_RULES if f == removal}
    assert {f[0] for f in added} <= allowed, (removal, sorted(added)[:5])
