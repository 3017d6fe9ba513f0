"""The readings real implementations asked for (detectors.md, "Added 2026-12-01"): refused
is any 4xx, a preflight is not MCP, no placeholder allow-list, dead-session statuses,
initializes, reconnects, client identity for re-init, redacted logs, undelivered results."""

from __future__ import annotations

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config, from_mapping
from replaygate.queries import gates as gm

from .test_detectors_focused import T, evaluated_stage, findings, px, stage_start

CONFIGURED = from_mapping({"origin_allowlist": ["https://app.example.com", "http://localhost:*"]})
EVIL = "https://evil.example"
START = stage_start()


# -- Origin ---------------------------------------------------------------------------------
def test_refused_is_any_4xx_and_a_preflight_is_not_an_mcp_request(tmp_path):
    rows = [
        px(0, status=421, origin=EVIL),  # the Python SDK checks Host first
        px(10, status=404, origin=EVIL, session_hmac="c" * 64),  # TS routing: unknown session
        px(20, status=400, origin=EVIL),  # TS routing: no session
        px(30, "OPTIONS", 204, origin=EVIL),  # Express answers the CORS preflight
        px(40, status=403, origin=EVIL),
        px(50, status=502, origin=EVIL),  # the proxy's: cannot tell
    ]
    got = findings(tmp_path / "a", CONFIGURED, proxy=rows)
    assert "invalid_origin_accepted" not in got
    assert sorted(f["detail"]["status"] for f in got["origin_refused_not_403"]) == [400, 404, 421]
    assert all(f["severity"] == "low" for f in got["origin_refused_not_403"])
    stage = evaluated_stage(tmp_path / "b", CONFIGURED, proxy=rows)
    gate = stage["by_id"]["invalid_origin_rejection"]
    assert (gate["status"], gate["sample"], gate["failures"]) == ("pass", 4, 0)
    assert stage["decision"] != "ROLLBACK"
    # A served bad Origin still fails, 3xx included.
    served = findings(tmp_path / "c", CONFIGURED, proxy=[px(0, status=302, origin=EVIL)])
    assert len(served["invalid_origin_accepted"]) == 1
    failed = evaluated_stage(
        tmp_path / "d", CONFIGURED, proxy=[*rows, px(60, status=200, origin=EVIL)]
    )
    assert failed["by_id"]["invalid_origin_rejection"]["status"] == "fail"
    assert failed["by_id"]["invalid_origin_rejection"]["failures"] == 1


def test_allowed_origin_refused(tmp_path):
    rows = [
        px(0, status=421, origin="https://app.example.com"),
        px(10, status=403),  # no Origin: a native client
        px(20, status=404, origin="http://localhost:6274"),  # a dead session, not a lock-out
        px(30, "OPTIONS", 403, origin="https://app.example.com"),
        px(40, status=403, origin=EVIL),
        # A foreign Host without an Origin (a DNS-rebinding probe): the Host is not logged.
        px(50, status=421),
    ]
    got = findings(tmp_path / "a", CONFIGURED, proxy=rows)
    assert sorted(f["detail"]["status"] for f in got["allowed_origin_refused"]) == [403, 421]
    assert all(f["severity"] == "high" for f in got["allowed_origin_refused"])
    stage = evaluated_stage(tmp_path / "b", CONFIGURED, proxy=rows)
    gate = stage["by_id"]["allowed_origin_refusals"]
    assert (gate["status"], gate["value"]) == ("fail", 2)
    assert stage["decision"] == "ROLLBACK"
    fine = evaluated_stage(tmp_path / "c", CONFIGURED, proxy=rows[2:])
    assert fine["by_id"]["allowed_origin_refusals"]["status"] == "pass"


def test_no_allow_list_configured_allows_loopback_only_and_judges_nothing_foreign(tmp_path):
    assert Config().origin_allowlist is None
    loopback = [
        px(0, origin="http://localhost:6274"),
        px(10, origin="http://127.0.0.1:8080"),
        px(20, origin="https://[::1]"),
        px(30, origin="http://localhost"),
    ]
    foreign = [px(40, origin="https://claude.ai"), px(50, origin=EVIL)]
    got = findings(tmp_path / "a", proxy=loopback + foreign)
    # Foreign origins with no allow-list: nothing critical, nothing at all about Origin.
    assert not {"invalid_origin_accepted", "origin_refused_not_403"} & set(got)
    stage = evaluated_stage(tmp_path / "b", Config(), proxy=loopback + foreign)
    gate = stage["by_id"]["invalid_origin_rejection"]
    assert gate["status"] == "insufficient"
    assert (
        gate["reason"] == "Invalid Origins refused: no evidence: origin allow-list not configured"
    )
    assert stage["decision"] == "HOLD"
    # Loopback alone: judged (nothing invalid), not insufficient.
    only_loopback = evaluated_stage(tmp_path / "c", Config(), proxy=loopback)
    assert only_loopback["by_id"]["invalid_origin_rejection"]["status"] == "pass"
    # A loopback origin refused with 403 locks out a real (local) client.
    refused = findings(tmp_path / "d", proxy=[px(0, status=403, origin="http://127.0.0.1:3000")])
    assert len(refused["allowed_origin_refused"]) == 1


