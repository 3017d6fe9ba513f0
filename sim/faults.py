"""The fault catalogue: each fault plays a short story into the fleet and returns
the findings it must produce (side effects included), as truth expectations.

`needs` says where a fault can be placed: `resumable` (a read or write cohort),
`write` (a cohort or baseline session that may call write tools), `any`,
`sessionless` (2026-07-28 traffic), `rollback` (the hygiene window), `once`,
`unrecorded` (a session only a proxy log shows: placed like `sessionless`, staged by
window).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from replaygate.ingest.redact import hmac_hex

from .calls import Brk, call, sessionless_call
from .fleet import SEC, Fleet, Sess, origin_allowed
from .truth import BLIND_SKEW_MS


@dataclass(frozen=True)
class Fault:
    id: str
    needs: str
    seed: str
    description: str
    play: Callable


CATALOGUE: dict[str, Fault] = {}


def fault(fid: str, needs: str, seed: str, description: str):
    def deco(fn):
        CATALOGUE[fid] = Fault(fid, needs, seed, description, fn)
        return fn

    return deco


def X(
    f: Fleet,
    detector: str,
    severity: str,
    t: int,
    session: str | None,
    *,
    keyed: bool = True,
    client: bool = False,
    **unit,
) -> dict:
    """One expected finding; its stage follows the gates' rule at evidence time t.

    `unit` names finding columns, or `detail_<key>` for a key of the detail object.
    `client`: only client inbox receipts show it, so a server-only fleet expects nothing."""
    unit = {k.replace("detail_", "detail.", 1): v for k, v in unit.items()}
    if keyed:
        unit = {"session_hmac": session, **unit}
    out: dict[str, Any] = {
        "detector": detector,
        "severity": severity,
        "stage": f.stage_of(session, t),
        "unit": unit,
    }
    if client:
        out["client_only"] = True
    return out


def U(f: Fleet, detector: str, t: int, session: str | None, missing: str, file_name: str) -> dict:
    """One unit the detector must report as `cannot_tell` (its input cannot show
    `missing`), never as a finding: kept apart from the findings in truth.json."""
    return {
        "detector": detector,
        "stage": f.stage_of(session, t),
        "missing": missing,
        "file": file_name,
        "undecided": True,
    }


def stream_unit(s: Sess, stream_id: str) -> dict:
    return {"generation": s.gen, "stream_id": stream_id}


Found = tuple[str, str] | tuple[str, str, dict[str, Any]]


def on_stream(f: Fleet, s: Sess, r: Any, *found: Found) -> list[dict[str, Any]]:
    """The findings of call `r`'s stream at its end: `found` is (detector, severity) or
    (detector, severity, further unit columns and `X` options)."""
    u = stream_unit(s, r.stream_id)
    return [X(f, d[0], d[1], r.t_end, s.hmac, **u, **(d[2] if len(d) > 2 else {})) for d in found]


def dead_post(f: Fleet, s: Sess) -> None:
    """The client's next tool call on its session after the session ended: answered 404."""
    f.proxy(s.t, "POST", 404, s, jsonrpc_method="tools/call", request_id=str(s.next_req))


def session(f: Fleet, t: int, cohort, resumable: bool, principal=None, **kw) -> Sess:
    return f.new_session(t, cohort, resumable=resumable, principal=principal, **kw)


def one_call(
    fid: str,
    needs: str,
    seed: str,
    description: str,
    *found: Found,
    tool_class: str = "read",
    end: str = "delete",
    **call_kw: Any,
) -> None:
    """Declare a fault that is one call on a session of its own (resumable when the fault
    `needs` a resumable cohort), the session then deleted or expired (`end`), and whose
    findings all fall on that call's stream at its end: `found` is (detector, severity)
    or (detector, severity, further unit columns)."""

    def play(f: Fleet, t: int, cohort: Any, resumable: bool) -> list[dict[str, Any]]:
        s = session(f, t, cohort, True if needs == "resumable" else resumable)
        r = call(f, s, tool_class, **call_kw)
        getattr(f, end)(s)
        return on_stream(f, s, r, *found)

    CATALOGUE[fid] = Fault(fid, needs, seed, description, play)


# -- streams and replay (seeds 002, 004) -------------------------------------------------
one_call(
    "progress_dropped",
    "any",
    "002",
    "backpressure drops two progress events: a benign gap",
    ("replay_gap", "low"),
    n=8,
    drop={3, 5},
)


one_call(
    "cumulative_dropped",
    "any",
    "002",
    "backpressure drops cumulative messages; the result closes an incomplete answer",
    ("replay_gap", "high"),
    ("silent_truncation", "critical"),
    n=8,
    drop={2, 4},
)


one_call(
    "terminal_dropped",
    "any",
    "002",
    "the terminal result is dropped under backpressure",
    ("dropped_terminal", "critical"),
    ("replay_gap", "high"),
    n=6,
    drop={6},
)


