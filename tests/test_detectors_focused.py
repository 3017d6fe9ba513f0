"""Each detector on a hand-built minimal case that must fire, and a near miss that must not."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replaygate.core import db as dbm
from replaygate.core.config import Config, from_mapping
from replaygate.ingest.load import ingest
from replaygate.queries import gates as gm
from replaygate.queries import runner

T = 1_795_824_000_000  # 2026-11-28T00:00:00Z
S = "a" * 64
S2 = "b" * 64


def ses(t, state, h=S, **kw):
    return {"ts": T + t, "session_hmac": h, "generation": 1, "state": state, **kw}


def active(h=S, t=0, **kw):
    base = {
        "principal": "p1",
        "auth_subject": "sub1",
        "protocol_version": "2025-11-25",
        "resumable": True,
    }
    return ses(t, "SESSION_ACTIVE", h, **{**base, **kw})


def stm(t, sid, state, h=S, **kw):
    return {"ts": T + t, "session_hmac": h, "generation": 1, "stream_id": sid, "state": state, **kw}


def ev(t, sid, seq, kind="progress", disp="sent", h=S, eid=None, **kw):
    return {
        "ts": T + t,
        "session_hmac": h,
        "generation": 1,
        "stream_id": sid,
        "event_id": eid or f"{sid}:{seq}",
        "seq": seq,
        "kind": kind,
        "disposition": disp,
        **kw,
    }


def rc(t, sid, eid, verdict="accepted", h=S, **kw):
    return {
        "ts": T + t,
        "session_hmac": h,
        "generation": 1,
        "stream_id": sid,
        "event_id": eid,
        "verdict": verdict,
        **kw,
    }


def dp(t, did, outcome="executed", tool="create_ticket", cls="write", **kw):
    return {
        "ts": T + t,
        "dispatch_id": did,
        "outcome": outcome,
        "tool_name": tool,
        "tool_class": cls,
        **kw,
    }


def px(t, method="POST", status=200, **kw):
    return {"ts": T + t, "method": method, "status": status, **kw}


def findings(tmp_path, config: Config | None = None, **tables) -> dict[str, list[dict]]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    report = ingest(con, [tmp_path], config or Config())
    assert report.quarantined == 0, report.quarantine_reasons
    runner.analyse(con, config or Config())
    out: dict[str, list[dict]] = {}
    cur = con.execute("SELECT * FROM findings")
    cols = [d[0] for d in cur.description]
    for row in cur.fetchall():
        f = dict(zip(cols, row, strict=True))
        f["detail"] = json.loads(f["detail"])
        out.setdefault(f["detector"], []).append(f)
    con.close()
    return out


def stage_start(scope: str = "read", stage: str = "s", at: int = T - 60_000) -> dict:
    """A rollout row starting a stage a minute before the cases' time."""
    return {"ts": at, "stage": stage, "action": "start", "scope": scope}


def evaluated_stage(tmp_path, config: Config | None = None, scope: str = "read", **tables) -> dict:
    """The evaluation of the one stage (`scope`) of a rollout started before these tables'
    rows, after ingesting them; its gates also by id under `by_id`."""
    config = config or Config()
    findings(tmp_path, config, rollout=[stage_start(scope)], **tables)
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    try:
        stage = gm.evaluate(con, config)["stages"][0]
    finally:
        con.close()
    return {**stage, "by_id": {g["id"]: g for g in stage["gates"]}}


def completed_stream(sid="1", t0=0, close_reason="completed"):
    return [
        stm(t0, sid, "STREAM_OPEN", method="POST"),
        stm(t0 + 900, sid, "CLOSED", close_reason=close_reason),
    ]


# -- replay gaps ------------------------------------------------------------------------
def _stream_events(kinds, drops=()):
    return [ev(10 * i, "1", i, k, "dropped" if i in drops else "sent") for i, k in enumerate(kinds)]


KINDS = ["priming", "progress", "message", "progress", "result"]


def _received_all_but(tmp_path, missing: int) -> dict:
    """Findings on a completed stream of KINDS whose client received all but one event."""
    received = [i for i in range(len(KINDS)) if i != missing]
    return findings(
        tmp_path,
        sessions=[active()],
        streams=completed_stream(),
        events=_stream_events(KINDS),
        inbox=[rc(10 * i + 5, "1", f"1:{i}") for i in received],
    )