def test_ingest_and_gates_say_the_allow_list_is_not_configured(tmp_path):
    from .conftest import run_cli

    (tmp_path / "logs").mkdir()
    findings(tmp_path / "logs", rollout=[START], proxy=[px(0, origin="https://claude.ai")])
    db = tmp_path / "x.duckdb"
    r = run_cli("ingest", tmp_path / "logs", "--db", db, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    note = "origin allow-list not configured"
    assert (r.stdout + r.stderr).count(note) == 1
    r = run_cli("gates", "--db", db, cwd=tmp_path)
    assert (r.stdout + r.stderr).count(note) >= 1
    assert r.returncode == 2  # HOLD, never ROLLBACK


def test_a_fleet_without_an_allow_list_never_rolls_back_on_origins(tmp_path):
    from .conftest import build, findings_of
    from .test_gates import _check

    faults = "proxy_modified_origin,origin_refused_not_403"
    con, truth, _ = build(tmp_path, seed=12, sessions=120, faults=faults, config=Config())
    _check(con, truth, Config())
    assert findings_of(con) == []
    stages = gm.evaluate(con, Config(), all_stages=True)["stages"]
    statuses = {
        g["status"] for s in stages for g in s["gates"] if g["id"] == "invalid_origin_rejection"
    }
    assert statuses == {"insufficient"}
    assert {s["decision"] for s in stages} == {"HOLD"}


# -- dead sessions ----------------------------------------------------------------------
def test_dead_session_statuses_configure_what_a_dead_session_answers(tmp_path):
    # The TypeScript SDK's examples up to 1.24 answer an unknown session with 400.
    gone = px(
        1000,
        status=400,
        session_hmac="a" * 64,
        principal="p1",
        protocol_version="2025-11-25",
        jsonrpc_method="tools/call",
    )
    assert "reinit_missing" not in findings(tmp_path / "a", proxy=[gone])
    ts_shop = from_mapping({"dead_session_statuses": [400, 404]})
    got = findings(tmp_path / "b", ts_shop, proxy=[gone])
    assert len(got["reinit_missing"]) == 1
    stage = evaluated_stage(tmp_path / "c", ts_shop, proxy=[gone])
    gate = stage["by_id"]["reinit_after_404"]
    assert (gate["status"], gate["sample"], gate["failures"]) == ("fail", 1, 1)
    init = px(3000, principal="p1", jsonrpc_method="initialize")
    ok = evaluated_stage(tmp_path / "d", ts_shop, proxy=[gone, init])["by_id"]["reinit_after_404"]
    assert (ok["status"], ok["sample"], ok["failures"]) == ("pass", 1, 0)


# -- reconnects ---------------------------------------------------------------------------
def test_cursorless_get_reopens_on_a_session_are_reconnects(tmp_path):
    s = "d" * 64
    opened = px(0, "GET", session_hmac=s, protocol_version="2025-06-18")
    # 80 re-opens of the standalone GET stream within 0.2 s, no Last-Event-ID.
    storm = [dict(opened, ts=T + 1000 + i * 2) for i in range(80)]
    # (a log that can show Last-Event-ID: one resume elsewhere, long before)
    resumed = px(-60_000, "GET", session_hmac="e" * 64, last_event_id="1:1")
    got = findings(tmp_path / "a", proxy=[resumed, opened, *storm])
    assert len(got["reconnect_storm"]) == 1
    assert got["reconnect_storm"][0]["detail"]["reconnects"] == 80  # the first GET opens
    stage = evaluated_stage(tmp_path / "b", Config(), proxy=[resumed, opened, *storm])
    assert stage["by_id"]["reconnect_qps"]["status"] == "fail"
    # First GETs of 80 sessions are opens, not reconnects.
    opens = [px(i * 2, "GET", session_hmac=f"{i:064x}") for i in range(80)]
    assert "reconnect_storm" not in findings(tmp_path / "c", proxy=[resumed, *opens])


# -- client identity for re-init ------------------------------------------------------------
NODE = {"client_addr": "10.0.0.9", "user_agent": "node", "protocol_version": "2025-11-25"}


def _node_session(h: str, t0: int, t1: int) -> list[dict]:
    """A session of a client the proxy knows only by address and `User-Agent: node`, with
    requests at t0 and t1."""
    return [
        px(t0, session_hmac=h, jsonrpc_method="notifications/initialized", **NODE),
        px(t1, session_hmac=h, jsonrpc_method="tools/call", **NODE),
    ]


def _reinit_cannot_tell(stage: dict) -> list[tuple]:
    return [
        (e["missing"], e["units"])
        for e in stage["cannot_tell"]
        if e["detector"] == "reinit_missing"
    ]


def test_a_404_is_tied_to_a_client_by_address_and_agent_only_when_it_had_one_live_session(
    tmp_path,
):
    a, b = "a" * 64, "b" * 64
    gone = px(5000, status=404, session_hmac=a, jsonrpc_method="tools/call", **NODE)
    init = px(6000, jsonrpc_method="initialize", **NODE)
    # Alone at its address and agent: the client never initialized again.
    alone = findings(tmp_path / "alone", proxy=[*_node_session(a, 0, 1000), gone])
    assert [f["detail"]["reason"] for f in alone["reinit_missing"]] == ["not re-initialized"]
    # Another session of the same address and agent is live across the 404: the initialize
    # after it may be that client's, so the 404 is neither a finding nor a pass.
    shared = [*_node_session(a, 0, 1000), *_node_session(b, 500, 8000), gone, init]
    assert "reinit_missing" not in findings(tmp_path / "shared", proxy=shared)
    stage = evaluated_stage(tmp_path / "shared-stage", Config(), proxy=shared)
    g = stage["by_id"]["reinit_after_404"]
    assert (g["status"], g["sample"], g["cannot_tell"]) == ("insufficient", 0, 1), g
    assert _reinit_cannot_tell(stage) == [("client identity", 1)]
    # Nor does a live session of that pair pass for the 404's client when no one
    # initialized: still cannot tell, not a finding.
    assert "reinit_missing" not in findings(tmp_path / "shared-none", proxy=shared[:-1])
    # A session is live while its standalone GET stream is open, though the proxy dates
    # the stream's row by its start, before the 404.
    stream = [
        px(300, session_hmac=b, **NODE),
        px(400, "GET", session_hmac=b, duration_ms=9000, **NODE),
    ]
    stage = evaluated_stage(
        tmp_path / "stream", Config(), proxy=[*_node_session(a, 0, 1000), *stream, gone, init]
    )
    assert _reinit_cannot_tell(stage) == [("client identity", 1)]
    # Sessions of the pair that ended before the 404, or began after it, are not live.
    before_after = [*_node_session(b, 0, 200), *_node_session(a, 300, 1000), gone, init]
    before_after += _node_session("c" * 64, 7000, 7500)
    stage = evaluated_stage(tmp_path / "one-live", Config(), proxy=before_after)
    g = stage["by_id"]["reinit_after_404"]
    assert (g["status"], g["sample"], g["cannot_tell"]) == ("pass", 1, 0), g


def test_a_session_that_ended_in_the_millisecond_the_404_began_is_not_live(tmp_path):
    """A log dates by the millisecond, and nginx by its cached clock: a client's next
    request can begin in the same millisecond its previous answer was logged. The session
    that ended then is over, not live across the 404; the dead session itself, whose 404
    lasts no time in the log, still counts as the client's one session."""
    a, b = "a" * 64, "b" * 64
    init_b = px(1000, session_hmac=b, jsonrpc_method="initialize", duration_ms=4000, **NODE)
    gone = px(5000, status=404, session_hmac=a, jsonrpc_method="tools/call", **NODE)
    init = px(6000, jsonrpc_method="initialize", **NODE)
    stage = evaluated_stage(tmp_path / "tie", Config(), proxy=[init_b, gone, init])
    g = stage["by_id"]["reinit_after_404"]
    assert (g["status"], g["sample"], g["cannot_tell"]) == ("pass", 1, 0), g
    # One millisecond more and b is live across the 404: cannot tell.
    longer = dict(init_b, duration_ms=4001)
    stage = evaluated_stage(tmp_path / "live", Config(), proxy=[longer, gone, init])
    assert _reinit_cannot_tell(stage) == [("client identity", 1)]


def test_a_principal_tells_clients_apart_whatever_their_address_and_agent(tmp_path):
    a, b = "a" * 64, "b" * 64
    mine, theirs = {**NODE, "principal": "alice"}, {**NODE, "principal": "bob"}
    rows = [
        px(0, session_hmac=a, **mine),
        px(500, session_hmac=b, **theirs),
        px(5000, status=404, session_hmac=a, jsonrpc_method="tools/call", **mine),
        px(8000, session_hmac=b, **theirs),
        px(6000, jsonrpc_method="initialize", **theirs),  # bob's, not alice's
    ]
    got = findings(tmp_path, proxy=rows)
    assert [f["session_hmac"] for f in got["reinit_missing"]] == [a]


CALL = {"jsonrpc_method": "tools/call"}


def test_the_reinit_gate_counts_not_reinitialized_and_used_after_the_404_apart(tmp_path):
    a, b = "a" * 64, "b" * 64
    rows = [
        # alice's client never initializes again
        px(0, session_hmac=a, principal="alice"),
        px(1000, status=404, session_hmac=a, principal="alice", jsonrpc_method="tools/call"),
        # bob's client initializes again, but first sends once more on the dead session
        px(0, session_hmac=b, principal="bob"),
        px(1000, status=404, session_hmac=b, principal="bob", jsonrpc_method="tools/call"),
        px(1500, status=404, session_hmac=b, principal="bob", jsonrpc_method="tools/call"),
        px(2000, principal="bob", jsonrpc_method="initialize"),
    ]
    got = findings(tmp_path / "f", proxy=rows)
    reasons = sorted(f["detail"]["reason"] for f in got["reinit_missing"])
    assert reasons == ["not re-initialized", "used after the 404"]
    g = evaluated_stage(tmp_path / "s", Config(), proxy=rows)["by_id"]["reinit_after_404"]
    assert (g["status"], g["sample"], g["failures"]) == ("fail", 3, 2)
    causes = "(1 not re-initialized; 1 used after the 404)"
    assert g["causes"] == [
        {"cause": "not re-initialized", "n": 1},
        {"cause": "used after the 404", "n": 1},
    ]
    assert g["reason"].endswith(f"(threshold 100 % handled) {causes}")
    # The set-based evaluation of every stage judges once per distinct reading: the
    # breakdown is part of it. Stage `t` reads the same (2 of 3), every failure not
    # re-initialized.
    c, d, f = "c" * 64, "d" * 64, "e" * 64
    later = T + 600_000
    more = [
        px(later - T, session_hmac=c, principal="carol"),
        px(later - T + 1000, status=404, session_hmac=c, principal="carol", **CALL),
        px(later - T, session_hmac=d, principal="dave"),
        px(later - T + 1000, status=404, session_hmac=d, principal="dave", **CALL),
        px(later - T, session_hmac=f, principal="frank"),
        px(later - T + 1000, status=404, session_hmac=f, principal="frank", **CALL),
        px(later - T + 1500, principal="frank", jsonrpc_method="initialize"),
    ]
    two = [START, stage_start(stage="t", at=later - 60_000)]
    findings(tmp_path / "a", Config(), rollout=two, proxy=[*rows, *more])
    con = dbm.connect(str(tmp_path / "a" / "t.duckdb"), read_only=True)
    try:
        every = gm.evaluate(con, Config(), all_stages=True)["stages"]
        one = [gm.evaluate(con, Config(), stage=s)["stages"][0] for s in ("s", "t")]
    finally:
        con.close()
    got = [next(g for g in st["gates"] if g["id"] == "reinit_after_404") for st in (*every, *one)]
    assert [(g["failures"], g["sample"]) for g in got] == [(2, 3)] * 4
    assert [g["reason"] for g in got[2:]] == [g["reason"] for g in got[:2]]
    assert got[0]["reason"].endswith(causes)
    assert got[1]["reason"].endswith("(2 not re-initialized)")
    assert got[0]["reason"] in every[0]["reasons"]


@pytest.mark.parametrize("seed", [12, 13])  # the session's Origin: loopback (12), foreign (13)
def test_a_fleet_without_an_allow_list_expects_refusals_of_allowed_origins_only(tmp_path, seed):
    # allowed_origin_refused's 421 carries its session's Origin; with no allow-list
    # configured only loopback is allowed, so a foreign one refused is no finding.
    from .conftest import build, findings_of, match_truth

    faults = "allowed_origin_refused"
    con, truth, _ = build(tmp_path, seed=seed, sessions=120, faults=faults, config=Config())
    pairs, missed, extra = match_truth(findings_of(con), truth)
    assert (missed, extra) == ([], [])
    assert 403 in {f["detail"]["status"] for _, f in pairs}
