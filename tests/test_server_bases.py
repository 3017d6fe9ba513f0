"""The server-side readings on hand-built minimal cases, each with near misses: stream
faults judged from the server's own log where a session has no client receipts, and
duplicate writes judged across sources (dispatch records, stream ledger, proxy log)."""

from __future__ import annotations

from .test_detectors_focused import S2, S, T, active, dp, ev, findings, px, rc, stm

KINDS = ["priming", "message", "message", "message", "message", "result"]


def _lossy(replayed=(4, 5), live=(), resume_at=500):
    """Stream 1: seq 0..5 stored before the resume except `live` ones; a resume from the
    cursor 1:2 reopens; the store replays `replayed`; the result goes out."""
    events = [
        ev(10 * i if i not in live else resume_at + 50 + i, "1", i, k) for i, k in enumerate(KINDS)
    ]
    events += [ev(resume_at + 20 + i, "1", i, KINDS[i], "replayed") for i in replayed]
    streams = [
        stm(0, "1", "STREAM_OPEN", method="POST"),
        stm(100, "1", "DISCONNECTED", close_reason="client_lost"),
        stm(resume_at, "1", "RESUME_PENDING", resume_from_event_id="1:2"),
        stm(resume_at + 10, "1", "STREAM_OPEN", method="GET"),
        stm(resume_at + 200, "1", "CLOSED", close_reason="completed"),
    ]
    return {"sessions": [active()], "streams": streams, "events": events}


def test_an_event_stored_after_the_cursor_and_not_replayed_is_a_server_gap(tmp_path):
    got = findings(tmp_path / "a", **_lossy())
    assert [(f["stream_id"], f["severity"], f["detail"]["basis"]) for f in got["replay_gap"]] == [
        ("1", "high", "server")
    ]
    assert got["replay_gap"][0]["detail"]["missing_seqs"] == [3]
    assert [f["detail"]["basis"] for f in got["silent_truncation"]] == ["server"]
    # near misses: everything replayed; the event produced after the resume (live)
    assert findings(tmp_path / "b", **_lossy(replayed=(3, 4, 5))) == {}
    assert findings(tmp_path / "c", **_lossy(replayed=(4,), live=(3, 5))) == {}


def test_client_receipts_take_precedence_over_the_server_log(tmp_path):
    case = _lossy()
    # The client accepted everything (it had seq 3 live before its cursor was persisted).
    case["inbox"] = [rc(10 * i + 5, "1", f"1:{i}") for i in range(6)]
    assert findings(tmp_path, **case) == {}


def test_a_dropped_event_is_a_server_gap_unless_sent_later(tmp_path):
    events = [ev(10 * i, "1", i, k, "dropped" if i == 2 else "sent") for i, k in enumerate(KINDS)]
    streams = [stm(0, "1", "STREAM_OPEN"), stm(900, "1", "CLOSED", close_reason="completed")]
    got = findings(tmp_path / "a", sessions=[active()], streams=streams, events=events)
    assert got["replay_gap"][0]["detail"] == {
        "basis": "server",
        "missing_seqs": [2],
        "missing_kinds": ["message"],
    }
    assert "silent_truncation" in got
    resent = [*events, ev(95, "1", 2, "message", "sent")]
    assert findings(tmp_path / "b", sessions=[active()], streams=streams, events=resent) == {}


def test_dropped_terminal_only_when_never_delivered(tmp_path):
    events = [ev(0, "1", 1, "result", "dropped")]
    got = findings(tmp_path / "a", sessions=[active()], events=events)
    assert got["dropped_terminal"][0]["detail"]["basis"] == "server"
    later = [*events, ev(50, "1", 1, "result", "replayed")]
    assert "dropped_terminal" not in findings(tmp_path / "b", sessions=[active()], events=later)