def test_replay_gap_high_and_silent_truncation(tmp_path):
    got = _received_all_but(tmp_path, 2)
    gap = got["replay_gap"]
    assert len(gap) == 1 and gap[0]["severity"] == "high"
    assert gap[0]["detail"]["missing_seqs"] == [2]
    assert len(got["silent_truncation"]) == 1


def test_probe_receipts_are_judged_without_an_event_log(tmp_path):
    """replaygate probe numbers every data event of its streams (from an uncut reference
    call): a hole in its receipts is a fact on the inbox alone, basis client; a whole
    stream is no finding. Another client's receipts without the event log are not judged
    (a hole may be a heartbeat)."""

    def receipts(sid, seqs, h=S):
        kinds = dict(enumerate(KINDS))
        return [
            rc(10 * i, sid, f"{sid}-{i}", h=h, origin_stream_id=sid, seq=i, kind=kinds[i])
            for i in seqs
        ]

    inbox = receipts("cut", [0, 1, 3, 4]) + receipts("whole", range(5))
    inbox += receipts("other", [0, 1, 3, 4], h=S2)
    got = findings(
        tmp_path,
        sessions=[active(client_name="replaygate-probe"), active(h=S2, client_name="x")],
        inbox=inbox,
    )
    (gap,) = got["replay_gap"]
    assert gap["stream_id"] == "cut" and gap["detail"]["basis"] == "client"
    assert gap["detail"]["missing_seqs"] == [2] and gap["severity"] == "high"
    (trunc,) = got["silent_truncation"]
    assert trunc["stream_id"] == "cut" and trunc["detail"]["basis"] == "client"


def test_replay_gap_low_for_progress_only(tmp_path):
    got = _received_all_but(tmp_path, 1)
    assert [f["severity"] for f in got["replay_gap"]] == ["low"]
    assert "silent_truncation" not in got


def test_missing_heartbeat_or_priming_is_not_a_gap(tmp_path):
    kinds = ["priming", "progress", "heartbeat", "progress", "result"]
    got = findings(
        tmp_path,
        sessions=[active()],
        streams=completed_stream(),
        events=_stream_events(kinds, drops={2}),
        inbox=[rc(10 * i + 5, "1", f"1:{i}") for i in (1, 3, 4)],
    )
    assert got == {}


def test_tail_gap_only_on_a_completed_stream(tmp_path):
    inbox = [rc(10 * i + 5, "1", f"1:{i}") for i in (0, 1, 2)]
    done = findings(
        tmp_path / "a",
        sessions=[active()],
        streams=completed_stream(),
        events=_stream_events(KINDS),
        inbox=inbox,
    )
    assert done["replay_gap"][0]["detail"]["missing_seqs"] == [3, 4]
    assert "silent_truncation" not in done  # the result never arrived
    cut = findings(
        tmp_path / "b",
        sessions=[active(resumable=False)],
        streams=completed_stream(close_reason="client_disconnect"),
        events=_stream_events(KINDS),
        inbox=inbox,
    )
    assert "replay_gap" not in cut


def test_seq_resolved_through_the_event_log_for_opaque_ids(tmp_path):
    events = [ev(10 * i, "1", i, k, eid=f"uuid-{i}") for i, k in enumerate(KINDS)]
    got = findings(
        tmp_path,
        sessions=[active()],
        streams=completed_stream(),
        events=events,
        inbox=[rc(10 * i + 5, "1", f"uuid-{i}") for i in (0, 1, 3, 4)],
    )
    assert got["replay_gap"][0]["detail"]["missing_seqs"] == [2]


def test_dropped_terminal(tmp_path):
    got = findings(tmp_path / "a", sessions=[active()], events=_stream_events(KINDS, {4}))
    assert len(got["dropped_terminal"]) == 1
    near = findings(tmp_path / "b", sessions=[active()], events=_stream_events(KINDS, {3}))
    assert "dropped_terminal" not in near


# -- cross-stream and dedup ---------------------------------------------------------------
def test_cross_stream_acceptance_without_a_gap_on_the_carrier(tmp_path):
    events = [
        ev(0, "A", 1, "message"),
        ev(10, "A", 2, "result"),
        ev(20, "B", 1, "message"),
        ev(30, "B", 2, "result"),
    ]
    inbox = [
        rc(1, "A", "A:1"),
        rc(11, "A", "A:2"),
        rc(21, "B", "B:1"),
        rc(25, "B", "A:1"),
        rc(31, "B", "B:2"),
    ]
    got = findings(tmp_path, sessions=[active()], events=events, inbox=inbox)
    assert [(f["stream_id"], f["event_id"]) for f in got["cross_stream_acceptance"]] == [
        ("B", "A:1")
    ]
    assert "replay_gap" not in got


