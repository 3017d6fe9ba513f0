"""Normal fleet traffic: sessions living their ordinary lives, sessionless requests.

Nothing here may trip a detector; the test suite checks that a fleet with no
faults yields no findings at all.
"""

from __future__ import annotations

from .calls import Brk, call, sessionless_call
from .fleet import SEC, Fleet, Sess


def tool_classes_for(f: Fleet, cohort: str | None) -> tuple[str, ...]:
    if cohort is None:
        return ("read", "read", "write", "paid")
    scope = f.stage_named(cohort).scope
    return ("read",) if scope in ("shadow", "read") else ("read", "read", "write", "paid")


def normal_calls(f: Fleet, s: Sess, k: int, *, allow_resume=True) -> None:
    rng = f.rng
    classes = tool_classes_for(f, s.cohort)
    for _ in range(k):
        tc = rng.choice(classes)
        brk = None
        n = rng.randint(3, 10)
        heartbeat = rng.randint(2, n - 1) if n > 3 and rng.random() < 0.15 else None
        drop = {heartbeat} if heartbeat and rng.random() < 0.5 else ()
        if rng.random() < 0.15:
            first = 0 if s.resumable else 1
            after = rng.randint(first + 1, n - 1) if n - 1 > first else first
            if after == heartbeat:
                heartbeat, drop = None, ()
            if s.resumable and allow_resume:
                brk = Brk(
                    after=after, inflight=rng.choice((0, 0, 1, 2)), ack_lag=rng.random() < 0.3
                )
            else:
                brk = Brk(after=after, mode="repost")
        call(f, s, tc, n=n, brk=brk, heartbeat=heartbeat, drop=drop)
        s.t += f.jitter(500, 15 * SEC)


def normal_session(f: Fleet, t: int, cohort: str | None, *, resumable: bool) -> None:
    rng = f.rng
    s = f.new_session(t, cohort, resumable=resumable)
    normal_calls(f, s, rng.randint(1, 5))
    end = rng.random()
    if end < 0.5:
        f.delete(s)
    elif end < 0.7:
        f.expire(s)
    elif end < 0.85:
        # Expired while idle; the next request gets 404 and the client re-initializes.
        f.expire(s)
        s.t += f.jitter(1 * SEC, 30 * SEC)
        f.proxy(s.t, "POST", 404, s, jsonrpc_method="tools/call", request_id=str(s.next_req))
        f.led_session(s, s.t + 2, "REINITIALIZE_REQUIRED")
        s2 = f.reinit(s, s.t + f.jitter(50, 3 * SEC))
        normal_calls(f, s2, rng.randint(1, 3))
        f.delete(s2)
    elif end < 0.9:
        # A DELETE on an already expired session: 404, and no re-initialize is due.
        f.expire(s)
        s.t += f.jitter(1 * SEC, 20 * SEC)
        f.proxy(s.t, "DELETE", 404, s)
    # else: still active when the data ends


def refused_origin(f: Fleet, t: int) -> None:
    """A browser page on a foreign origin probing the server: its CORS preflight answered
    by the web framework (not an MCP request), then the request refused with 403."""
    rng = f.rng
    origin = rng.choice(("https://evil.example", "null"))
    addr = f"172.16.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    if origin != "null":  # a page's fetch preflights; an opaque origin's form post does not
        f.proxy(
            t - 5, "OPTIONS", 204, None, origin=origin, protocol=None, addr=addr, ua="Mozilla/5.0"
        )
    f.proxy(
        t,
        "POST",
        403,
        None,
        origin=origin,
        jsonrpc_method="initialize",
        request_id="0",
        protocol=None,
        addr=addr,
        ua="Mozilla/5.0",
    )


def sessionless(f: Fleet, t: int) -> None:
    rng = f.rng
    principal = f"svc-{rng.randint(1, 60):03d}"
    tc = rng.choice(("read", "write", "paid"))
    sessionless_call(f, t, principal, tc, broken=rng.random() < 0.2)