def test_a_replay_of_another_streams_event_is_a_cross_stream_acceptance(tmp_path):
    events = [
        ev(0, "1", 1, "message"),
        ev(10, "2", 1, "message"),
        ev(50, "2", 1, "message", "replayed", eid="1:1"),
    ]
    got = findings(tmp_path / "a", sessions=[active()], events=events)
    (f,) = got["cross_stream_acceptance"]
    assert (f["stream_id"], f["event_id"]) == ("2", "1:1")
    assert f["detail"] == {"basis": "server", "origin_stream_id": "1", "origin_seq": 1}
    own = [ev(0, "1", 1, "message"), ev(50, "1", 1, "message", "replayed")]
    assert findings(tmp_path / "b", sessions=[active()], events=own) == {}
    # With receipts the client's verdict decides (it rejected the foreign event).
    rejected = rc(60, "2", "1:1", "rejected", reject_reason="wrong_stream")
    assert findings(tmp_path / "c", sessions=[active()], events=events, inbox=[rejected]) == {}


def test_priming_lost_from_the_server_log(tmp_path):
    streams = [
        stm(0, "1", "STREAM_OPEN", method="POST"),
        stm(100, "1", "DISCONNECTED", close_reason="network"),
        stm(101, "1", "CLOSED", close_reason="client_disconnect"),
    ]
    only_priming = [ev(10, "1", 0, "priming")]
    got = findings(tmp_path / "a", sessions=[active()], streams=streams, events=only_priming)
    assert [f["detail"]["basis"] for f in got["priming_lost"]] == ["server"]
    more = [*only_priming, ev(20, "1", 1, "progress")]
    assert findings(tmp_path / "b", sessions=[active()], streams=streams, events=more) == {}
    not_resumable = [active(resumable=False)]
    assert (
        findings(tmp_path / "c", sessions=not_resumable, streams=streams, events=only_priming) == {}
    )
    resumed = [
        *streams[:2],
        stm(300, "1", "RESUME_PENDING", resume_from_event_id="1:0"),
        stm(310, "1", "STREAM_OPEN", method="GET"),
        stm(400, "1", "CLOSED", close_reason="completed"),
    ]
    assert "priming_lost" not in findings(
        tmp_path / "d", sessions=[active()], streams=resumed, events=only_priming
    )


# -- duplicate writes across sources ------------------------------------------------------
def test_a_break_only_the_proxy_saw_makes_a_retry(tmp_path):
    """Sessionless (2026-07-28): the server finished (200), the proxy logged 499 for the
    same principal and request id; the client re-sent under a new key."""
    first = dp(
        0,
        "d1",
        idempotency_key="k1",
        payload_digest="p",
        principal="u",
        request_id="7",
        http_status=200,
    )
    again = dp(3000, "d2", idempotency_key="k2", payload_digest="p", principal="u", request_id="8")
    cut = px(-5, status=499, principal="u", request_id="7", protocol_version="2026-07-28")
    got = findings(tmp_path / "a", dispatches=[first, again], proxy=[cut])
    (f,) = got["duplicate_dispatch"]
    assert f["detail"]["basis"] == "retry" and f["detail"]["broke"] == ["proxy_status"]
    assert f["severity"] == "critical"
    for i, other in enumerate(
        [
            dict(cut, status=200),  # the proxy saw nothing wrong either
            dict(cut, principal="someone-else"),
            dict(cut, request_id="9"),
            dict(cut, ts=T + 900_000),  # outside the retry window
        ]
    ):
        assert "duplicate_dispatch" not in findings(
            tmp_path / f"n{i}", dispatches=[first, again], proxy=[other]
        ), other


def _resent_on_a_session():
    """The same payload sent twice on one session 2 s apart, each under its own key."""
    common = {"payload_digest": "p", "session_hmac": S, "generation": 1}
    return (
        dp(0, "d1", request_id="3", idempotency_key="k1", **common),
        dp(2000, "d2", request_id="4", idempotency_key="k2", **common),
    )


def test_a_proxy_break_on_a_session_matches_by_session(tmp_path):
    first, again = _resent_on_a_session()
    cut = px(-5, status=502, session_hmac=S, request_id="3")
    got = findings(
        tmp_path / "a", sessions=[active(principal=None)], dispatches=[first, again], proxy=[cut]
    )
    assert [f["detail"]["basis"] for f in got["duplicate_dispatch"]] == ["retry"]
    elsewhere = dict(cut, session_hmac=S2)
    got = findings(
        tmp_path / "b",
        sessions=[active(principal=None)],
        dispatches=[first, again],
        proxy=[elsewhere],
    )
    assert "duplicate_dispatch" not in got