def test_cross_stream_rejected_is_fine(tmp_path):
    events = [ev(0, "A", 1, "message"), ev(20, "B", 1, "message")]
    inbox = [
        rc(1, "A", "A:1"),
        rc(21, "B", "B:1"),
        rc(25, "B", "A:1", "rejected", reject_reason="wrong_stream"),
    ]
    assert "cross_stream_acceptance" not in findings(
        tmp_path, sessions=[active()], events=events, inbox=inbox
    )


def test_duplicate_delivery(tmp_path):
    events = [ev(0, "1", 1, "message", message_digest="d1")]
    twice = [rc(1, "1", "1:1", message_digest="d1"), rc(9, "1", "1:1", message_digest="d1")]
    got = findings(tmp_path / "a", sessions=[active()], events=events, inbox=twice)
    assert len(got["duplicate_delivery_accepted"]) == 1
    dedup = [
        rc(1, "1", "1:1", message_digest="d1"),
        rc(9, "1", "1:1", "duplicate", message_digest="d1"),
    ]
    assert findings(tmp_path / "b", sessions=[active()], events=events, inbox=dedup) == {}


# -- cursors and recovery -------------------------------------------------------------------
def _resume(sid, cursor, after=None, gap=1500, retry=1000, acked=None, h=S):
    rows = [
        stm(0, sid, "STREAM_OPEN", h, method="POST", retry_ms=retry),
        stm(100, sid, "DISCONNECTED", h, close_reason="network"),
        stm(
            100 + gap,
            sid,
            "RESUME_PENDING",
            h,
            resume_from_event_id=cursor,
            last_acked_event_id=acked or cursor,
        ),
    ]
    if after:
        rows.append(stm(100 + gap + 50, sid, after, h, method="GET"))
    return rows


def test_cursor_misrouted(tmp_path):
    events = [ev(0, "A", 1, "message"), ev(50, "B", 1, "message")]
    inbox = [rc(1, "A", "A:1"), rc(51, "B", "B:1")]

    def resumed(name: str, cursor: str, after: str) -> dict:
        """Stream B resumed with `cursor`, then `after`."""
        streams = _resume("B", cursor, after)
        return findings(
            tmp_path / name, sessions=[active()], events=events, inbox=inbox, streams=streams
        )

    got = resumed("a", "A:1", "STREAM_OPEN")
    assert [f["stream_id"] for f in got["cursor_misrouted"]] == ["B"]
    own = resumed("b", "B:1", "STREAM_OPEN")
    assert "cursor_misrouted" not in own
    refused = resumed("c", "A:1", "CURSOR_REJECTED")
    assert "cursor_misrouted" not in refused
    assert len(refused["cursor_rejected"]) == 1


def test_replay_after_ack(tmp_path):
    base = [ev(0, "1", 1, "message"), ev(10, "1", 2, "message"), ev(20, "1", 3, "message")]
    inbox = [rc(1, "1", "1:1"), rc(11, "1", "1:2"), rc(21, "1", "1:3")]
    replayed = [ev(1700, "1", 2, "message", "replayed"), ev(1710, "1", 3, "message", "replayed")]
    got = findings(
        tmp_path / "a",
        sessions=[active()],
        events=base + replayed,
        inbox=inbox,
        streams=_resume("1", "1:1", "STREAM_OPEN", acked="1:2"),
    )
    assert len(got["replay_after_ack"]) == 1
    ok = findings(
        tmp_path / "b",
        sessions=[active()],
        events=base + replayed[1:],
        inbox=inbox,
        streams=_resume("1", "1:2", "STREAM_OPEN"),
    )
    assert "replay_after_ack" not in ok


