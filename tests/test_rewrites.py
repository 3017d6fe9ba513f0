"""Detectors rewritten for scale give the findings of the queries they replaced.

The replaced queries are kept verbatim in tests/fixtures/sql_v0. Both run on a simulated
fleet and on the same fleet reshaped into large client groups: its principals and client
addresses collapsed into three, and a share of its dispatches and proxy requests made
sessionless, so that the groups a detector pairs rows within (per principal, per request
id) hold many sessions, as at 100M events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from replaygate.ingest.config import Config
from replaygate.queries import catalog, params, runner

from .conftest import build

OLD = Path(__file__).parent / "fixtures" / "sql_v0"
REWRITTEN = (
    "resume_without_cursor",
    "replay_buffer_exhausted",
    "duplicate_dispatch",
    "reinit_missing",
)

# Large client groups: few principals and addresses, many sessionless rows.
_COLLAPSE = [
    "UPDATE dispatches SET principal = 'user-' || (hash(principal) % 3)::VARCHAR "
    "WHERE principal IS NOT NULL",
    "UPDATE dispatches SET principal = 'user-' || (hash(dispatch_id) % 3)::VARCHAR, "
    "session_hmac = NULL WHERE hash(dispatch_id) % 3 = 0",
    "UPDATE proxy SET principal = 'user-' || (hash(coalesce(principal, client_addr)) % 3)"
    "::VARCHAR, client_addr = '10.0.0.' || (hash(client_addr) % 3)::VARCHAR",
    "UPDATE proxy SET session_hmac = NULL WHERE hash(ts) % 3 = 0",
    # proxies log a failure after the write began as well as before it
    "UPDATE dispatches SET ts = ts - INTERVAL 300 SECOND WHERE hash(dispatch_id) % 2 = 0",
    "UPDATE sessions SET principal = 'user-' || (hash(principal) % 3)::VARCHAR "
    "WHERE principal IS NOT NULL",
]


@pytest.fixture(scope="module", params=["as simulated", "large client groups"])
def fleet_db(request, tmp_path_factory):
    con, _, _ = build(tmp_path_factory.mktemp("rewrites"), seed=11, sessions=300, fmt="jsonl")
    if request.param == "large client groups":
        for stmt in _COLLAPSE:
            con.execute(stmt)
        runner.analyse(con, Config(), force=True)
    return con, request.param


def _rows(con, sql: str, bound: dict[str, Any]) -> list[tuple]:
    cur = con.execute(sql, bound)
    cols = [d[0] for d in cur.description]
    out = []
    for r in cur.fetchall():
        row = dict(zip(cols, r, strict=True))
        detail = json.loads(row.pop("detail") or "{}")
        if detail.get("basis") == "inbox":
            # the replaced query listed these in no particular order
            detail["dispatches"] = sorted(detail["dispatches"])
        out.append((repr(sorted(row.items())), json.dumps(detail, sort_keys=True)))
    return sorted(out)


@pytest.mark.parametrize("name", REWRITTEN)
def test_detector_rewrite_gives_the_replaced_findings(fleet_db, name):
    fleet_db, _ = fleet_db
    q = catalog.detectors()[name]
    old = catalog.parse(OLD / f"{name}.sql", "detectors")
    bound = params.bind(q, params.from_config(Config()))
    new_rows = _rows(fleet_db, q.sql, bound)
    old_rows = _rows(fleet_db, old.sql, bound)
    assert new_rows == old_rows
    assert new_rows, f"{name}: no findings to compare on this fleet"


def test_the_sessionless_proxy_branch_is_exercised(fleet_db):
    """On the large-group fleet, sessionless writes broke by a proxy failure of the same
    principal and request id reach findings (the branch the rewrite replaced)."""
    con, kind = fleet_db
    if kind != "large client groups":
        pytest.skip("the simulated fleet's writes all have sessions")
    n = con.execute(
        """SELECT count(*) FROM findings f JOIN dispatches d USING (dispatch_id)
           WHERE f.detector = 'duplicate_dispatch' AND d.session_hmac IS NULL
             AND json_extract_string(f.detail, '$.broke') LIKE '%proxy_status%'"""
    ).fetchone()[0]
    assert n > 0
