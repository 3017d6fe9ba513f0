"""One tool call as an SSE stream: ledger rows, events, receipts, dispatches, proxy lines.

`call` plays a POST response stream from priming event to result, with an
optional break (`Brk`) and what follows it: a resume with Last-Event-ID, a
re-POST, a rejected cursor, or nothing. Faults are the same machinery with a
wrong step in it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fleet import TOOLS, Fleet, Sess, sha


@dataclass
class Brk:
    after: int  # last seq the client received before the break
    inflight: int = 0  # events sent after `after` and lost on the wire
    mode: str = "resume"  # resume | pending | reject | repost | abandon | cursorless
    repost_key: str = "same"  # same | new | none (for mode repost)
    delay: int | None = None  # ms from DISCONNECTED to the reconnect
    cursor: str | None = None  # a Last-Event-ID other than the client's own
    ack_lag: bool = False  # the client's persisted cursor lags one event
    dedup_broken: bool = False  # the client accepts a replayed duplicate
    replay_from: int | None = None  # the server replays from here, ignoring the cursor
    cross: tuple | None = None  # (stream_id, event_id, seq, digest) replayed from elsewhere
    repost_delay: int | None = None
    at: int | None = None  # the break happens no earlier than this time
    gap_events: int = 0  # events the tool produces between the break and the reconnect
    evict_to: int | None = None  # the replay store evicts seqs up to this one before a resume


@dataclass
class CallResult:
    stream_id: str
    request_id: str
    payload: str
    key: str | None
    dispatch_id: str | None
    receipt: str | None
    events: dict  # seq -> (event_id, kind, digest)
    t_end: int
    retry: int
    repost: CallResult | None = None
    tool: str | None = None


def _kind(q: int, n: int, heartbeat: int | None) -> str:
    if q == 0:
        return "priming"
    if q == n:
        return "result"
    if q == heartbeat:
        return "heartbeat"
    return "progress" if q % 2 else "message"


def call(
    f: Fleet,
    s: Sess,
    tool_class: str,
    *,
    n: int | None = None,
    drop=(),
    heartbeat=None,
    brk: Brk | None = None,
    key="auto",
    payload=None,
    tool=None,
    outcome="executed",
    receipt=None,
    expire_before_result=False,
    priming_lost=False,
    client_cut: int | None = None,
    post_cursor=None,
    proxy_empty: bool = False,
) -> CallResult:
    """`client_cut`: the client stops reading after this seq without the server noticing
    (the server completes the stream; the client accepts nothing more). `proxy_empty`: the
    proxy passes none of the answer's bytes on (it logs a 200 event stream of 0 bytes)."""
    rng = f.rng
    rid = str(s.next_req)
    s.next_req += 1
    sid = rid
    tool = tool or rng.choice(TOOLS[tool_class])
    payload = payload or sha(f"{s.principal}|{tool}|{f.seq_no()}")
    if key == "auto":
        key = f"idem-{payload[:20]}" if tool_class in ("write", "paid") else None
    n = n or rng.randint(3, 10)
    retry = rng.choice((1000, 2000, 3000))
    t = s.t
    f.proxy(
        t,
        "POST",
        200,
        s,
        jsonrpc_method="tools/call",
        request_id=rid,
        duration=n * 200,
        last_event_id=post_cursor,
        body_bytes=0 if proxy_empty else 160 * n,
        content_type="text/event-stream",
    )
    t += f.jitter(2, 10)
    f.led_stream(
        s,
        t,
        sid,
        "STREAM_OPEN",
        method="POST",
        request_id=rid,
        payload_digest=payload,
        tool_name=tool,
        tool_class=tool_class,
        retry_ms=retry,
        lossless=not drop,
    )
    did = None
    if outcome:
        did = f.dispatch(
            t + 5,
            s=s,
            tool=tool,
            tool_class=tool_class,
            outcome=outcome,
            principal=s.principal,
            request_id=rid,
            key=key,
            payload=payload,
            receipt=receipt,
            status=409 if outcome == "idempotency_conflict" else 200,
        )
    receipt = receipt or (f"rcpt-{did}" if did else None)
    seqs = ([0] if s.resumable else []) + list(range(1, n + 1))
    events: dict = {}
    received: dict[int, str] = {}
    dropped = set(drop)
    clock = {"t": t + 8}

    def produce(q: int, disp: str) -> None:
        clock["t"] += f.jitter(30, 300)
        eid = f.eid(s, sid, q, clock["t"])
        kind = _kind(q, n, heartbeat)
        digest = sha(f"{eid}|{payload}")
        events[q] = (eid, kind, digest)
        if kind == "result" and expire_before_result:
            f.led_session(s, clock["t"], "SESSION_EXPIRED")
            clock["t"] += 10
        f.event(
            s,
            clock["t"],
            sid,
            eid,
            q,
            kind,
            disp,
            cumulative=(kind == "message") or None,
            digest=digest,
            jsonrpc_id=rid if kind == "result" else None,
            depth=rng.randint(0, 8),
        )

    def deliver(q: int, delivery="live", dup_ok=False) -> None:
        if client_cut is not None and q > client_cut:
            return
        eid, kind, digest = events[q]
        clock["t"] += f.jitter(3, 30)
        verdict = "duplicate" if (q in received and not dup_ok) else "accepted"
        out = f"out-{f.seq_no():08d}" if kind == "result" and verdict == "accepted" else None
        f.receipt(
            s,
            clock["t"],
            sid,
            eid,
            verdict,
            seq=q,
            origin=sid,
            kind=kind,
            delivery=delivery,
            digest=digest,
            jsonrpc_id=rid if kind == "result" else None,
            dispatch_id=out,
        )
        received[q] = eid

    cut = len(seqs) if brk is None else seqs.index(brk.after) + 1
    for i, q in enumerate(seqs[: cut + (brk.inflight if brk else 0)]):
        if q in dropped:
            produce(q, "dropped")
            continue
        produce(q, "sent")
        if i < cut and not (priming_lost and q == 0):
            deliver(q)
    rest = seqs[cut + (brk.inflight if brk else 0) :]
    result = CallResult(sid, rid, payload, key, did, receipt, events, clock["t"], retry, tool=tool)

    def last_sent() -> str:
        sent = [q for q in events if q not in dropped]
        return events[max(sent)][0]

    if brk is not None:
        clock["t"] = max(clock["t"] + f.jitter(5, 50), brk.at or 0)
        f.led_stream(
            s,
            clock["t"],
            sid,
            "DISCONNECTED",
            close_reason="network",
            last_sent_event_id=last_sent(),
        )
        if brk.mode in ("repost", "abandon"):
            clock["t"] += 1
            f.led_stream(s, clock["t"], sid, "CLOSED", close_reason="client_disconnect")
            s.t = result.t_end = clock["t"]
            if brk.mode == "repost":
                s.t += brk.repost_delay or f.jitter(200, 1500)
                new_key = {"same": key, "new": f"idem-{f.uid()[:20]}", "none": None}
                k2 = new_key[brk.repost_key] if tool_class != "read" else None
                hit = k2 is not None and k2 == key
                result.repost = call(
                    f,
                    s,
                    tool_class,
                    tool=tool,
                    payload=payload,
                    key=k2,
                    outcome="idempotency_hit" if hit else "executed",
                    receipt=receipt if hit else None,
                )
            return result
        if brk.mode == "cursorless":
            _cursorless_reopen(f, s, brk, sid, clock, retry, rest, dropped, produce)
            s.t = result.t_end = clock["t"]
            return result
        acked = sorted(received)
        cursor_seq = acked[-2] if brk.ack_lag and len(acked) > 1 else acked[-1]
        cursor = brk.cursor or received[cursor_seq]
        clock["t"] += brk.delay if brk.delay is not None else retry + f.jitter(30, 700)
        if brk.evict_to is not None:
            # A bounded replay store full of other streams' events drops this one's oldest.
            evicted_at = clock["t"] - 400
            for q in sorted(events):
                if q <= brk.evict_to and q not in dropped:
                    eid, kind, digest = events[q]
                    evicted_at += 1
                    f.event(s, evicted_at, sid, eid, q, kind, "evicted", digest=digest, depth=256)
        f.led_stream(
            s,
            clock["t"],
            sid,
            "RESUME_PENDING",
            resume_from_event_id=cursor,
            last_acked_event_id=received[cursor_seq],
        )
        rejected = brk.mode == "reject"
        f.proxy(clock["t"] + 1, "GET", 400 if rejected else 200, s, last_event_id=cursor)
        if brk.mode == "pending":
            s.t = result.t_end = clock["t"]
            return result
        clock["t"] += f.jitter(10, 150)
        if rejected:
            f.led_stream(s, clock["t"], sid, "CURSOR_REJECTED")
            clock["t"] += 2
            f.led_stream(s, clock["t"], sid, "CLOSED", close_reason="cursor_rejected")
            s.t = result.t_end = clock["t"]
            return result
        f.led_stream(s, clock["t"], sid, "STREAM_OPEN", method="GET")
        start = brk.replay_from if brk.replay_from is not None else cursor_seq + 1
        for q in sorted(events):
            if q >= start and q not in dropped:
                eid, kind, digest = events[q]
                clock["t"] += f.jitter(2, 20)
                f.event(
                    s,
                    clock["t"],
                    sid,
                    eid,
                    q,
                    kind,
                    "replayed",
                    cumulative=(kind == "message") or None,
                    digest=digest,
                    jsonrpc_id=rid if kind == "result" else None,
                )
                deliver(q, "replay", dup_ok=brk.dedup_broken)
        if brk.cross:
            other_sid, other_eid, other_seq, other_digest = brk.cross
            clock["t"] += f.jitter(2, 20)
            # The server replays it on this stream (its log says so), the client accepts it.
            f.event(
                s, clock["t"], sid, other_eid, other_seq, "message", "replayed", digest=other_digest
            )
            clock["t"] += f.jitter(1, 5)
            f.receipt(
                s,
                clock["t"],
                sid,
                other_eid,
                "accepted",
                seq=other_seq,
                origin=other_sid,
                kind="message",
                delivery="replay",
                digest=other_digest,
            )
    for q in rest:
        if q in dropped:
            produce(q, "dropped")
        else:
            produce(q, "sent")
            deliver(q)
    clock["t"] += f.jitter(5, 40)
    f.led_stream(
        s,
        clock["t"],
        sid,
        "CLOSED",
        close_reason="completed",
        last_sent_event_id=last_sent(),
        last_acked_event_id=received[max(received)] if received else None,
    )
    s.t = clock["t"] + f.jitter(5, 20)
    result.t_end = s.t
    return result


