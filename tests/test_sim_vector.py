"""The simulator's vector engine: ordinary traffic copied column-wise from sessions the
per-event engine played, faults played per event. Held to the same truth as the other."""

from __future__ import annotations

import json

import pytest

from replaygate.queries import gates as gm
from replaygate.sim import simulate
from replaygate.sim.faults import CATALOGUE

from .conftest import FLEET_CONFIG, build, digests, findings_of, match_truth
from .test_detectors_truth import _assert_exact
from .test_gates import _check


@pytest.mark.parametrize("fmt", ["mixed", "jsonl", "csv", "parquet"])
def test_same_seed_same_bytes(tmp_path, fmt):
    simulate(tmp_path / "a", seed=3, sessions=300, fmt=fmt, engine="vector")
    simulate(tmp_path / "b", seed=3, sessions=300, fmt=fmt, engine="vector")
    assert digests(tmp_path / "a") == digests(tmp_path / "b")


def test_other_seed_other_bytes(tmp_path):
    simulate(tmp_path / "a", seed=3, sessions=300, engine="vector", faults="none")
    simulate(tmp_path / "b", seed=4, sessions=300, engine="vector", faults="none")
    a, b = digests(tmp_path / "a"), digests(tmp_path / "b")
    assert all(a[k] != b[k] for k in a if k != "rollout.csv")


def test_auto_picks_the_engine_by_size(tmp_path, monkeypatch):
    import replaygate.sim as sim

    assert simulate(tmp_path / "a", sessions=100, faults="none")["engine"] == "python"
    monkeypatch.setattr(sim, "VECTOR_FROM_SESSIONS", 100)
    assert simulate(tmp_path / "b", sessions=100, faults="none")["engine"] == "vector"


def test_unknown_engine_is_an_error(tmp_path):
    from replaygate.core.errors import ReplaygateError

    with pytest.raises(ReplaygateError, match="unknown engine"):
        simulate(tmp_path / "t", engine="gpu")


def test_normal_traffic_yields_no_findings(tmp_path):
    con, truth, _ = build(tmp_path, seed=21, sessions=2500, faults="none", engine="vector")
    assert truth["faults"] == []
    assert findings_of(con) == []


def test_copies_share_no_identifier(tmp_path):
    """Copies of one template get their own ids: sessions, dispatches, payloads, keys,
    subjects, digests and event ids are never shared between two sessions."""
    con, _, _ = build(tmp_path, seed=5, sessions=3000, faults="none", engine="vector")

    def shared(col: str, table: str, by: str = "session_hmac", where: str = "true") -> int:
        sql = (
            f"SELECT count(*) FROM (SELECT {col} FROM {table} WHERE {col} IS NOT NULL "
            f"AND {where} GROUP BY 1 HAVING count(DISTINCT {by}) > 1)"
        )
        return con.execute(sql).fetchone()[0]

    sessions = con.execute(
        "SELECT count(*) FROM sessions WHERE state = 'SESSION_ACTIVE'"
    ).fetchone()[0]
    assert sessions > 2500
    assert shared("session_hmac", "sessions", "generation || handshake_receipt") == 0
    assert shared("dispatch_id", "dispatches", "ts") == 0
    for col in ("payload_digest", "idempotency_key"):
        assert shared(col, "dispatches", "coalesce(session_hmac, principal)") == 0
    assert shared("auth_subject", "sessions", where="auth_subject LIKE 'sub-user-%'") == 0
    assert shared("message_digest", "events") == shared("message_digest", "inbox") == 0
    # uuid- and time-shaped event ids are unique across sessions (`<stream>:<seq>` are not)
    assert shared("event_id", "events", where="event_id NOT LIKE '%:%'") == 0


def _samples(monkeypatch):
    """The gate samples the truth's decisions were computed from (truth.py)."""
    import replaygate.sim as sim

    seen = {}
    orig = sim.expected_decisions

    def spy(fleet, expectations, config):
        delivered = fleet.delivered_by_stage()
        for st in fleet.stages:
            s = fleet.stats[st.name]
            seen[st.name] = {
                "cross_stream_acceptances": delivered.get(st.name, 0),
                "silent_truncations": s.completed,
                "write_idempotency": s.write_dispatches,
                "recovery_p99": len(s.recoveries),
            }
        return orig(fleet, expectations, config)

    monkeypatch.setattr(sim, "expected_decisions", spy)
    return seen


@pytest.mark.parametrize("server_only", [False, True])
def test_truth_counts_what_the_gates_count(tmp_path, monkeypatch, server_only):
    """The counters the vector engine sums column-wise are the samples the SQL gates see."""
    seen = _samples(monkeypatch)
    con, truth, _ = build(
        tmp_path, seed=8, sessions=2500, faults="none", engine="vector", server_only=server_only
    )
    doc = gm.evaluate(con, FLEET_CONFIG, all_stages=True)
    for stage in doc["stages"]:
        got = {g["id"]: g["sample"] for g in stage["gates"] if g["id"] in seen[stage["stage"]]}
        want = {k: v for k, v in seen[stage["stage"]].items() if k in got}
        assert got == want, stage["stage"]
    assert sum(v["cross_stream_acceptances"] for v in seen.values()) > 1000
    _check(con, truth, FLEET_CONFIG)


@pytest.mark.parametrize(
    ("seed", "sessions", "fmt", "server_only"),
    [(7, 1500, "mixed", False), (3, 1200, "parquet", False), (4, 1200, "jsonl", True)],
)
def test_fleets_are_exact(tmp_path, seed, sessions, fmt, server_only):
    con, truth, _ = build(
        tmp_path, seed=seed, sessions=sessions, fmt=fmt, engine="vector", server_only=server_only
    )
    assert {f["fault"] for f in truth["faults"]} == set(CATALOGUE)
    _assert_exact(con, truth)
    _check(con, truth, FLEET_CONFIG)


@pytest.mark.slow
def test_a_200k_event_fleet_is_exact(tmp_path):
    """About 200,000 events, the catalogue four times over, in mixed formats."""
    con, truth, out = build(tmp_path, seed=14, sessions=9_500, engine="vector")
    assert 150_000 < truth["events"] < 250_000
    assert len({f["id"] for f in truth["faults"]}) == 4 * len(CATALOGUE) - 3
    _assert_exact(con, truth)
    _check(con, truth, FLEET_CONFIG)
    pairs, missed, extra = match_truth(findings_of(con), truth)
    assert not missed and not extra and pairs
    assert json.loads((out / "truth.json").read_text())["events"] == truth["events"]