def test_priming_lost_only_on_resumable_sessions(tmp_path):
    streams = [
        stm(0, "1", "STREAM_OPEN", method="POST"),
        stm(50, "1", "DISCONNECTED", close_reason="network"),
        stm(51, "1", "CLOSED", close_reason="client_disconnect"),
    ]
    events = [ev(5, "1", 0, "priming"), ev(5, "9", 1, "message")]
    other = [rc(6, "9", "9:1")]  # an inbox exists; this stream's part of it is empty
    got = findings(tmp_path / "a", sessions=[active()], streams=streams, events=events, inbox=other)
    assert len(got["priming_lost"]) == 1
    plain = findings(
        tmp_path / "b",
        sessions=[active(resumable=False)],
        streams=streams,
        events=events,
        inbox=other,
    )
    assert "priming_lost" not in plain
    held = findings(
        tmp_path / "c",
        sessions=[active()],
        streams=streams,
        events=events,
        inbox=[*other, rc(10, "1", "1:0")],
    )
    assert "priming_lost" not in held


def test_priming_lost_by_the_server_log_only_where_there_is_one(tmp_path):
    """Without receipts the server's log judges: a stream that produced nothing but priming
    before it broke is lost; a session the log holds nothing of is not judged."""
    streams = [
        stm(0, "1", "STREAM_OPEN", method="POST"),
        stm(50, "1", "DISCONNECTED", close_reason="network"),
        stm(51, "1", "CLOSED", close_reason="client_disconnect"),
    ]
    got = findings(
        tmp_path / "a", sessions=[active()], streams=streams, events=[ev(5, "1", 0, "priming")]
    )
    assert [f["detail"]["basis"] for f in got["priming_lost"]] == ["server"]
    other = "f" * 64  # the log holds another session's events only
    unlogged = findings(
        tmp_path / "b",
        sessions=[active(), active(h=other)],
        streams=streams,
        events=[ev(5, "1", 1, h=other)],
    )
    assert "priming_lost" not in unlogged


def test_slow_recovery_threshold(tmp_path):
    slow = findings(
        tmp_path / "a", sessions=[active()], streams=_resume("1", "1:1", "STREAM_OPEN", gap=6000)
    )
    assert len(slow["slow_recovery"]) == 1
    fast = findings(
        tmp_path / "b", sessions=[active()], streams=_resume("1", "1:1", "STREAM_OPEN", gap=4000)
    )
    assert "slow_recovery" not in fast


def test_unrecovered_stream(tmp_path):
    got = findings(tmp_path / "a", sessions=[active()], streams=_resume("1", "1:1"))
    assert len(got["unrecovered_stream"]) == 1
    ok = findings(tmp_path / "b", sessions=[active()], streams=_resume("1", "1:1", "STREAM_OPEN"))
    assert "unrecovered_stream" not in ok


def test_retry_not_honored(tmp_path):
    early = findings(
        tmp_path / "a",
        sessions=[active()],
        streams=_resume("1", "1:1", "STREAM_OPEN", gap=200, retry=1000),
    )
    assert early["retry_not_honored"][0]["detail"]["waited_ms"] == 200
    ok = findings(
        tmp_path / "b",
        sessions=[active()],
        streams=_resume("1", "1:1", "STREAM_OPEN", gap=1500, retry=1000),
    )
    assert "retry_not_honored" not in ok


@pytest.mark.parametrize("body_bytes", [0, 412])
def test_retry_not_honored_needs_the_retry_delivered(tmp_path, body_bytes):
    """A proxy served the stream with no body bytes (Caddy under the conformance suite):
    its client never got the `retry:` and a cursor-less GET soon after blames nobody. The
    same stream with its bytes delivered still does."""
    streams = [
        stm(0, "1", "STREAM_OPEN", method="POST", request_id="1", retry_ms=1000),
        stm(100, "1", "DISCONNECTED", close_reason="network"),
        stm(150, "1", "RESUME_PENDING"),
        stm(151, "1", "STREAM_OPEN", method="GET"),
    ]
    proxy = [
        px(-5, session_hmac=S, duration_ms=100, body_bytes_sent=body_bytes,
           resp_content_type="text/event-stream"),
    ]  # fmt: skip
    got = findings(tmp_path, sessions=[active()], streams=streams, proxy=proxy)
    assert ("retry_not_honored" in got) == (body_bytes > 0), got.keys()


