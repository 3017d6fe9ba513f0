"""`undelivered_result` and its gate `lost_responses` on hand-built cases: each basis (the
server's event log, the client's receipts, a proxy's empty event stream) fires, its near
misses do not, the time of the break against the time of the result never matters, and a
stage no source can judge is insufficient, never a pass."""

from __future__ import annotations

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.queries import gates as gm

from .test_detectors_focused import (
    T,
    active,
    ev,
    evaluated_stage,
    findings,
    px,
    rc,
    stage_start,
    stm,
)

SSE = "text/event-stream"
START = stage_start("write")
COHORT = active(rollout_stage="s")


def _call(sid="1", t0=0, end="DISCONNECTED", result_at=500, reason="client_disconnect", **kw):
    """A POST stream: priming, a progress event, its result at `result_at`, and its end."""
    streams = [stm(t0, sid, "STREAM_OPEN", method="POST", request_id=sid, **kw)]
    if end == "CLOSED":
        streams.append(stm(t0 + 900, sid, "CLOSED", close_reason="completed"))
    elif end:
        streams.append(stm(t0 + 300, sid, end, close_reason=reason))
    events = [
        ev(t0 + 10, sid, 0, "priming"),
        ev(t0 + 100, sid, 1, "progress"),
        ev(t0 + result_at, sid, 2, "result", jsonrpc_id=sid),
    ]
    return streams, events


@pytest.mark.parametrize("result_at", [100, 300, 301, 5000])
def test_server_basis_whatever_the_timestamps(tmp_path, result_at):
    """The stream ended without its completed row and the result, produced before, at or
    after the break, was never replayed: one finding, basis server. The time of the
    break against the time of the result never decides."""
    streams, events = _call(result_at=result_at)
    got = findings(tmp_path, sessions=[active()], streams=streams, events=events)
    (f,) = got["undelivered_result"]
    assert (f["stream_id"], f["event_id"], f["severity"]) == ("1", "1:2", "medium")
    assert f["detail"]["basis"] == "server" and f["detail"]["bases"] == ["server"]
    assert "priming_lost" not in got


def test_server_basis_near_misses(tmp_path):
    # Completed: the answer went out.
    s1, e1 = _call("1", end="CLOSED")
    # Broken, then resumed and the result replayed.
    s2, e2 = _call("2", t0=2000)
    s2 += [
        stm(3000, "2", "RESUME_PENDING", resume_from_event_id="2:1"),
        stm(3001, "2", "STREAM_OPEN", method="GET"),
    ]
    e2 += [ev(3002, "2", 2, "result", "replayed", eid="2:2")]
    # Still open at the end of the data: in flight.
    s3, e3 = _call("3", t0=4000, end=None)
    # Broken before any result was produced (cancelled): nothing was lost.
    s4, e4 = _call("4", t0=6000)
    e4 = e4[:2]
    # The result dropped under backpressure: dropped_terminal's finding.
    s5, e5 = _call("5", t0=8000)
    e5[-1] = {**e5[-1], "disposition": "dropped"}
    got = findings(
        tmp_path,
        sessions=[active()],
        streams=s1 + s2 + s3 + s4 + s5,
        events=e1 + e2 + e3 + e4 + e5,
    )
    assert "undelivered_result" not in got
    assert [f["stream_id"] for f in got["dropped_terminal"]] == ["5"]


def test_a_write_is_high_by_its_stream_or_its_dispatch(tmp_path):
    s1, e1 = _call("1", tool_class="write")
    s2, e2 = _call("2", t0=2000)  # class only in the dispatch record
    dispatch = {
        "ts": T + 2005,
        "dispatch_id": "d2",
        "outcome": "executed",
        "tool_name": "pay",
        "tool_class": "paid",
        "session_hmac": "a" * 64,
        "generation": 1,
        "request_id": "2",
    }
    got = findings(
        tmp_path, sessions=[active()], streams=s1 + s2, events=e1 + e2, dispatches=[dispatch]
    )
    sev = {f["stream_id"]: f["severity"] for f in got["undelivered_result"]}
    assert sev == {"1": "high", "2": "high"}