one_call(
    "lossy_resume",
    "resumable",
    "002",
    "Last-Event-ID resume over a log with dropped messages: replay skips them silently",
    ("replay_gap", "high"),
    ("silent_truncation", "critical"),
    n=10,
    drop={4, 6},
    brk=Brk(after=3, inflight=3),
)


one_call(
    "priming_lost",
    "resumable",
    "004",
    "the initial empty SSE event is lost, then the stream",
    ("priming_lost", "medium"),
    n=5,
    priming_lost=True,
    brk=Brk(after=0, mode="repost"),
)


@fault(
    "crossed_event_ids",
    "resumable",
    "004",
    "a resume replays an event of another stream and the client accepts it",
)
def _crossed(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    a = call(f, s, "read", n=6)
    eid, _, digest = a.events[4]
    b = call(f, s, "read", n=6, brk=Brk(after=2, cross=(a.stream_id, eid, 4, digest)))
    f.delete(s)
    return on_stream(f, s, b, ("cross_stream_acceptance", "critical", {"event_id": eid}))


one_call(
    "replay_after_ack",
    "resumable",
    "004",
    "the server replays events the client acknowledged",
    ("replay_after_ack", "low"),
    n=8,
    brk=Brk(after=4, replay_from=3),
)


@fault(
    "wrong_last_event_id",
    "resumable",
    "004",
    "the client presents an incorrect Last-Event-ID; the server rejects the cursor",
)
def _wrong_cursor(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    r = call(f, s, "read", n=8, brk=Brk(after=3, mode="reject", cursor=f"bogus-{f.uid()}"))
    f.delete(s)
    return on_stream(f, s, r, ("cursor_rejected", "low"))


@fault(
    "cursor_misrouted",
    "resumable",
    "004",
    "the server resumes a stream from another stream's Last-Event-ID",
)
def _misrouted(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    a = call(f, s, "read", n=4)
    b = call(f, s, "read", n=6, brk=Brk(after=3, cursor=a.events[4][0]))
    f.delete(s)
    return on_stream(f, s, b, ("cursor_misrouted", "critical"))


@fault(
    "cursor_on_post",
    "any",
    "004",
    "the client puts its last event id on its next POST and never on a reconnecting GET",
)
def _cursor_on_post(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    a = call(f, s, "read", n=5)
    posted = s.t
    call(f, s, "read", n=4, post_cursor=a.events[max(a.events)][0])
    f.delete(s)
    return [X(f, "cursor_on_post", "low", posted, s.hmac)]


one_call(
    "resume_without_cursor",
    "resumable",
    "004",
    "the client re-opens a broken stream without Last-Event-ID: events sent in the gap are lost",
    ("resume_without_cursor", "medium"),
    # The re-opened stream carries the rest nowhere: the answer is produced and lost.
    ("undelivered_result", "medium"),
    n=8,
    brk=Brk(after=3, inflight=1, mode="cursorless", gap_events=2),
)


one_call(
    "replay_buffer_exhausted",
    "resumable",
    "002",
    "a bounded replay store evicts the client's cursor before it reconnects: resume rejected",
    ("replay_buffer_exhausted", "high", {"detail_events_lost": 2}),
    ("cursor_rejected", "low"),
    n=8,
    brk=Brk(after=3, inflight=2, mode="reject", evict_to=4),
)


one_call(
    "slow_recovery",
    "resumable",
    "004",
    "a broken stream takes 9 s to reopen",
    ("slow_recovery", "medium"),
    n=6,
    brk=Brk(after=3, delay=9 * SEC),
)


one_call(
    "unrecovered_stream",
    "resumable",
    "004",
    "a resume is asked for and never completes",
    ("unrecovered_stream", "medium"),
    end="expire",
    n=6,
    brk=Brk(after=3, mode="pending"),
)


one_call(
    "retry_not_honored",
    "resumable",
    "004",
    "the client reconnects before the server's retry",
    ("retry_not_honored", "low"),
    n=6,
    brk=Brk(after=3, delay=150),
)


@fault(
    "duplicate_delivery",
    "resumable",
    "004",
    "the client's dedup fails: a replayed progress event is accepted twice",
)
def _dup_delivery(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    r = call(f, s, "read", n=6, brk=Brk(after=3, ack_lag=True, dedup_broken=True))
    f.delete(s)
    u = {"event_id": r.events[3][0], "client": True}
    return on_stream(f, s, r, ("duplicate_delivery_accepted", "high", u))


@fault(
    "inbox_double_dispatch",
    "resumable",
    "004",
    "a replayed result is accepted twice and the client dispatches the business action twice",
)
def _inbox_double(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    r = call(f, s, "read", n=5, brk=Brk(after=5, ack_lag=True, dedup_broken=True))
    f.delete(s)
    u = {"event_id": r.events[5][0], "client": True}
    return on_stream(
        f,
        s,
        r,
        ("duplicate_delivery_accepted", "high", u),
        ("duplicate_dispatch", "critical", {**u, "detail_basis": "inbox"}),
    )


# -- sessions and HTTP (seed 004) ---------------------------------------------------------
@fault(
    "expiry_race",
    "any",
    "004",
    "the session expires while the result is in flight; the client accepts it anyway",
)
def _expiry_race(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "read", n=5, expire_before_result=True)
    return [X(f, "session_after_terminal", "critical", r.t_end, s.hmac, client=True)]


def _delete_answered(status: int):
    """A session's DELETE answered `status` (no session ended), its ledger's TERMINATED
    all the same: a fabricated end."""

    def play(f, t, cohort, resumable):
        s = session(f, t, cohort, resumable)
        call(f, s, "read")
        f.delete(s, status=status)
        return [X(f, "delete_fabricated", "medium", s.t, s.hmac)]

    return play


fault(
    "delete_response_lost",
    "any",
    "004",
    "the DELETE response is lost (504) but the ledger records TERMINATED",
)(_delete_answered(504))
fault(
    "delete_405_fabricated",
    "any",
    "004",
    "DELETE answered 405 is turned into a fabricated TERMINATED",
)(_delete_answered(405))


@fault(
    "old_token_new_session",
    "any",
    "004",
    "after re-initializing, the client keeps sending its old token",
)
def _old_token(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable, principal=f"user-f{f.seq_no()}")
    call(f, s, "read")
    f.expire(s)
    s.t += 2 * SEC
    dead_post(f, s)
    f.led_session(s, s.t + 2, "REINITIALIZE_REQUIRED")
    s2 = f.reinit(s, s.t + 500)
    s2.t += 300
    f.proxy(s2.t, "POST", 200, s2, jsonrpc_method="tools/list", request_id="1", subject=s.subject)
    s2.next_req = 2
    call(f, s2, "read")
    f.delete(s2)
    return [X(f, "auth_subject_mismatch", "critical", s2.t, s2.hmac, detail_auth_subject=s.subject)]


@fault("missing_version_header", "any", "004", "requests on a session lack MCP-Protocol-Version")
def _missing_version(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    s.missing_version = True
    call(f, s, "read")
    f.delete(s)
    return [X(f, "missing_protocol_version", "low", s.t, s.hmac)]


@fault(
    "proxy_modified_origin",
    "any",
    "004",
    "a proxy rewrites Origin to its own upstream name and the server accepts it",
)
def _proxy_origin(f, t, cohort, resumable):
    f.capture = []
    s = session(f, t, cohort, resumable, origin="http://mcp-upstream.internal:8080")
    call(f, s, "read")
    f.delete(s)
    rows, f.capture = f.capture, None
    if f.allowlist is None:
        return []  # no allow-list configured: a foreign Origin cannot be judged
    return [
        X(
            f,
            "invalid_origin_accepted",
            "critical",
            r["t"],
            r["session"],
            ts=r["t"],
            detail_origin=r["origin"],
        )
        for r in rows
    ]


@fault(
    "origin_refused_not_403",
    "any",
    "004",
    "bad Origins refused before the Origin check: 421 for the Host, 400/404 by session "
    "routing; the CORS preflight answered by the framework, a 502 from the proxy",
)
def _origin_refused_not_403(f, t, cohort, resumable):
    rng = f.rng
    bad = "https://rebind.attacker.example"
    addr = f"172.17.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    probe = {"origin": bad, "protocol": None, "addr": addr, "ua": "Mozilla/5.0"}
    f.proxy(t, "OPTIONS", 204, None, **probe)  # not an MCP request: neither refused nor served
    out = []
    for i, status in enumerate((421, 400, 404)):
        ts = t + 50 * (i + 1)
        f.proxy(ts, "POST", status, None, jsonrpc_method="initialize", request_id="0", **probe)
        if f.allowlist is not None:
            out.append(X(f, "origin_refused_not_403", "low", ts, None, ts=ts, detail_status=status))
    f.proxy(t + 300, "POST", 502, None, jsonrpc_method="initialize", **probe)  # cannot tell
    return out


@fault(
    "allowed_origin_refused",
    "any",
    "004",
    "a release's Host/Origin check refuses a client on the allow-list (421) and one without "
    "an Origin (403)",
)
def _allowed_origin_refused(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    call(f, s, "read")
    out = []
    for status, origin in ((421, "auto"), (403, None)):
        s.t += f.jitter(200, 900)
        f.proxy(s.t, "POST", status, s, origin=origin, jsonrpc_method="tools/call", request_id="9")
        # The 421 carries the session's Origin: with no allow-list configured only loopback
        # is allowed, and a foreign one (https://app.example.com) refused is no finding.
        if origin is None or origin_allowed(s.origin, f.allowlist):
            out.append(X(f, "allowed_origin_refused", "high", s.t, s.hmac, ts=s.t))
    f.delete(s)
    return out


@fault("reinit_missing", "any", "004", "after a 404 the client keeps using the dead session")
def _reinit_missing(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable, principal=f"user-f{f.seq_no()}")
    call(f, s, "read")
    f.expire(s)
    out = []
    for _ in range(2):
        s.t += f.jitter(2 * SEC, 5 * SEC)
        dead_post(f, s)
        out.append(X(f, "reinit_missing", "high", s.t, s.hmac, ts=s.t))
    # the first 404 was followed by a request on the dead session, the second was not
    out[0]["unit"]["detail.reason"] = "not re-initialized, and used after the 404"
    out[1]["unit"]["detail.reason"] = "not re-initialized"
    return out


@fault(
    "reinit_shared_client",
    "any",
    "004",
    "Node clients behind one address (`User-Agent: node`, no principal logged): a 404 while "
    "another of their sessions is live cannot be tied to its client, nor one a redacting "
    "proxy log hides the session of; a lone one that never re-initializes is found",
)
def _reinit_shared_client(f, t, cohort, resumable):
    rng = f.rng
    shared = (f"10.99.{rng.randint(0, 255)}.{rng.randint(1, 254)}", "node")
    a = session(f, t, cohort, resumable, client_at=shared)
    b = session(f, t + f.jitter(50, 400), cohort, resumable, client_at=shared)
    # A client alone at its address and User-Agent, which will never initialize again.
    lone = (f"10.98.{rng.randint(0, 255)}.{rng.randint(1, 254)}", "node")
    c = session(f, t + f.jitter(50, 400), cohort, resumable, client_at=lone)
    call(f, a, "read")
    call(f, b, "read")
    call(f, c, "read")
    f.expire(a)
    a.t = max(a.t, b.t) + f.jitter(SEC, 3 * SEC)
    dead_post(f, a)
    f.stats[f.stage_of(a.hmac, a.t)].undecided_404 += 1
    # b is still in use after a's 404; a's client initializes again: whose initialize
    # that is cannot be told, so a's 404 is neither a finding nor a pass.
    b.t = a.t + f.jitter(100, 400)
    call(f, b, "read")
    a2 = f.reinit(a, a.t + f.jitter(200, 900))
    f.expire(a2, idle_ms=5_000)
    # Only a redacting proxy logged a2's next request: its 404 names no session.
    a2.t += f.jitter(2 * SEC, 5 * SEC)
    f.proxy(
        a2.t,
        "POST",
        404,
        a2,
        session=False,
        jsonrpc_method="tools/call",
        request_id=str(a2.next_req),
        file_name="proxy-redacted.jsonl",
    )
    f.stats[f.stage_of(None, a2.t)].hidden_404 += 1
    a3 = f.reinit(a2, a2.t + f.jitter(200, 900))
    f.delete(a3)
    f.delete(b)
    f.expire(c)
    c.t += f.jitter(2 * SEC, 5 * SEC)
    dead_post(f, c)
    return [X(f, "reinit_missing", "high", c.t, c.hmac, ts=c.t, detail_reason="not re-initialized")]


@fault(
    "state_violation_session",
    "any",
    "004",
    "the session ledger jumps from SESSION_ACTIVE to TERMINATED",
)
def _state_session(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    call(f, s, "read")
    s.t += 500
    f.proxy(s.t, "DELETE", 200, s)
    f.led_session(s, s.t + 3, "TERMINATED")
    return [X(f, "state_violation", "medium", s.t + 3, s.hmac, ts=s.t + 3, stream_id=None)]


@fault(
    "state_violation_stream",
    "any",
    "004",
    "the stream ledger goes STREAM_OPEN -> RESUME_PENDING without a disconnect",
)
def _state_stream(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    sid = str(s.next_req)
    s.next_req += 1
    f.proxy(s.t, "POST", 200, s, jsonrpc_method="tools/call", request_id=sid)
    f.led_stream(
        s,
        s.t + 2,
        sid,
        "STREAM_OPEN",
        method="POST",
        request_id=sid,
        tool_name="get_status",
        tool_class="read",
        retry_ms=1000,
    )
    t_bad = s.t + 900
    f.led_stream(s, t_bad, sid, "RESUME_PENDING", resume_from_event_id=None)
    f.led_stream(s, t_bad + 40, sid, "STREAM_OPEN", method="GET")
    f.led_stream(s, t_bad + 90, sid, "CLOSED", close_reason="completed")
    s.t = t_bad + 100
    f.delete(s)
    return [
        X(f, "state_violation", "medium", t_bad, s.hmac, generation=s.gen, stream_id=sid, ts=t_bad)
    ]


@fault("raw_session_id_logged", "once", "004", "an edge proxy logs the raw Mcp-Session-Id header")
def _raw_id(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    s.raw_logged = True
    call(f, s, "read")
    f.delete(s)
    return [
        X(
            f,
            "raw_session_id_logged",
            "critical",
            s.t,
            None,
            keyed=False,
            detail_file="proxy-edge.jsonl",
        )
    ]


def _storm(reopen: Callable[[Fleet, int, Sess, int], None], opens: bool = False) -> Callable:
    """Three sessions re-open their streams 60 times within one 10-second bucket
    (`reopen(f, t, session, i)`: the i-th re-open at t), then end. `opens`: each session
    first opens its standalone GET stream (an open, not a reconnect)."""

    def play(f, t, cohort, resumable):
        sessions = [session(f, t + i * 100, cohort, resumable) for i in range(3)]
        for s in sessions if opens else ():
            f.proxy(s.t, "GET", 200, s)
        bucket = (max(x.t for x in sessions) // 10_000 + 2) * 10_000
        for i in range(60):
            reopen(f, bucket + i * 150, sessions[i % 3], i)
        for s in sessions:
            s.t = bucket + 10_000
            f.delete(s)
        return [X(f, "reconnect_storm", "high", bucket, None, keyed=False, ts=bucket)]

    return play


fault("reconnect_storm", "any", "004", "a burst of reconnects answered 429 and 503")(
    _storm(
        lambda f, t, s, i: f.proxy(
            t, "GET", 429 if i % 2 else 503, s, last_event_id=f"{i}:1", retry_after=5
        )
    )
)
fault(
    "cursorless_reopen_storm",
    "any",
    "004",
    "standalone GET streams without a priming event re-opened without Last-Event-ID, all at once",
)(_storm(lambda f, t, s, i: f.proxy(t, "GET", 200, s), opens=True))  # re-opened, no cursor


@fault(
    "obsolete_resume",
    "sessionless",
    "000",
    "a 2026-07-28 client sends Last-Event-ID, which that revision no longer has",
)
def _obsolete(f, t, cohort, resumable):
    principal = f"svc-f{f.seq_no()}"
    f.proxy(
        t,
        "GET",
        405,
        None,
        protocol="2026-07-28",
        last_event_id="7:3",
        principal=principal,
        subject=f"sub-{principal}",
        addr="10.30.0.9",
        ua="acme-agent/3",
    )
    return [X(f, "obsolete_resume", "low", t, None, keyed=False, detail_client=principal)]


# -- dispatches and idempotency (seeds 000, 004) ------------------------------------------
@fault(
    "new_key_on_resend",
    "write",
    "000",
    "after a broken stream the client re-sends a write with a new idempotency key",
)
def _new_key(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "write", n=5, brk=Brk(after=2, mode="repost", repost_key="new"))
    f.delete(s)
    return [
        X(
            f,
            "duplicate_dispatch",
            "critical",
            r.t_end,
            s.hmac,
            dispatch_id=r.dispatch_id,
            detail_basis="retry",
        )
    ]


@fault(
    "new_key_on_resend_sessionless",
    "sessionless",
    "000",
    "a 2026-07-28 client re-sends a paid call with a new key after the stream broke",
)
def _new_key_sl(f, t, cohort, resumable):
    ids = sessionless_call(f, t, f"svc-f{f.seq_no()}", "paid", broken=True, resend_key="new")
    return [
        X(f, "duplicate_dispatch", "critical", t, None, dispatch_id=ids[0], detail_basis="retry")
    ]


@fault(
    "no_key_resend",
    "sessionless",
    "000",
    "a write is sent with no idempotency key and re-sent after a broken stream",
)
def _no_key(f, t, cohort, resumable):
    ids = sessionless_call(
        f, t, f"svc-f{f.seq_no()}", "write", broken=True, resend_key="none", no_key=True
    )
    return [
        X(f, "duplicate_dispatch", "critical", t, None, dispatch_id=ids[0], detail_basis="retry"),
        X(f, "missing_idempotency_key", "high", t, None, dispatch_id=ids[0]),
        X(f, "missing_idempotency_key", "high", t, None, dispatch_id=ids[1]),
    ]


@fault(
    "blind_resend",
    "write",
    "000",
    "a client cuts a keyless write's stream unnoticed and re-sends the same call: "
    "executed twice, and every server-side source says the first completed",
)
def _blind_resend(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "write", n=5, key=None, client_cut=2)
    s.t += f.jitter(300, 5 * SEC)
    again = call(f, s, "write", n=5, key=None, tool=r.tool, payload=r.payload)
    f.delete(s)
    return [
        X(
            f,
            "duplicate_dispatch",
            "high",
            r.t_end,
            s.hmac,
            dispatch_id=r.dispatch_id,
            detail_basis="suspected",
        ),
        X(f, "missing_idempotency_key", "high", r.t_end, s.hmac, dispatch_id=r.dispatch_id),
        X(
            f,
            "missing_idempotency_key",
            "high",
            again.t_end,
            s.hmac,
            dispatch_id=again.dispatch_id,
        ),
        # The client's inbox shows the answer it never got.
        *on_stream(
            f,
            s,
            r,
            ("replay_gap", "high", {"client": True}),
            ("undelivered_result", "high", {"client": True}),
        ),
    ]


one_call(
    "answer_lost_after_hang_up",
    "write",
    "000",
    "the client hangs up while a write runs and never resumes; the server then produces its "
    "answer, which no one receives",
    ("undelivered_result", "high"),
    tool_class="write",
    n=5,
    brk=Brk(after=2, inflight=3, mode="abandon"),
)


one_call(
    "answer_dropped_by_proxy",
    "any",
    "000",
    "the server writes its whole answer out, the proxy passes none of it on (a 200 event "
    "stream of 0 bytes in its log); the client times out",
    # The client received nothing, so its session has no receipt to judge by: the proxy
    # alone shows the loss (the server wrote the answer out and completed the stream).
    ("undelivered_result", "medium"),
    n=4,
    client_cut=-1,
    proxy_empty=True,
)


# -- answers lost past a proxy, seen by its own log alone (seed 000) ----------------------
# A session on an upstream that runs without the recorder: no ledger, no event log, only
# the proxy's own access log, in the format docs/sources.md gives for it (session HMACs, no
# raw id). Four calls: an answer lost on the way (the upstream closed after the answer's
# headers, before its first event), a call the client cancels after those headers, one it
# hangs up on before them, and one delivered. Each line is what that proxy prints for it:
#
# - nginx 1.22 (checked against the binary, tests/test_nginx_completion.py): the lost
#   answer is `200`, `$body_bytes_sent` 0 and `$request_completion` "OK"; the client that
#   left after the headers `200`, 0, "" (cannot tell); before them `499`
#   (NGX_HTTP_CLIENT_CLOSED_REQUEST), "".
# - Envoy (access-log command operators): `%RESPONSE_FLAGS%` "-" when no flag was set,
#   `DC` "downstream connection termination"; `%RESPONSE_CODE%` 0: "the server never
#   sent the beginning of a response ... the (downstream) client disconnected"; "-" for
#   every value not set.
# - Caddy 2.6 (its default JSON access log behind the redacting filter of
#   docs/sources.md; tests/fixtures/proxy/captured/caddy-ts-redacted.log): the lost answer
#   and the client that left after the headers are both `200` with `size` 0, which no
#   field tells apart (cannot tell); the client that left before them status 0 (499 from
#   Caddy 2.8: caddyserver/caddy reverseproxy/client_disconnect_test.go).
UNRECORDED_UPSTREAM = "10.0.3.7:8000"
SSE = "text/event-stream"


def _nginx_line(t, dur, status, size, done, *, hm="", ua, addr, ct=SSE, proto="", new=""):
    return {
        "msec": f"{(t + dur) / 1000:.3f}",
        "request_time": f"{dur / 1000:.3f}",
        "method": "POST",
        "uri": "/mcp",
        "status": str(status),
        "origin": "",
        "mcp_session_hmac": hm,
        "mcp_protocol_version": proto,
        "last_event_id": "",
        "mcp_method": "",
        "user_agent": ua,
        "remote_addr": addr,
        "remote_user": "",
        "upstream": UNRECORDED_UPSTREAM,
        "retry_after": "",
        "body_bytes_sent": str(size),
        "resp_content_type": ct,
        "request_completion": done,
        "new_session": new,
    }


def _envoy_line(t, dur, status, size, flags, *, hm="-", ua, addr, ct=SSE, proto="-", new="-"):
    return {
        "start_time": f"{t / 1000:.3f}",
        "method": "POST",
        "path": "/mcp",
        "response_code": str(status),
        "duration": str(dur),
        "origin": "-",
        "mcp_session_hmac": hm,
        "mcp_protocol_version": proto,
        "last_event_id": "-",
        "mcp_method": "-",
        "user_agent": ua,
        "downstream_remote_address": addr,
        "upstream_host": UNRECORDED_UPSTREAM,
        "retry_after": "-",
        "bytes_sent": str(size),
        "resp_content_type": ct,
        "response_flags": flags,
        "new_session": new,
    }


def _caddy_line(t, dur, status, size, *, ua, addr, port, ct=SSE, proto=None, new=False):
    headers = {
        "Accept": ["application/json, text/event-stream"],
        "User-Agent": [ua],
        "Content-Type": ["application/json"],
        "Content-Length": ["180"],
    }
    if proto:
        headers["Mcp-Protocol-Version"] = [proto]
    resp: dict[str, Any] = {"Server": ["Caddy", "uvicorn"]}
    if ct:
        resp.update({"Content-Type": [ct], "Cache-Control": ["no-cache, no-transform"]})
    if new:
        resp["Mcp-Session-Id"] = "REDACTED"
    return {
        "level": "info",
        "ts": (t + dur) / 1000,
        "logger": "http.log.access.log0",
        "msg": "handled request",
        "request": {
            "remote_ip": addr,
            "remote_port": str(port),
            "proto": "HTTP/1.1",
            "method": "POST",
            "host": "mcp.example.com",
            "uri": "/mcp",
            "headers": headers,
        },
        "user_id": "",
        "duration": dur / 1000,
        "size": size,
        "status": status,
        "resp_headers": resp,
    }


def _past_proxy(f: Fleet, t: int, proxy: str) -> list[dict]:
    """The story above, told by one proxy's log; returns its expectations."""
    rng = f.rng
    file_name = f"proxy-{proxy}.jsonl"
    hm = hmac_hex(f.key, f.uid())
    ua, addr, port = "python-httpx/0.28.1", f"10.7.{rng.randint(0, 255)}.{rng.randint(1, 254)}", 0
    proto = "2025-11-25"
    # (when, duration, what happened); each call a few seconds after the last
    calls = []
    for what in ("initialize", "lost", "left_after_headers", "left_before_headers", "delivered"):
        dur = {"initialize": 40, "left_before_headers": 150}.get(what, rng.randint(300, 1500))
        calls.append((t, dur, what))
        t += dur + rng.randint(2 * SEC, 6 * SEC)
    out = []
    for when, dur, what in calls:
        port = rng.randint(40_000, 60_000)
        size = rng.randint(300, 900) if what in ("initialize", "delivered") else 0
        if proxy == "nginx":
            status, done, ct = {
                "left_after_headers": (200, "", SSE),
                "left_before_headers": (499, "", ""),
            }.get(what, (200, "OK", SSE))
            init = what == "initialize"
            line = _nginx_line(when, dur, status, size, done, hm="" if init else hm, ua=ua,
                               addr=addr, ct=ct, proto="" if init else proto,
                               new="1" if init else "")  # fmt: skip
            closed = {"OK": False, "": None}[done] if status != 499 else True
        elif proxy == "envoy":
            status, flags, ct = {
                "left_after_headers": (200, "DC", SSE),
                "left_before_headers": (0, "DC", "-"),
            }.get(what, (200, "-", SSE))
            init = what == "initialize"
            line = _envoy_line(when, dur, status, size, flags, hm="-" if init else hm, ua=ua,
                               addr=addr, ct=ct, proto="-" if init else proto,
                               new=str(rng.randint(1, 9)) if init else "-")  # fmt: skip
            closed = flags == "DC"
        else:
            status = 0 if what == "left_before_headers" else 200
            init = what == "initialize"
            line = _caddy_line(when, dur, status, size, ua=ua, addr=addr, port=port,
                               ct=None if status == 0 else SSE,
                               proto=None if init else proto, new=init)  # fmt: skip
            closed = True if status == 0 else None
        judged = status == 200 and (size > 0 or closed is False)
        f.native(file_name, line, when, judged=judged, names_session=proxy != "caddy")
        if status != 200 or size:
            continue
        if closed is False:
            # the request itself is the unit: no stream of its session to place it on
            out.append(X(f, "undelivered_result", "medium", when, hm, ts=when))
        elif closed is None:
            # Caddy's redacting format keeps no session: the unit has none
            sess = None if proxy == "caddy" else hm
            out.append(U(f, "undelivered_result", when, sess, "proxy.client_closed", file_name))
    if proxy != "caddy":
        # docs/sources.md's nginx and Envoy formats log no token subject: whether the
        # session kept one identity cannot be told from them (Caddy's keeps no session)
        t_first = calls[1][0]
        out.append(U(f, "auth_subject_mismatch", t_first, hm, "proxy.auth_subject", file_name))
    return out


_PAST_PROXY = {
    "nginx": "nginx logs 200, 0 body bytes and `$request_completion` OK (an answer lost); a "
    "client that left after the headers (200, completion empty) cannot be told from it, one "
    "that left before (499) is no loss",
    "envoy": "Envoy logs 200, 0 bytes and no flag (an answer lost); clients that hung up are "
    "flagged DC (or code 0) and are no loss",
    "caddy": "Caddy logs 200 with size 0, the same line as a client that left after the "
    "headers: both cannot tell; one that left before them (status 0) is no loss",
}
for _proxy, _told in _PAST_PROXY.items():
    fault(
        f"answer_lost_past_{_proxy}",
        "unrecorded",
        "000",
        f"an upstream without the recorder closes after an answer's headers: {_told}",
    )(lambda f, t, cohort, resumable, proxy=_proxy: _past_proxy(f, t, proxy))


@fault(
    "key_reused_conflict",
    "write",
    "000",
    "one idempotency key sent with another payload; the server answers 409",
)
def _conflict(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "write", n=4)
    call(f, s, "write", n=3, key=r.key, tool=None, outcome="idempotency_conflict")
    f.delete(s)
    return [X(f, "idempotency_conflict", "medium", r.t_end, s.hmac, idempotency_key=r.key)]


@fault(
    "key_reused_executed",
    "write",
    "000",
    "one idempotency key sent with another payload, and the server executes it",
)
def _conflict_exec(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "write", n=4)
    call(f, s, "write", n=3, key=r.key)
    f.delete(s)
    return [X(f, "conflict_executed", "critical", r.t_end, s.hmac, idempotency_key=r.key)]


@fault(
    "key_executed_twice",
    "write",
    "000",
    "the server ignores a repeated key and executes the same payload twice",
)
def _twice(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    r = call(f, s, "write", n=4)
    call(f, s, "write", n=4, key=r.key, payload=r.payload, tool=None)
    f.delete(s)
    return [
        X(
            f,
            "duplicate_dispatch",
            "critical",
            r.t_end,
            s.hmac,
            idempotency_key=r.key,
            detail_basis="idempotency_key",
        )
    ]


# -- rollback hygiene (seed 004) ----------------------------------------------------------
@fault(
    "rollback_resumable_new_stream",
    "rollback",
    "004",
    "after the rollback a new stream is still resumed",
)
def _rb_new(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    call(f, s, "read", n=3)
    s.t = max(s.t, f.rollback_at + 5 * SEC)
    r = call(f, s, "read", n=6, brk=Brk(after=3))
    f.delete(s)
    return on_stream(f, s, r, ("rollback_resumable_new_stream", "critical"))


@fault(
    "rollback_cursor_dropped",
    "rollback",
    "004",
    "the rollback drops the cursor index of a live session: its resume is rejected",
)
def _rb_cursor(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    s.t = max(s.t, f.rollback_at - 1500)
    r = call(f, s, "read", n=8, brk=Brk(after=3, mode="reject", delay=4 * SEC))
    f.delete(s)
    return on_stream(
        f,
        s,
        r,
        ("rollback_cursor_dropped", "high"),
        ("cursor_rejected", "low"),
        # The cursor is one the server produced on that stream: its store no longer held it.
        ("replay_buffer_exhausted", "high"),
    )


@fault(
    "rollback_post_storm",
    "rollback",
    "004",
    "after the rollback an old stream is re-POSTed instead of resumed",
)
def _rb_post(f, t, cohort, resumable):
    s = session(f, t, cohort, True)
    s.t = max(s.t, f.rollback_at - 1500)
    r = call(f, s, "read", n=8, brk=Brk(after=3, mode="repost", at=f.rollback_at + 2 * SEC))
    f.delete(s)
    return on_stream(f, s, r, ("rollback_post_storm", "high"))


BLIND_PROXY = "proxy-blind.jsonl"


@fault(
    "delete_past_blind_proxy",
    "any",
    "004",
    "a second proxy, whose log keeps session ids out, carries a session's DELETE (200): "
    "the ledger's TERMINATED may be true, and a DELETE not seen in the other log is no "
    "evidence of a fabricated one",
)
def _delete_past_blind_proxy(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable)
    call(f, s, "read")
    s.t += f.jitter(100, 2000)
    f.proxy(s.t, "DELETE", 200, s, session=False, file_name=BLIND_PROXY)
    f.led_session(s, s.t + 2, "DELETE_REQUESTED")
    f.led_session(s, s.t + 4, "TERMINATED")
    t_end = s.t + 4
    s.t += 10
    return [U(f, "delete_fabricated", t_end, s.hmac, "proxy.session_hmac", BLIND_PROXY)]


BLIND_INIT_PROXY = "proxy-noinit.jsonl"


@fault(
    "reinit_past_blind_proxy",
    "any",
    "004",
    "after a 404 the client initializes again through a second proxy whose log names no "
    "JSON-RPC method (it cannot show an initialize): whether it re-initialized cannot be "
    "told, so the 404 is neither a finding nor a pass",
)
def _reinit_past_blind_proxy(f, t, cohort, resumable):
    s = session(f, t, cohort, resumable, principal=f"user-f{f.seq_no()}")
    call(f, s, "read")
    expired = f.expire(s)
    s.t += f.jitter(2 * SEC, 5 * SEC)
    dead_post(f, s)
    f.stats[f.stage_of(s.hmac, s.t)].undecided_404 += 1
    init_at = s.t + f.jitter(SEC, 5 * SEC)
    s2 = f.reinit(s, init_at, init_log=BLIND_INIT_PROXY)
    f.delete(s2)
    # The log names no session either: its request served at init_at, from the client of
    # both sessions, may have been a use of either after its end, for one that ended
    # before it, or within the clocks' skew after it (the new session, ended soon after).
    ends = ((s.hmac, expired), (s2.hmac, f.terminated_at[s2.hmac]))
    return [
        U(f, "reinit_missing", s.t, s.hmac, "re-initialize", BLIND_INIT_PROXY),
        *(
            U(f, "session_after_terminal", end, h, "use after the end", BLIND_INIT_PROXY)
            for h, end in ends
            if end - BLIND_SKEW_MS <= init_at
        ),
    ]


BLIND_LEDGER = "sessions-blind.jsonl"


@fault(
    "ledger_past_blind_server",
    "resumable",
    "004",
    "a session owned by a server whose ledger (another file) records neither resumable, "
    "the revision nor the token subject, while the other servers' ledger does: its stream "
    "loses the priming event and breaks, and its requests carry a token subject; whether "
    "a cursor was owed, and whether the subject stayed the session's, cannot be told",
)
def _ledger_past_blind_server(f, t, cohort, resumable):
    f.capture = []
    s = session(f, t, cohort, True, ledger_file=BLIND_LEDGER)
    r = call(f, s, "read", n=5, priming_lost=True, brk=Brk(after=0, mode="repost"))
    f.delete(s)
    rows, f.capture = f.capture, None
    served = min(x["t"] for x in rows if x["session"] == s.hmac and 200 <= x["status"] < 300)
    missing = "sessions.resumable|sessions.protocol_version"
    return [
        U(f, "priming_lost", r.t_end - 1, s.hmac, missing, BLIND_LEDGER),
        U(f, "auth_subject_mismatch", served, s.hmac, "sessions.auth_subject", BLIND_LEDGER),
    ]