def _cursorless_reopen(f: Fleet, s: Sess, brk: Brk, sid, clock, retry, rest, dropped, produce):
    """The tool keeps running after the break; the client re-opens the stream by a GET
    without Last-Event-ID, so the server has no position to replay from and the stream's
    events go nowhere until the client gives up on it."""
    disc = clock["t"]
    for q in rest[: brk.gap_events]:
        produce(q, "dropped" if q in dropped else "sent")
    clock["t"] = max(clock["t"], disc + retry) + f.jitter(30, 700)
    f.led_stream(s, clock["t"], sid, "RESUME_PENDING")
    f.proxy(clock["t"] + 1, "GET", 200, s)
    clock["t"] += f.jitter(10, 150)
    f.led_stream(s, clock["t"], sid, "STREAM_OPEN", method="GET")
    for q in rest[brk.gap_events :]:
        produce(q, "dropped" if q in dropped else "sent")
    clock["t"] += f.jitter(500, 3000)
    f.led_stream(s, clock["t"], sid, "CLOSED", close_reason="client_disconnect")


def sessionless_call(
    f: Fleet,
    t: int,
    principal: str,
    tool_class: str,
    *,
    broken=False,
    resend_key="same",
    addr=None,
    no_key=False,
) -> list[str]:
    """A 2026-07-28 request: no session, no resumption; a broken stream is re-sent."""
    rng = f.rng
    tool = rng.choice(TOOLS[tool_class])
    payload = sha(f"{principal}|{tool}|{f.seq_no()}")
    key = f"idem-{payload[:20]}" if tool_class != "read" and not no_key else None
    rid = str(rng.randint(1, 10_000))
    addr = addr or f"10.20.{rng.randint(0, 255)}.{rng.randint(1, 254)}"

    def request(at: int, request_id: str, status: int = 200) -> None:
        f.proxy(
            at,
            "POST",
            status,
            None,
            origin="https://app.example.com",
            protocol="2026-07-28",
            jsonrpc_method="tools/call",
            request_id=request_id,
            principal=principal,
            subject=f"sub-{principal}",
            addr=addr,
            ua="acme-agent/3.0.0",
        )

    # A client that closes the stream is logged 499 by the proxy; the server finished.
    request(t, rid, 499 if broken else 200)
    did = f.dispatch(
        t + 5,
        s=None,
        tool=tool,
        tool_class=tool_class,
        outcome="executed",
        principal=principal,
        request_id=rid,
        key=key,
        payload=payload,
        status=499 if broken else 200,
        server_status=200,
    )
    ids = [did]
    if broken:
        t2 = t + f.jitter(1500, 4000)
        rid2 = str(rng.randint(10_001, 20_000))
        k2 = {"same": key, "new": f"idem-{f.uid()[:20]}", "none": None}[resend_key]
        if tool_class == "read":
            k2 = None
        hit = k2 is not None and k2 == key
        request(t2, rid2)
        ids.append(
            f.dispatch(
                t2 + 5,
                s=None,
                tool=tool,
                tool_class=tool_class,
                outcome="idempotency_hit" if hit else "executed",
                principal=principal,
                request_id=rid2,
                key=k2,
                payload=payload,
                receipt=f"rcpt-{did}" if hit else None,
            )
        )
    return ids
