"""Which gates count `replaygate probe`'s units (`probe_gates`): by default only the
replay-integrity gates, the evidence it exists to produce; its staged requests (a dead
session reused, foreign origins, stale cursors) neither pass nor fail a real-traffic gate
on the users' behalf. Built on the probe's requests as real Caddy logged them
(tests/fixtures/proxy/captured/caddy-probe.log: discovery, initialize, DELETE, the dead
session's 404, re-initialize) and a completed stream of a probe session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import from_mapping
from replaygate.core.errors import ReplaygateError
from replaygate.ingest.load import ingest
from replaygate.queries import gates, runner

CAPTURED = Path(__file__).parent / "fixtures" / "proxy" / "captured"
STAGE = "probe-canary"


def _lines(edit=None) -> str:
    out = []
    for line in (CAPTURED / "caddy-probe.log").read_text().splitlines():
        j = json.loads(line)
        out.append(json.dumps(edit(j) if edit else j))
    return "\n".join(out) + "\n"


def _real_client(j: dict) -> dict:
    """The same exchange by a client that is not the probe (another session id, another
    User-Agent, no marker)."""
    h = j["request"]["headers"]
    h.pop("Replaygate-Probe", None)
    h["User-Agent"] = ["node"]
    for headers in (h, j["resp_headers"]):
        if "Mcp-Session-Id" in headers:
            headers["Mcp-Session-Id"] = [s[::-1] for s in headers["Mcp-Session-Id"]]
    j["ts"] += 30
    return j


def _fleet(d: Path, real: bool) -> Path:
    logs = d / "logs"
    logs.mkdir(parents=True)
    first = json.loads((CAPTURED / "caddy-probe.log").read_text().splitlines()[0])
    t0 = int(first["ts"] * 1000) - 60_000
    (logs / "rollout.jsonl").write_text(
        json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "read"}) + "\n"
    )
    (logs / "caddy-access.log").write_text(_lines() + (_lines(_real_client) if real else ""))
    # A probe session's completed stream (the probe's own ledger): replay evidence.
    s = "ab" * 32
    (logs / "probe-ledger.jsonl").write_text(
        json.dumps(
            {
                "schema": "mcpHttpSession.v1",
                "ts": t0 + 1000,
                "session_hmac": s,
                "generation": 1,
                "state": "SESSION_ACTIVE",
                "principal": "replaygate-probe",
                "client_name": "replaygate-probe",
                "rollout_stage": STAGE,
            }
        )
        + "\n"
        + json.dumps(
            {
                "schema": "mcpSseStream.v1",
                "ts": t0 + 2000,
                "session_hmac": s,
                "generation": 1,
                "stream_id": "rgp-1",
                "state": "CLOSED",
                "close_reason": "completed",
            }
        )
        + "\n"
    )
    return logs


def _gates(d: Path, logs: Path, probe_gates: str | None) -> dict[str, dict]:
    config = from_mapping({} if probe_gates is None else {"probe_gates": probe_gates})
    con = dbm.connect(str(d / f"{probe_gates}.duckdb"))
    report = ingest(con, [logs], config)
    assert report.quarantined == 0, report.quarantine_reasons
    runner.analyse(con, config)
    (stage,) = gates.evaluate(con, config, STAGE)["stages"]
    con.close()
    return {g["id"]: g for g in stage["gates"]}


@pytest.fixture(scope="module")
def probe_only(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe-gates")
    logs = _fleet(d, real=False)
    return {p: _gates(d, logs, p) for p in (None, "all", "none")}


def test_by_default_the_probes_requests_are_no_real_traffic_gates_sample(probe_only):
    g = probe_only[None]
    # Its dead-session 404 and every request it sent: not the users' sample.
    assert g["reinit_after_404"]["sample"] == 0
    assert g["raw_session_ids"]["sample"] == 0
    assert g["allowed_origin_refusals"]["sample"] == 0
    # Its completed stream is replay evidence: counted.
    assert g["silent_truncations"]["sample"] == 1


def test_all_counts_the_probe_in_every_gate_and_none_in_no_gate(probe_only):
    every = probe_only["all"]
    assert every["reinit_after_404"]["sample"] == 1
    assert every["reinit_after_404"]["status"] == "pass"  # it re-initialized
    assert every["raw_session_ids"]["sample"] == 11
    assert every["silent_truncations"]["sample"] == 1
    nothing = probe_only["none"]
    assert nothing["silent_truncations"]["sample"] == 0
    assert nothing["reinit_after_404"]["sample"] == 0


def test_a_real_clients_same_requests_count_beside_the_probes(tmp_path):
    logs = _fleet(tmp_path, real=True)
    g = _gates(tmp_path, logs, None)
    assert g["reinit_after_404"]["sample"] == 1
    assert g["raw_session_ids"]["sample"] == 11
    assert g["silent_truncations"]["sample"] == 1


def test_a_real_clients_failure_is_not_hidden_by_the_probes(tmp_path):
    """The real client does not re-initialize after its 404 (its re-initialize lines are
    cut): the gate fails on it alone, and the probe's own re-initialize does not pass it."""
    logs = _fleet(tmp_path, real=True)
    log = logs / "caddy-access.log"
    lines = log.read_text().splitlines()
    real = [json.loads(x) for x in lines[11:]]
    cut = next(i for i, j in enumerate(real) if j["status"] == 404) + 1
    log.write_text("\n".join(lines[:11] + [json.dumps(j) for j in real[:cut]]) + "\n")
    g = _gates(tmp_path, logs, None)
    assert g["reinit_after_404"]["sample"] == 1
    assert g["reinit_after_404"]["status"] == "fail"


def test_probe_gates_takes_only_its_values():
    with pytest.raises(ReplaygateError, match="probe_gates must be one of replay, all, none"):
        from_mapping({"probe_gates": "some"})
    # The default leaves a configuration's digest as it was.
    assert from_mapping({"probe_gates": "replay"}).digest() == from_mapping({}).digest()
    assert from_mapping({"probe_gates": "all"}).digest() != from_mapping({}).digest()
