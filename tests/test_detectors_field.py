"""The detectors for failure modes seen in public MCP implementations, each on a minimal
case that must fire and a near miss that must not — on client receipts and on the
server's ledgers and proxy logs alone (basis server)."""

from __future__ import annotations

from replaygate.core import db as dbm
from replaygate.queries import catalog, runner
from replaygate.queries.gatedefs import GATES

from .test_detectors_focused import S2, S, active, ev, findings, px, rc, stm


# -- cursor_on_post ---------------------------------------------------------------------
def test_cursor_on_post_per_session_and_per_principal(tmp_path):
    rows = [
        px(0, session_hmac=S, last_event_id="1:3", jsonrpc_method="tools/call"),
        px(5, session_hmac=S, last_event_id="1:4", jsonrpc_method="tools/call"),
        px(9, "GET", 200, session_hmac=S),  # the reconnecting GET carries none
        px(20, principal="svc-1", last_event_id="x", jsonrpc_method="initialize"),
    ]
    got = findings(tmp_path, proxy=rows)["cursor_on_post"]
    by_unit = {f["session_hmac"] or f["detail"]["client"]: f for f in got}
    assert set(by_unit) == {S, "svc-1"}
    assert by_unit[S]["detail"]["posts"] == 2 and by_unit[S]["detail"]["get_resumes"] == 0
    assert by_unit[S]["detail"]["client"] is None  # a session's unit never names a client
    assert by_unit[S]["severity"] == "low"


def test_cursor_on_post_near_misses(tmp_path):
    rows = [
        px(0, "GET", 200, session_hmac=S, last_event_id="1:3"),  # a proper resume
        px(5, session_hmac=S, jsonrpc_method="tools/call"),  # a POST without a cursor
        # 2026-07-28 has no resumption at all: obsolete_resume's case, not this one
        px(9, session_hmac=S2, last_event_id="1:1", protocol_version="2026-07-28"),
    ]
    got = findings(tmp_path, proxy=rows)
    assert "cursor_on_post" not in got
    assert len(got["obsolete_resume"]) == 1


# -- resume_without_cursor ----------------------------------------------------------------
def _cursorless(reopen=None, cursor=None, disc=100):
    """A POST stream broken after seq 2; re-opened by GET at 1500 (with or without a
    cursor); events 3 and 4 produced in the gap, 5 (the result) later."""
    rows = [
        stm(0, "1", "STREAM_OPEN", method="POST", retry_ms=1000),
        stm(disc, "1", "DISCONNECTED", close_reason="network"),
    ]
    if reopen == "pending":
        rows.append(stm(1500, "1", "RESUME_PENDING", resume_from_event_id=cursor))
        rows.append(stm(1550, "1", "STREAM_OPEN", method="GET"))
    elif reopen == "open":
        rows.append(stm(1500, "1", "STREAM_OPEN", method="GET", resume_from_event_id=cursor))
    rows.append(stm(3000, "1", "CLOSED", close_reason="client_disconnect"))
    return rows + WITNESS


# Another stream of the same ledger resumed with a cursor: the ledger records cursors, so
# a re-open without one is the client's (a ledger that never shows one is `cannot_tell`).
WITNESS = [
    stm(0, "7", "STREAM_OPEN", method="POST", retry_ms=1000),
    stm(50, "7", "DISCONNECTED", close_reason="network"),
    stm(1200, "7", "RESUME_PENDING", resume_from_event_id="7:1"),
    stm(1210, "7", "STREAM_OPEN", method="GET"),
    stm(1300, "7", "CLOSED", close_reason="completed"),
]


EVENTS = [
    ev(5, "1", 0, "priming"),
    ev(30, "1", 1, "progress"),
    ev(60, "1", 2, "message"),
    ev(600, "1", 3, "progress"),
    ev(900, "1", 4, "heartbeat"),
    ev(1000, "1", 5, "message"),
    ev(2500, "1", 6, "result"),
]
RECEIVED = [rc(6, "1", "1:0"), rc(31, "1", "1:1"), rc(61, "1", "1:2")]


def test_resume_without_cursor_client_basis(tmp_path):
    for reopen in ("pending", "open"):
        got = findings(
            tmp_path / reopen,
            sessions=[active()],
            streams=_cursorless(reopen),
            events=EVENTS,
            inbox=RECEIVED,
        )
        (f,) = got["resume_without_cursor"]
        assert f["stream_id"] == "1" and f["severity"] == "medium"
        # produced before the re-open and never accepted; the heartbeat never counts and the
        # result came after the re-open
        assert f["detail"]["lost_seqs"] == [3, 5] and f["detail"]["basis"] == "client"


def test_resume_without_cursor_server_basis(tmp_path):
    got = findings(tmp_path, sessions=[active()], streams=_cursorless("pending"), events=EVENTS)
    (f,) = got["resume_without_cursor"]
    assert f["detail"]["basis"] == "server" and f["detail"]["lost_seqs"] == [3, 5]
    assert f["detail"]["cursor_held_seq"] == 2