# -- dispatches ---------------------------------------------------------------------------
def test_duplicate_dispatch_key_basis(tmp_path):
    twice = [
        dp(0, "d1", idempotency_key="k", payload_digest="p", principal="u"),
        dp(900, "d2", idempotency_key="k", payload_digest="p", principal="u"),
    ]
    got = findings(tmp_path / "a", dispatches=twice)
    assert [(f["dispatch_id"], f["detail"]["basis"]) for f in got["duplicate_dispatch"]] == [
        ("d1", "idempotency_key")
    ]
    hit = [
        twice[0],
        dp(900, "d2", "idempotency_hit", idempotency_key="k", payload_digest="p", principal="u"),
    ]
    assert findings(tmp_path / "b", dispatches=hit) == {}


def test_duplicate_dispatch_retry_basis(tmp_path):
    first = dp(0, "d1", idempotency_key="k1", payload_digest="p", principal="u", http_status=499)
    again = dp(2000, "d2", idempotency_key="k2", payload_digest="p", principal="u")
    got = findings(tmp_path / "a", dispatches=[first, again])
    assert [f["detail"]["basis"] for f in got["duplicate_dispatch"]] == ["retry"]
    late = dict(again, ts=T + 700_000)
    assert "duplicate_dispatch" not in findings(tmp_path / "b", dispatches=[first, late])
    fine = dict(first, http_status=200)
    assert "duplicate_dispatch" not in findings(tmp_path / "c", dispatches=[fine, again])
    reads = [dict(first, tool_class="read"), dict(again, tool_class="read")]
    assert findings(tmp_path / "d", dispatches=reads) == {}


DD = "duplicate_dispatch"


def test_duplicate_dispatch_retry_basis_from_a_sessionless_proxy_failure(tmp_path):
    """A sessionless write broke when a proxy logged a failure for its principal and
    request id within the retry window, before or after the write's own record; the
    nearest failure decides, among many requests of the same id and principal."""
    first = dp(0, "d1", request_id="7", payload_digest="p", principal="u")
    again = dp(2000, "d2", request_id="8", payload_digest="p", principal="u")
    noise = [px(t, status=200, request_id="7", principal="u") for t in (-50, 10, 60)]
    noise += [px(-900_000, status=502, request_id="7", principal="u")]  # outside the window
    for k, t in enumerate((-300_000, 1000)):  # a failure before, or after, the write
        fail = px(t, status=499, request_id="7", principal="u")
        got = findings(tmp_path / f"hit{k}", dispatches=[first, again], proxy=[*noise, fail])
        seen = [(f["dispatch_id"], f["detail"]["basis"], f["detail"]["broke"]) for f in got[DD]]
        assert seen == [("d1", "retry", ["proxy_status"])]
    for name, fail in (
        ("far", px(700_000, status=499, request_id="7", principal="u")),
        ("other_principal", px(1000, status=499, request_id="7", principal="v")),
        ("other_request", px(1000, status=499, request_id="9", principal="u")),
    ):
        got = findings(tmp_path / name, dispatches=[first, again], proxy=[*noise, fail])
        assert "retry" not in [f["detail"]["basis"] for f in got.get(DD, [])]


def test_duplicate_dispatch_inbox_basis(tmp_path):
    events = [ev(0, "1", 1, "result", message_digest="d")]
    inbox = [
        rc(1, "1", "1:1", message_digest="d", dispatch_id="o1"),
        rc(9, "1", "1:1", message_digest="d", dispatch_id="o2"),
    ]
    got = findings(
        tmp_path,
        sessions=[active()],
        events=events,
        inbox=inbox,
        dispatches=[dp(0, "d0", cls="read", tool="get_status", payload_digest="s")],
    )
    assert [f["detail"]["basis"] for f in got["duplicate_dispatch"]] == ["inbox"]
    assert len(got["duplicate_delivery_accepted"]) == 1


def test_idempotency_conflict_and_conflict_executed(tmp_path):
    a = dp(0, "d1", idempotency_key="k", payload_digest="p1", principal="u")
    refused = dp(
        50,
        "d2",
        "idempotency_conflict",
        idempotency_key="k",
        payload_digest="p2",
        principal="u",
        http_status=409,
    )
    got = findings(tmp_path / "a", dispatches=[a, refused])
    assert [f["idempotency_key"] for f in got["idempotency_conflict"]] == ["k"]
    assert "conflict_executed" not in got
    done = dict(refused, outcome="executed", http_status=200)
    got = findings(tmp_path / "b", dispatches=[a, done])
    assert [f["idempotency_key"] for f in got["conflict_executed"]] == ["k"]
    assert "idempotency_conflict" not in got