def test_client_basis(tmp_path):
    """With receipts the client is the judge: a completed stream whose result it never
    received fires; one it received (also as a duplicate) does not."""
    s1, e1 = _call("1", end="CLOSED")
    s2, e2 = _call("2", t0=2000, end="CLOSED")
    receipts = [
        rc(20, "1", "1:0"),
        rc(110, "1", "1:1"),
        rc(2020, "2", "2:0"),
        rc(2110, "2", "2:1"),
        rc(2600, "2", "2:2", "duplicate"),
    ]
    got = findings(tmp_path, sessions=[active()], streams=s1 + s2, events=e1 + e2, inbox=receipts)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] == "1" and f["detail"]["basis"] == "client"


def test_proxy_basis_places_the_empty_answer_on_its_stream(tmp_path):
    """The server wrote its answer out whole (completed), the proxy served 0 bytes of an
    event stream: the proxy shows the loss. Placed on the stream by the session and the
    time the request ran (no request id in the log)."""
    s1, e1 = _call("1", t0=0, end="CLOSED")
    s2, e2 = _call("2", t0=5000, end="CLOSED")
    rows = [
        px(-5, session_hmac="a" * 64, duration_ms=950, body_bytes_sent=0, resp_content_type=SSE),
        # the other call's answer arrived
        px(
            4990, session_hmac="a" * 64, duration_ms=950, body_bytes_sent=310, resp_content_type=SSE
        ),  # fmt: skip
    ]
    got = findings(tmp_path, sessions=[active()], streams=s1 + s2, events=e1 + e2, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] == "1" and f["detail"]["bases"] == ["proxy"]


def test_proxy_basis_alone_and_its_near_misses(tmp_path):
    """On a proxy log alone an empty event stream is a lost answer only where the row shows
    the client did not end the request; one the client ended is none, and one whose row
    cannot tell is cannot_tell."""
    from replaygate.queries import runner

    rows = [
        px(
            0, session_hmac="c" * 64, body_bytes_sent=0, resp_content_type=SSE, client_closed=False
        ),  # fmt: skip
        # a JSON answer, an accepted notification, a refusal, an answer with bytes
        px(10, body_bytes_sent=0, resp_content_type="application/json", client_closed=False),
        px(20, status=202, body_bytes_sent=0, client_closed=False),
        px(30, status=404, body_bytes_sent=0, resp_content_type=SSE, client_closed=False),
        px(40, body_bytes_sent=120, resp_content_type=SSE),
        px(50, "GET", body_bytes_sent=0, resp_content_type=SSE, client_closed=False),
        # the client hung up before the first event; a row that cannot say who ended it
        px(
            60, session_hmac="e" * 64, body_bytes_sent=0, resp_content_type=SSE, client_closed=True
        ),  # fmt: skip
        px(70, session_hmac="f" * 64, body_bytes_sent=0, resp_content_type=SSE),
    ]
    got = findings(tmp_path, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] is None and f["session_hmac"] == "c" * 64
    assert f["detail"]["basis"] == "proxy" and f["severity"] == "medium"
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    try:
        cov = runner.coverage_doc(con)["undelivered_result"]
    finally:
        con.close()
    assert [(c["missing"], c["units"]) for c in cov["cannot_tell"]] == [
        ("proxy.client_closed", 1)
    ], cov


def test_an_empty_answer_the_server_never_produced_is_no_lost_result(tmp_path):
    """A client that cancelled its own request before the server answered: the proxy logs
    an empty event stream, the event log shows no result for it."""
    streams, events = _call("1")
    rows = [px(-5, session_hmac="a" * 64, duration_ms=300, body_bytes_sent=0,
               resp_content_type=SSE)]  # fmt: skip
    got = findings(tmp_path, sessions=[active()], streams=streams, events=events[:2], proxy=rows)
    assert "undelivered_result" not in got