def test_resume_without_cursor_near_misses(tmp_path):
    base = {"events": EVENTS, "inbox": RECEIVED}
    # the client presented its cursor
    got = findings(
        tmp_path / "a", sessions=[active()], streams=_cursorless("pending", "1:2"), **base
    )
    assert "resume_without_cursor" not in got
    # not resumable: a cursorless re-open is all the client can do
    got = findings(
        tmp_path / "b", sessions=[active(resumable=False)], streams=_cursorless("pending"), **base
    )
    assert "resume_without_cursor" not in got
    # the client had accepted nothing before the break: no cursor to present
    got = findings(
        tmp_path / "c",
        sessions=[active()],
        streams=_cursorless("pending", disc=3),
        events=EVENTS,
        inbox=RECEIVED,
    )
    assert "resume_without_cursor" not in got
    # everything produced before the re-open reached the client anyway
    late = [*RECEIVED, rc(1600, "1", "1:3"), rc(1610, "1", "1:5")]
    got = findings(
        tmp_path / "d",
        sessions=[active()],
        streams=_cursorless("pending"),
        events=EVENTS,
        inbox=late,
    )
    assert "resume_without_cursor" not in got
    # never re-opened (closed, then re-POSTed as a new stream)
    got = findings(tmp_path / "e", sessions=[active()], streams=_cursorless(None), **base)
    assert "resume_without_cursor" not in got


def test_resume_without_cursor_in_a_ledger_without_cursors_is_cannot_tell(tmp_path):
    # The same cursorless re-open in a ledger that records no cursor at all: the
    # ledger cannot show one, so the stream is neither a finding nor dropped.
    streams = [r for r in _cursorless("pending") if r["stream_id"] != "7"]
    tmp_path.mkdir(parents=True, exist_ok=True)
    got = findings(tmp_path, sessions=[active()], streams=streams, events=EVENTS)
    assert "resume_without_cursor" not in got
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    (entry,) = runner.cannot_tell(con)["resume_without_cursor"]
    con.close()
    assert (entry["missing"], entry["units"]) == ("streams.resume_from_event_id", 1)


def test_resume_without_cursor_server_basis_needs_more_than_priming(tmp_path):
    # Only priming went out before the break: the server cannot tell a lost priming event
    # from a client that ignores its cursor, so this is not claimed.
    events = [ev(5, "1", 0, "priming"), ev(600, "1", 1, "progress"), ev(2500, "1", 2, "result")]
    got = findings(tmp_path, sessions=[active()], streams=_cursorless("pending"), events=events)
    assert "resume_without_cursor" not in got


# -- replay_buffer_exhausted ----------------------------------------------------------------
def _rejected(cursor, sid="1"):
    return [
        stm(0, sid, "STREAM_OPEN", method="POST", retry_ms=1000),
        stm(100, sid, "DISCONNECTED", close_reason="network"),
        stm(1500, sid, "RESUME_PENDING", resume_from_event_id=cursor),
        stm(1510, sid, "CURSOR_REJECTED"),
        stm(1512, sid, "CLOSED", close_reason="cursor_rejected"),
    ]


BUFFER = [
    ev(5, "1", 0, "priming"),
    ev(30, "1", 1, "progress"),
    ev(60, "1", 2, "message"),
    ev(90, "1", 3, "message"),
    ev(95, "1", 4, "heartbeat"),
    ev(800, "1", 5, "result"),
    ev(1200, "1", 2, "message", "evicted", buffer_depth=256),
    ev(40, "9", 1, "message"),
]


def test_replay_buffer_exhausted(tmp_path):
    client = findings(
        tmp_path / "a",
        sessions=[active()],
        streams=_rejected("1:2"),
        events=BUFFER,
        inbox=[rc(31, "1", "1:1"), rc(61, "1", "1:2")],
    )
    (f,) = client["replay_buffer_exhausted"]
    assert f["severity"] == "high" and f["stream_id"] == "1"
    d = f["detail"]
    assert (d["basis"], d["cursor_seq"], d["events_lost"], d["lost_seqs"]) == (
        "client",
        2,
        2,
        [3, 5],
    )
    assert d["buffer_depth"] == 256 and d["evicted_at"] is not None
    assert len(client["cursor_rejected"]) == 1  # the rejection itself, as always
    server = findings(tmp_path / "b", sessions=[active()], streams=_rejected("1:2"), events=BUFFER)
    (f,) = server["replay_buffer_exhausted"]
    assert f["detail"]["basis"] == "server" and f["detail"]["lost_seqs"] == [3, 5]


def test_replay_buffer_exhausted_near_misses(tmp_path):
    # a cursor the server never produced: a client fault, only cursor_rejected
    got = findings(tmp_path / "a", sessions=[active()], streams=_rejected("bogus"), events=BUFFER)
    assert "replay_buffer_exhausted" not in got and len(got["cursor_rejected"]) == 1
    # a cursor of another stream
    got = findings(tmp_path / "b", sessions=[active()], streams=_rejected("9:1"), events=BUFFER)
    assert "replay_buffer_exhausted" not in got
    # the server still held it: the resume went through
    served = _rejected("1:2")[:3] + [stm(1510, "1", "STREAM_OPEN", method="GET")]
    got = findings(tmp_path / "c", sessions=[active()], streams=served, events=BUFFER)
    assert "replay_buffer_exhausted" not in got


def test_none_of_them_feeds_a_gate():
    ours = {"cursor_on_post", "resume_without_cursor", "replay_buffer_exhausted"}
    assert not ours & {d for g in GATES for d in g.detectors}
    for q in catalog.load("gates"):
        assert not any(name in q.sql for name in ours), q.name