def test_missing_idempotency_key(tmp_path):
    got = findings(
        tmp_path / "a", dispatches=[dp(0, "d1"), dp(5, "d2", cls="read", tool="get_status")]
    )
    assert [f["dispatch_id"] for f in got["missing_idempotency_key"]] == ["d1"]


# -- sessions and HTTP --------------------------------------------------------------------
def test_reinit_missing(tmp_path):
    # The log names JSON-RPC methods, so an initialize would show in it.
    gone = px(
        1000,
        status=404,
        session_hmac=S,
        principal="p1",
        protocol_version="2025-11-25",
        jsonrpc_method="tools/call",
    )
    init = px(3000, session_hmac=None, principal="p1", jsonrpc_method="initialize")
    assert len(findings(tmp_path / "a", proxy=[gone])["reinit_missing"]) == 1
    assert findings(tmp_path / "b", proxy=[gone, init]) == {}
    late = dict(init, ts=T + 40_000)
    assert "reinit_missing" in findings(tmp_path / "c", proxy=[gone, late])
    delete = dict(gone, method="DELETE")
    assert findings(tmp_path / "d", proxy=[delete]) == {}
    keeps_going = [
        gone,
        init,
        px(5000, status=404, session_hmac=S, principal="p1", protocol_version="2025-11-25"),
    ]
    # Each 404 is its own unit: the first was followed by more use of the dead session,
    # the second by no initialize.
    assert len(findings(tmp_path / "e", proxy=keeps_going)["reinit_missing"]) == 2


def test_invalid_origin(tmp_path):
    rows = [
        px(0, origin="https://evil.example"),
        px(10, status=403, origin="https://evil"),
        px(20, origin="http://localhost:6274"),
        px(30, origin="https://app.example.com"),
    ]
    allow = from_mapping({"origin_allowlist": ["https://app.example.com", "http://localhost:*"]})
    got = findings(tmp_path, allow, proxy=rows)
    assert [f["detail"]["origin"] for f in got["invalid_origin_accepted"]] == [
        "https://evil.example"
    ]


def test_session_after_terminal(tmp_path):
    sessions = [active(), ses(1000, "SESSION_EXPIRED")]
    late = findings(tmp_path / "a", sessions=sessions, inbox=[rc(1500, "1", "x")])
    assert len(late["session_after_terminal"]) == 1
    early = findings(
        tmp_path / "b",
        sessions=sessions,
        inbox=[rc(500, "1", "x")],
        proxy=[
            px(1500, status=404, session_hmac=S, protocol_version="x", principal="p1"),
            px(1600, session_hmac=None, principal="p1", jsonrpc_method="initialize"),
        ],
    )
    assert "session_after_terminal" not in early


def test_auth_subject_mismatch(tmp_path):
    rows = [
        px(10, session_hmac=S, auth_subject="sub-old", protocol_version="2025-11-25"),
        px(20, status=401, session_hmac=S, auth_subject="sub-other", protocol_version="2025-11-25"),
        px(30, session_hmac=S, auth_subject="sub1", protocol_version="2025-11-25"),
    ]
    got = findings(tmp_path, sessions=[active()], proxy=rows)
    assert [f["detail"]["auth_subject"] for f in got["auth_subject_mismatch"]] == ["sub-old"]


def test_delete_fabricated(tmp_path):
    ledger = [active(), ses(100, "DELETE_REQUESTED"), ses(102, "TERMINATED")]
    got = findings(
        tmp_path / "a",
        sessions=ledger,
        proxy=[px(99, "DELETE", 405, session_hmac=S, protocol_version="2025-11-25")],
    )
    assert len(got["delete_fabricated"]) == 1
    ok = findings(
        tmp_path / "b",
        sessions=ledger,
        proxy=[px(99, "DELETE", 200, session_hmac=S, protocol_version="2025-11-25")],
    )
    assert ok == {}