def test_retry_matches_on_session_when_there_is_no_principal(tmp_path):
    first, again = _resent_on_a_session()
    streams = [
        stm(-10, "3", "STREAM_OPEN", method="POST", request_id="3"),
        stm(500, "3", "DISCONNECTED", close_reason="network"),
    ]
    got = findings(
        tmp_path / "a",
        sessions=[active(principal=None)],
        streams=streams,
        dispatches=[first, again],
    )
    assert [f["detail"]["broke"] for f in got["duplicate_dispatch"]] == [["stream_disconnected"]]
    # Neither principal nor session: nothing to say they came from the same caller.
    anon = [
        dict(first, session_hmac=None, generation=None, http_status=499),
        dict(again, session_hmac=None, generation=None),
    ]
    assert "duplicate_dispatch" not in findings(tmp_path / "b", dispatches=anon)
    # Another session without a principal is another caller.
    other = [first, dict(again, session_hmac=S2)]
    assert "duplicate_dispatch" not in findings(
        tmp_path / "c", sessions=[active(principal=None)], streams=streams, dispatches=other
    )


def test_a_blind_resend_is_suspected_not_gated(tmp_path):
    first = dp(0, "d1", payload_digest="p", request_id="3", session_hmac=S, generation=1)
    again = dp(4000, "d2", payload_digest="p", request_id="4", session_hmac=S, generation=1)
    got = findings(tmp_path / "a", sessions=[active()], dispatches=[first, again])
    (f,) = got["duplicate_dispatch"]
    assert (f["dispatch_id"], f["severity"], f["detail"]["basis"]) == ("d1", "high", "suspected")
    assert f["detail"]["dispatches"] == ["d1", "d2"] and "confirm_with" in f["detail"]
    assert len(got["missing_idempotency_key"]) == 2
    # Past the re-send window (30 s from the end of the first), with keys, reads,
    # another payload: not suspected.
    for i, pair in enumerate(
        [
            [first, dict(again, ts=T + 31_000)],
            [dict(first, idempotency_key="k1"), dict(again, idempotency_key="k2")],
            [dict(first, tool_class="read"), dict(again, tool_class="read")],
            [first, dict(again, payload_digest="q")],
        ]
    ):
        assert "duplicate_dispatch" not in findings(
            tmp_path / f"n{i}", sessions=[active()], dispatches=pair
        ), pair
    # The window runs from the end of the first attempt's stream.
    streams = [
        stm(-10, "3", "STREAM_OPEN", method="POST", request_id="3"),
        stm(60_000, "3", "CLOSED", close_reason="completed"),
        stm(75_000, "4", "STREAM_OPEN", method="POST", request_id="4"),
        stm(76_000, "4", "CLOSED", close_reason="completed"),
    ]
    long = [first, dict(again, ts=T + 75_005)]
    got = findings(tmp_path / "w", sessions=[active()], streams=streams, dispatches=long)
    assert [f["detail"]["basis"] for f in got["duplicate_dispatch"]] == ["suspected"]


def test_suspected_duplicates_do_not_count_in_the_gate(tmp_path):
    from replaygate.core import db as dbm
    from replaygate.core.config import Config
    from replaygate.queries import gates

    rollout = [{"ts": T - 1000, "stage": "w", "action": "start", "scope": "write"}]
    first = dp(0, "d1", payload_digest="p", request_id="3", session_hmac=S, generation=1)
    again = dp(4000, "d2", payload_digest="p", request_id="4", session_hmac=S, generation=1)
    got = findings(
        tmp_path,
        sessions=[active(rollout_stage="w")],
        dispatches=[first, again],
        rollout=rollout,
    )
    assert got["duplicate_dispatch"][0]["detail"]["basis"] == "suspected"
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    stage = gates.evaluate(con, Config(), "w")["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["duplicate_dispatches"]["value"] == 0
    assert g["write_idempotency"]["status"] == "fail"