def test_an_empty_answer_the_event_log_shows_produced_needs_no_proxy_verdict(tmp_path):
    """Where the server's log shows the answer produced, the proxy's empty event stream is
    evidence whatever its row says of who ended the request (here nothing)."""
    streams, events = _call("1", end="CLOSED")
    rows = [px(-5, session_hmac="a" * 64, duration_ms=950, body_bytes_sent=0,
               resp_content_type=SSE)]  # fmt: skip
    got = findings(tmp_path, sessions=[active()], streams=streams, events=events, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] == "1" and f["detail"]["bases"] == ["proxy"]


def test_server_and_proxy_agree_on_one_finding(tmp_path):
    streams, events = _call("1")
    rows = [px(-5, session_hmac="a" * 64, duration_ms=300, body_bytes_sent=0,
               resp_content_type=SSE)]  # fmt: skip
    got = findings(tmp_path, sessions=[active()], streams=streams, events=events, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["detail"]["bases"] == ["proxy", "server"] and f["detail"]["basis"] == "server"


def test_a_proxy_log_without_sizes_cannot_tell(tmp_path):
    """A log that does not record the answer's size or type: its POST answers are
    cannot_tell, the detector still judges the sessions the event log covers."""
    from replaygate.queries import runner

    streams, events = _call("1")
    rows = [
        px(-5, session_hmac="a" * 64, duration_ms=300),
        px(100, session_hmac="d" * 64),
        px(200, session_hmac="d" * 64, status=202),
    ]
    got = findings(tmp_path, sessions=[active()], streams=streams, events=events, proxy=rows)
    assert [f["stream_id"] for f in got["undelivered_result"]] == ["1"]
    con = dbm.connect(str(tmp_path / "t.duckdb"), read_only=True)
    try:
        cov = runner.coverage_doc(con)["undelivered_result"]
    finally:
        con.close()
    assert cov["cannot_tell"][0]["units"] == 1, cov
    assert "proxy.body_bytes_sent" in cov["cannot_tell"][0]["missing"]


def test_gate_fails_on_a_lost_answer(tmp_path):
    s1, e1 = _call("1", end="CLOSED")
    s2, e2 = _call("2", t0=2000)
    stage = evaluated_stage(
        tmp_path, sessions=[COHORT], streams=s1 + s2, events=e1 + e2, scope="write"
    )
    g = stage["by_id"]["lost_responses"]
    assert (g["status"], g["value"], g["sample"]) == ("fail", 1, 1)
    assert stage["decision"] == "ROLLBACK"


def test_gate_passes_on_delivered_answers(tmp_path):
    s1, e1 = _call("1", end="CLOSED")
    stage = evaluated_stage(tmp_path / "a", sessions=[COHORT], streams=s1, events=e1, scope="write")
    assert stage["by_id"]["lost_responses"]["status"] == "pass"
    # A proxy log that shows sizes is evidence on its own.
    rows = [px(0, body_bytes_sent=300, resp_content_type=SSE)]
    alone = evaluated_stage(tmp_path / "b", proxy=rows, scope="write")
    g = alone["by_id"]["lost_responses"]
    assert (g["status"], g["sample"]) == ("pass", 1)


def test_gate_is_insufficient_where_no_source_can_tell(tmp_path):
    """Proxy logs without sizes and no event log: nothing could show a lost answer."""
    rows = [px(0), px(10), px(20, "GET")]
    stage = evaluated_stage(tmp_path, proxy=rows, scope="write")
    g = stage["by_id"]["lost_responses"]
    assert g["status"] == "insufficient" and g["sample"] == 0, g
    assert stage["decision"] != "ROLLBACK"


def test_caddys_empty_answers_in_a_captured_log(tmp_path):
    """Caddy 2.6.2 in front of the official Python SDK under the conformance suite
    (tests/fixtures/proxy/captured): the initialize it answered 200 with 0 bytes and the
    tool call a proxy behind it dropped are its two empty event streams; the 202 with an
    empty JSON body (an accepted notification) is none."""
    from pathlib import Path

    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    log = Path(__file__).parent / "fixtures" / "proxy" / "captured" / "caddy-conformance.log"
    con = dbm.connect(str(tmp_path / "c.duckdb"))
    try:
        ingest(con, [log], Config())
        runner.analyse(con, Config())
        sized = con.execute(
            "SELECT count(*) FROM proxy WHERE body_bytes_sent = 0 AND method = 'POST'"
        ).fetchone()
        got = con.execute(
            """SELECT session_hmac IS NULL, stream_id, severity, detail->>'basis'
               FROM findings WHERE detector = 'undelivered_result' ORDER BY ts"""
        ).fetchall()
        undecided = [
            (c["missing"], c["units"])
            for c in runner.coverage_doc(con)["undelivered_result"]["cannot_tell"]
        ]
    finally:
        con.close()
    assert sized == (3,)
    # Caddy logs a client that hung up after the answer's headers (200, the bytes written)
    # as it logs an answer lost on the way: on its log alone neither empty answer (the
    # initialize, the dropped call) is a finding; both are cannot_tell.
    assert got == []
    assert undecided == [("proxy.client_closed", 2)]


def test_an_empty_answer_without_a_session_is_evidence_for_the_stream_found(tmp_path):
    """Caddy loses an initialize's answer: its log has no session (the id is only in the
    answer, never kept), the server's log shows the answer produced and the stream broken.
    One lost answer, one finding with both bases; with two broken streams opened while
    it ran it is judged alone: a unit of its own where its row shows the client did not
    end the request, else cannot_tell."""
    streams, events = _call("1")
    rows = [px(-5, duration_ms=300, body_bytes_sent=0, resp_content_type=SSE)]
    got = findings(tmp_path / "a", sessions=[active()], streams=streams, events=events, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] == "1" and f["detail"]["bases"] == ["proxy", "server"]
    s2, e2 = _call("2", t0=100)
    got = findings(
        tmp_path / "b", sessions=[active()], streams=streams + s2, events=events + e2, proxy=rows
    )
    units = sorted(str(f["stream_id"]) for f in got["undelivered_result"])
    assert units == ["1", "2"]
    rows = [{**rows[0], "client_closed": False}]
    got = findings(
        tmp_path / "c", sessions=[active()], streams=streams + s2, events=events + e2, proxy=rows
    )
    units = sorted(str(f["stream_id"]) for f in got["undelivered_result"])
    assert units == ["1", "2", "None"]


def test_an_empty_answer_goes_to_the_stream_opened_during_its_run(tmp_path):
    """Two calls of one session a few hundred ms apart (the second right after the first
    ended): the empty answer is the one whose stream opened inside its run."""
    s1, e1 = _call("1", t0=0, end="CLOSED")
    s2, e2 = _call("2", t0=400, end="CLOSED")
    rows = [px(-5, session_hmac="a" * 64, duration_ms=200, body_bytes_sent=0,
               resp_content_type=SSE)]  # fmt: skip
    got = findings(tmp_path, sessions=[active()], streams=s1 + s2, events=e1 + e2, proxy=rows)
    (f,) = got["undelivered_result"]
    assert f["stream_id"] == "1" and f["detail"]["bases"] == ["proxy"]


# A client that hangs up before the first event of its answer, as each proxy logs it (the
# server sends the answer's headers at once; the client's abort comes after them, or before
# them), and an answer delivered. Caddy logs the first as 200 with the bytes written (0),
# the second 499 (0 before 2.8); nginx 200 with `$request_completion` empty, or 499; Envoy
# the status sent and flag DC, or response code 0.
_S = T / 1000


def _caddy(t, status, size, ct=SSE):
    return {"ts": _S + t, "duration": 0.4, "status": status, "size": size,
            "request": {"method": "POST", "uri": "/mcp", "headers": {}},
            "resp_headers": {"Content-Type": [ct]} if ct else {}}  # fmt: skip


def _nginx(t, status, size, done, ct=SSE):
    return {"msec": f"{_S + t:.3f}", "request_time": "0.400", "method": "POST",
            "status": str(status), "uri": "/mcp",
            "body_bytes_sent": str(size), "resp_content_type": ct,
            "request_completion": done}  # fmt: skip


def _envoy(t, status, size, flags, ct=SSE):
    return {"start_time": f"{_S + t:.3f}", "method": "POST", "path": "/mcp",
            "response_code": str(status), "duration": "400",
            "bytes_sent": str(size), "resp_content_type": ct or "-",
            "response_flags": flags}  # fmt: skip


CANCELLED = {
    "caddy": [_caddy(1, 200, 0), _caddy(2, 200, 0), _caddy(3, 499, 0, None), _caddy(4, 0, 0, None)],
    "nginx": [_nginx(1, 200, 0, ""), _nginx(2, 200, 0, ""), _nginx(3, 499, 0, "", "")],
    "envoy": [_envoy(1, 200, 0, "DC"), _envoy(2, 200, 0, "DC"), _envoy(3, 0, 0, "DC", None)],
}
DELIVERED = {"caddy": _caddy(9, 200, 480), "nginx": _nginx(9, 200, 480, "OK"),
             "envoy": _envoy(9, 200, 480, "-")}  # fmt: skip


def _proxy_fleet(tmp_path, proxy: str, lines: list[dict]):
    import json

    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "rollout.jsonl").write_text(json.dumps(START) + "\n")
    (tmp_path / f"{proxy}.log").write_text("".join(json.dumps(x) + "\n" for x in lines))
    con = dbm.connect(str(tmp_path / "p.duckdb"))
    try:
        report = ingest(con, [tmp_path], Config())
        assert report.quarantined == 0, report.quarantine_reasons
        runner.analyse(con, Config())
        found = con.execute(
            "SELECT count(*) FROM findings WHERE detector = 'undelivered_result'"
        ).fetchone()[0]
        closed = [
            r[0] for r in con.execute("SELECT client_closed FROM proxy ORDER BY ts").fetchall()
        ]
        cov = runner.coverage_doc(con)["undelivered_result"]
        undecided = sum(c["units"] for c in cov["cannot_tell"]) if isinstance(cov, dict) else 0
        stage = gm.evaluate(con, Config())["stages"][0]
    finally:
        con.close()
    gate = next(g for g in stage["gates"] if g["id"] == "lost_responses")
    return found, closed, undecided, gate, stage["decision"]