def test_state_violation(tmp_path):
    bad = findings(
        tmp_path / "a",
        sessions=[active(), ses(50, "TERMINATED")],
        proxy=[px(40, "DELETE", 200, session_hmac=S, protocol_version="2025-11-25")],
    )
    assert [(f["detail"]["from"], f["detail"]["to"]) for f in bad["state_violation"]] == [
        ("SESSION_ACTIVE", "TERMINATED")
    ]
    fine = findings(
        tmp_path / "b",
        sessions=[
            active(),
            ses(10, "SESSION_ACTIVE"),
            ses(50, "SESSION_EXPIRED"),
            ses(60, "REINITIALIZE_REQUIRED"),
        ],
        streams=[stm(0, "1", "STREAM_OPEN"), stm(5, "1", "DISCONNECTED"), stm(6, "1", "CLOSED")],
    )
    assert fine == {}
    first = findings(tmp_path / "c", streams=[stm(0, "1", "DISCONNECTED")])
    assert len(first["state_violation"]) == 1


def test_missing_protocol_version(tmp_path):
    got = findings(
        tmp_path,
        proxy=[
            px(0, session_hmac=S),
            px(5, session_hmac=S),
            px(9, session_hmac=S2, protocol_version="2025-11-25"),
            px(10, jsonrpc_method="initialize"),
        ],
    )
    m = got["missing_protocol_version"]
    assert [(f["session_hmac"], f["detail"]["requests_without_version"]) for f in m] == [(S, 2)]


def test_raw_session_id_logged(tmp_path):
    got = findings(
        tmp_path,
        proxy=[
            px(0, session_id="raw-1", protocol_version="2025-11-25"),
            px(5, session_hmac=S, protocol_version="2025-11-25"),
        ],
    )
    r = got["raw_session_id_logged"]
    assert len(r) == 1 and r[0]["detail"]["count"] == 1
    assert r[0]["detail"]["file"] == "proxy.jsonl"


def test_obsolete_resume(tmp_path):
    rows = [
        px(0, "GET", 405, protocol_version="2026-07-28", last_event_id="1:1", principal="svc"),
        px(
            5,
            "GET",
            200,
            protocol_version="2025-11-25",
            last_event_id="1:1",
            principal="old",
            session_hmac=S,
        ),
    ]
    got = findings(tmp_path, proxy=rows)
    assert [f["detail"]["client"] for f in got["obsolete_resume"]] == ["svc"]


def test_reconnect_storm_budget(tmp_path):
    def burst(n):
        return [
            px(
                i * 150,
                "GET",
                429,
                last_event_id="1:1",
                session_hmac=S,
                protocol_version="2025-11-25",
            )
            for i in range(n)
        ]

    assert len(findings(tmp_path / "a", proxy=burst(51))["reconnect_storm"]) == 1
    assert findings(tmp_path / "b", proxy=burst(50)) == {}


# -- rollback hygiene -----------------------------------------------------------------------
ROLLOUT = [
    {"ts": T, "stage": "w", "action": "start", "scope": "write"},
    {"ts": T + 10_000, "stage": "w", "action": "rollback"},
    {"ts": T + 100_000, "stage": "w2", "action": "start", "scope": "write"},
]


def test_rollback_resumable_new_stream(tmp_path):
    new = [
        stm(12_000, "2", "STREAM_OPEN", method="POST"),
        stm(12_100, "2", "DISCONNECTED"),
        stm(13_200, "2", "RESUME_PENDING"),
        stm(13_300, "2", "STREAM_OPEN", method="GET"),
    ]
    got = findings(tmp_path / "a", rollout=ROLLOUT, sessions=[active()], streams=new)
    assert [f["stream_id"] for f in got["rollback_resumable_new_stream"]] == ["2"]
    old = [
        stm(9_000, "1", "STREAM_OPEN", method="POST"),
        stm(12_100, "1", "DISCONNECTED"),
        stm(13_200, "1", "RESUME_PENDING"),
        stm(13_300, "1", "STREAM_OPEN", method="GET"),
    ]
    assert findings(tmp_path / "b", rollout=ROLLOUT, sessions=[active()], streams=old) == {}


def test_rollback_cursor_dropped(tmp_path):
    streams = [
        stm(9_000, "1", "STREAM_OPEN", method="POST"),
        stm(9_500, "1", "DISCONNECTED"),
        stm(11_000, "1", "RESUME_PENDING"),
        stm(11_100, "1", "CURSOR_REJECTED"),
        stm(11_200, "1", "CLOSED", close_reason="cursor_rejected"),
    ]
    got = findings(tmp_path / "a", rollout=ROLLOUT, sessions=[active()], streams=streams)
    assert len(got["rollback_cursor_dropped"]) == 1 and len(got["cursor_rejected"]) == 1
    expired = findings(
        tmp_path / "b",
        rollout=ROLLOUT,
        sessions=[active(), ses(10_500, "SESSION_EXPIRED")],
        streams=streams,
    )
    assert "rollback_cursor_dropped" not in expired


def test_rollback_post_storm(tmp_path):
    old = [
        stm(9_000, "1", "STREAM_OPEN", method="POST", payload_digest="p"),
        stm(12_000, "1", "DISCONNECTED"),
        stm(12_001, "1", "CLOSED"),
    ]
    repost = [
        stm(13_000, "2", "STREAM_OPEN", method="POST", payload_digest="p"),
        stm(13_500, "2", "CLOSED", close_reason="completed"),
    ]
    got = findings(tmp_path / "a", rollout=ROLLOUT, sessions=[active()], streams=old + repost)
    assert [f["stream_id"] for f in got["rollback_post_storm"]] == ["1"]
    resumed = old[:2] + [
        stm(12_500, "1", "RESUME_PENDING"),
        stm(12_600, "1", "STREAM_OPEN", method="GET"),
    ]
    got = findings(tmp_path / "b", rollout=ROLLOUT, sessions=[active()], streams=resumed + repost)
    assert "rollback_post_storm" not in got
    plain = findings(
        tmp_path / "c", rollout=ROLLOUT, sessions=[active(resumable=False)], streams=old + repost
    )
    assert "rollback_post_storm" not in plain


# -- properties ---------------------------------------------------------------------------
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    kinds=st.lists(st.sampled_from(["progress", "message", "heartbeat"]), min_size=2, max_size=9),
    accepted=st.sets(st.integers(min_value=0, max_value=10)),
    completed=st.booleans(),
)
def test_gap_property(tmp_path_factory, kinds, accepted, completed):
    """The detector's missing seqs are exactly the non-heartbeat holes (and the tail of a
    completed stream) of the accepted seqs."""
    kinds = ["priming", *kinds, "result"]
    n = len(kinds)
    acc = sorted(a for a in accepted if a < n)
    expected = set()
    if acc:
        expected = {q for q in range(acc[0] + 1, acc[-1]) if q not in acc}
    if completed:
        expected |= set(range((acc[-1] + 1) if acc else 0, n))
    expected = {q for q in expected if kinds[q] not in ("priming", "heartbeat")}
    tmp = tmp_path_factory.mktemp("prop")
    got = findings(
        tmp,
        sessions=[active()],
        events=_stream_events(kinds),
        streams=completed_stream(close_reason="completed" if completed else "client_disconnect"),
        # one receipt elsewhere, so the inbox exists even when none is accepted here
        inbox=[rc(1, "0", "0:1"), *(rc(10 * i + 5, "1", f"1:{i}") for i in acc)],
    )
    found = {q for f in got.get("replay_gap", []) for q in f["detail"]["missing_seqs"]}
    assert found == expected
    if expected:
        severity = got["replay_gap"][0]["severity"]
        answer = any(kinds[q] in ("message", "result") for q in expected)
        assert severity == ("high" if answer else "low")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    verdicts=st.lists(
        st.sampled_from(["accepted", "duplicate", "rejected"]), min_size=1, max_size=5
    )
)
def test_dedup_property(tmp_path_factory, verdicts):
    """A dedup key fires exactly when it was accepted two or more times."""
    tmp = tmp_path_factory.mktemp("dedup")
    inbox = [rc(i, "1", "1:1", v, message_digest="d") for i, v in enumerate(verdicts)]
    got = findings(tmp, sessions=[active()], inbox=inbox)
    assert ("duplicate_delivery_accepted" in got) == (verdicts.count("accepted") >= 2)


@pytest.mark.parametrize("name", ["replay_gap", "cursor_misrouted", "delete_fabricated"])
def test_missing_inputs_are_reported_as_coverage(tmp_path, name):
    # A dispatch record with its payload digest: duplicate_dispatch can judge it.
    one = dp(0, "d1", idempotency_key="k", payload_digest="p")
    (tmp_path / "dispatches.jsonl").write_text(json.dumps(one) + "\n")
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    ingest(con, [tmp_path], Config())
    runner.analyse(con, Config())
    cov = runner.coverage(con)
    assert cov[name].startswith("no ")
    assert cov["duplicate_dispatch"] == "ok"