@pytest.mark.parametrize("proxy", ["caddy", "nginx", "envoy"])
def test_a_proxy_only_fleet_whose_clients_hang_up_is_never_rolled_back(tmp_path, proxy):
    """A fleet whose only source is a proxy log, its clients cancelling their own requests
    before any event: no answer was produced that anyone lost. The empty 200s the client
    ended are no finding — where the row shows who ended them (Envoy's DC) nothing, where
    it cannot (Caddy, nginx without `$request_completion` OK) cannot_tell — and the gate
    never fails: no ROLLBACK."""
    found, closed, undecided, gate, decision = _proxy_fleet(
        tmp_path, proxy, [*CANCELLED[proxy], DELIVERED[proxy]]
    )
    assert found == 0
    assert gate["status"] != "fail" and decision != "ROLLBACK", (gate, decision)
    expected = {
        "caddy": ([None, None, True, True, None], 2),
        "nginx": ([None, None, True, False], 2),
        "envoy": ([True, True, True, False], 0),
    }[proxy]
    assert (closed, undecided) == expected
    # the delivered answer is the sample: the gate judges it, and passes
    assert (gate["status"], gate["sample"]) == ("pass", 1)


@pytest.mark.parametrize("proxy", ["nginx", "envoy"])
def test_an_empty_answer_the_client_did_not_end_is_lost_on_a_proxy_log(tmp_path, proxy):
    """nginx's `$request_completion` OK, Envoy's flags without DC: the request ended whole
    and the client got an empty event stream, an answer lost on the way."""
    lost = {"nginx": _nginx(5, 200, 0, "OK"), "envoy": _envoy(5, 200, 0, "-")}[proxy]
    found, closed, undecided, gate, decision = _proxy_fleet(
        tmp_path, proxy, [*CANCELLED[proxy], lost, DELIVERED[proxy]]
    )
    assert (found, undecided) == (1, 2 if proxy == "nginx" else 0)
    assert (gate["status"], gate["value"], gate["sample"]) == ("fail", 1, 2)
    assert decision == "ROLLBACK"
