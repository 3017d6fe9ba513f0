"""The probe's raw Streamable HTTP client (httpx2, the HTTP library the MCP SDK uses): what
the SDK client hides — cutting a response stream after k events, presenting any
`Last-Event-ID`, a foreign `Origin` or `Host`, reusing a deleted session — with every
request marked as synthetic and held to a request budget and a rate."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2

# Every request the probe sends carries this header (and the User-Agent below), so an
# operator can tell its traffic from real clients' in any log.
PROBE_HEADER = "Replaygate-Probe"
PRINCIPAL = "replaygate-probe"
ACCEPT = "application/json, text/event-stream"


# After the deadline, the DELETEs that end the sessions the probe opened may still go out
# for this long (a probe leaves nothing behind when it can).
CLEANUP_GRACE = 5.0


class BudgetExhausted(RuntimeError):
    """The run reached its request budget: the probe stops rather than load the server."""


class DeadlineReached(RuntimeError):
    """The run's deadline passed: the probe stops instead of waiting on the endpoint."""


class Pacer:
    """A request budget, a minimum interval between requests and the run's deadline,
    shared by every connection of one probe run (threads included). Every request takes
    its turn here, so nothing starts after the deadline (but the cleanup DELETEs, for a
    short grace)."""

    def __init__(self, max_requests: int, rate: float, deadline: float | None = None) -> None:
        self.max_requests, self.interval = max_requests, 1.0 / rate
        self.deadline = deadline  # time.monotonic() by which the run ends; None: never
        self.sent = 0
        self._next = 0.0
        self._lock = threading.Lock()

    def left(self, cleanup: bool = False) -> float | None:
        """Seconds until the deadline (None: no deadline)."""
        if self.deadline is None:
            return None
        return self.deadline + (CLEANUP_GRACE if cleanup else 0.0) - time.monotonic()

    def take(self, cleanup: bool = False) -> None:
        with self._lock:
            left = self.left(cleanup)
            if left is not None and left <= 0:
                raise DeadlineReached("the probe's deadline passed")
            if self.sent >= self.max_requests and not cleanup:
                raise BudgetExhausted(f"request budget of {self.max_requests} reached")
            self.sent += 1
            now = time.monotonic()
            wait = self._next - now
            if left is not None and wait >= left:
                raise DeadlineReached("the probe's deadline passes before its next request")
            self._next = max(now, self._next) + self.interval
        if wait > 0:
            time.sleep(wait)

    def pause(self, seconds: float) -> None:
        """Sleep, but not past the deadline."""
        left = self.left()
        time.sleep(max(0.0, seconds if left is None else min(seconds, left)))


@dataclass
class Event:
    """One SSE event as received: its id, data, `retry:` and what the data says."""

    event_id: str | None
    data: str
    retry_ms: int | None = None
    doc: dict[str, Any] | None = None
    ts: int = 0  # when it arrived, Unix ms

    @property
    def kind(self) -> str:
        d = self.doc
        if not self.data.strip() or d is None:
            return "priming"
        if "result" in d:
            return "result"
        if "error" in d:
            return "error"
        if d.get("method") == "notifications/progress":
            return "progress"
        return "message"

    @property
    def answers(self) -> str | None:
        """The JSON-RPC id this event answers (result or error), as text."""
        if self.doc is not None and ("result" in self.doc or "error" in self.doc):
            rid = self.doc.get("id")
            return None if rid is None else str(rid)
        return None

    @property
    def progress_token(self) -> str | None:
        if self.doc is None or self.doc.get("method") != "notifications/progress":
            return None
        token = (self.doc.get("params") or {}).get("progressToken")
        return None if token is None else str(token)

    @property
    def digest(self) -> str:
        """message_digest: SHA-256 of the event data as received."""
        return hashlib.sha256(self.data.encode()).hexdigest()

    @property
    def content(self) -> str:
        """What this event says whichever request it belongs to: the message without its
        JSON-RPC id, progress token and _meta, so the same step of two calls of one tool
        with the same arguments compares equal (the reference answer's alignment)."""
        d = dict(self.doc or {})
        d.pop("id", None)
        params = d.get("params")
        if isinstance(params, dict):
            d["params"] = {k: v for k, v in params.items() if k not in ("progressToken", "_meta")}
        body = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode()).hexdigest()


def parse_event(fields: dict[str, str]) -> Event:
    data = fields.get("data", "")
    doc: dict[str, Any] | None = None
    if data.strip():
        try:
            parsed = json.loads(data)
        except ValueError:
            parsed = None
        doc = parsed if isinstance(parsed, dict) else None
    retry = fields.get("retry")
    return Event(fields.get("id"), data, int(retry) if retry and retry.isdigit() else None, doc)


def sse_events(lines: Iterator[str]) -> Iterator[Event]:
    """Events of an SSE body, one per blank-line-terminated block (comments skipped)."""
    cur: dict[str, str] = {}
    for raw in lines:
        line = raw.rstrip("\r\n")
        if line == "":
            if cur:
                yield parse_event(cur)
            cur = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        cur[name] = cur[name] + "\n" + value if name == "data" and name in cur else value
    if cur:
        yield parse_event(cur)


@dataclass
class Answer:
    """What one HTTP exchange returned: status, headers and the events read (all of them,
    or up to the cut)."""

    status: int
    headers: dict[str, str]
    events: list[Event] = field(default_factory=list)
    body: str = ""
    cut: bool = False  # the probe closed the connection before the stream ended
    error: str | None = None
    started: float = 0.0
    ended: float = 0.0


class Wire:
    """One MCP client session over raw HTTP."""

    def __init__(
        self,
        url: str,
        pacer: Pacer,
        *,
        run_id: str,
        version: str,
        origin: str | None,
        timeout: float = 30.0,
        agent: str = "replaygate-probe",
    ) -> None:
        self.url, self.pacer, self.version, self.origin = url, pacer, version, origin
        self.timeout = timeout
        self.session: str | None = None
        self.generation = 1  # of the session: a re-initialize opens the next one
        self.init_result: dict[str, Any] | None = None
        # What a server answers for a session it no longer knows, and who is told when a
        # request on this wire's session gets it unasked (the client MUST then start a new
        # session: the probe re-initializes, trials.Probe.session_lost).
        self.dead_statuses: tuple[int, ...] = (404,)
        self.on_dead: Callable[[Wire, str], None] | None = None
        self.base_headers = {"User-Agent": agent, PROBE_HEADER: run_id, "Accept": ACCEPT}
        self._ids = itertools.count(1)
        self.http = httpx2.Client(timeout=httpx2.Timeout(timeout, read=timeout))

    def close(self) -> None:
        self.http.close()

    def next_id(self) -> str:
        return f"rgp-{next(self._ids)}"

    def headers(self, extra: dict[str, str] | None = None, session: bool = True) -> dict[str, str]:
        h = dict(self.base_headers)
        if self.origin:
            h["Origin"] = self.origin
        if session and self.session:
            h["Mcp-Session-Id"] = self.session
            h["MCP-Protocol-Version"] = self.version
        h.update(extra or {})
        return h

    def exchange(
        self,
        method: str,
        body: dict[str, Any] | None = None,
        *,
        extra: dict[str, str] | None = None,
        session: bool = True,
        cut_after: int | None = None,
        until_answer: str | None = None,
        read_for: float | None = None,
        idle: float | None = None,
        cleanup: bool = False,
        dead_expected: bool = False,
    ) -> Answer:
        """One request; an SSE answer is read event by event: up to `cut_after` events that
        carry data (then the connection is closed), until the answer to `until_answer`, for
        at most `read_for` seconds, until it has been silent for `idle` seconds (the
        answer then ends cut, like a client that gives up on a quiet stream), or to its
        end — and never past the run's deadline. A request on the session (not its DELETE)
        answered with a dead-session status the caller did not ask for (`dead_expected`)
        ends the session: `on_dead` is told, after the answer is read."""
        sent = self.session if session else None
        ans = self._exchange(
            method,
            body,
            extra=extra,
            session=session,
            cut_after=cut_after,
            until_answer=until_answer,
            read_for=read_for,
            idle=idle,
            cleanup=cleanup,
        )
        dead = not dead_expected and ans.status in self.dead_statuses and method != "DELETE"
        if dead and sent is not None and sent == self.session and self.on_dead is not None:
            self.on_dead(self, sent)
        return ans

    def _exchange(
        self,
        method: str,
        body: dict[str, Any] | None,
        *,
        extra: dict[str, str] | None,
        session: bool,
        cut_after: int | None,
        until_answer: str | None,
        read_for: float | None,
        idle: float | None,
        cleanup: bool,
    ) -> Answer:
        self.pacer.take(cleanup)
        h = self.headers(extra, session)
        if body is not None:
            h["Content-Type"] = "application/json"
        started = time.time()
        left = self.pacer.left(cleanup)
        # A stream's whole reading ends at read_for or at the deadline, whichever is first:
        # read timeouts bound only the silence between two reads, and a server that sends
        # keep-alive comments (or trickles events without ever answering) never trips them.
        spans = [x for x in (read_for, left) if x is not None]
        span = min(spans) if spans else None
        by_deadline = left is not None and (read_for is None or left <= read_for)
        wait = self.timeout if span is None else max(0.01, min(self.timeout, span))
        if idle is not None:
            wait = min(wait, idle)
        # With read_for, no single read waits longer either: a stream that sends nothing
        # must not hold the probe for the whole timeout.
        timeout = httpx2.Timeout(wait, read=wait)
        ans = Answer(0, {}, started=started)
        stopped = threading.Event()
        watchdog: threading.Timer | None = None
        try:
            with self.http.stream(
                method,
                self.url,
                content=None if body is None else json.dumps(body),
                headers=h,
                timeout=timeout,
            ) as resp:
                ans.status, ans.headers = resp.status_code, dict(resp.headers)
                if span is not None:
                    watchdog = _watchdog(resp, max(0.01, span - (time.time() - started)), stopped)
                if "text/event-stream" not in resp.headers.get("content-type", ""):
                    ans.body = resp.read().decode("utf-8", "replace")
                    return ans
                with_data = 0
                for ev in sse_events(resp.iter_lines()):
                    ev.ts = time.time_ns() // 1_000_000
                    ans.events.append(ev)
                    if ev.data.strip():
                        with_data += 1
                    if until_answer is not None and ev.answers == until_answer:
                        break
                    if cut_after is not None and with_data >= cut_after:
                        ans.cut = True
                        break
                return ans
        except httpx2.TimeoutException as exc:
            if ans.status and (read_for is not None or idle is not None) and not by_deadline:
                ans.cut = True  # read for as long as asked: what came is the answer
            else:
                ans.error = f"timeout: {exc}"
            return ans
        except httpx2.HTTPError as exc:
            if not stopped.is_set():
                ans.error = f"{type(exc).__name__}: {exc}"
            return ans
        finally:
            if watchdog is not None:
                watchdog.cancel()
            answered = until_answer is not None and any(
                e.answers == until_answer for e in ans.events
            )
            if stopped.is_set() and not answered and not ans.cut:
                # The reading was stopped at its span: at read_for that is the answer (what
                # came is what a client waiting that long gets); at the deadline it is not.
                if read_for is not None and not by_deadline:
                    ans.cut = True
                    ans.error = None
                else:
                    ans.error = "stopped at the probe's deadline"
            ans.ended = time.time()

    def initialize(self, extra: dict[str, str] | None = None) -> Answer:
        rid = self.next_id()
        ans = self.exchange(
            "POST",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "initialize",
                "params": {
                    "protocolVersion": self.version,
                    "capabilities": {},
                    "clientInfo": {"name": PRINCIPAL, "version": _version()},
                },
            },
            extra=extra,
            session=False,
            until_answer=rid,
        )
        if 200 <= ans.status < 300:
            sid = {k.lower(): v for k, v in ans.headers.items()}.get("mcp-session-id")
            self.session = sid
            self.init_result = _answer_doc(ans, rid)
            if not self.initialized:
                # A 2xx that neither opened a session nor answered the initialize came from
                # something else (a proxy answering a Host it has no site for): nothing was
                # initialized, so nothing follows it.
                return ans
            self.exchange("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"})
            # A server acknowledges the notification (202) before it has processed it; a
            # request that overtakes it may be dropped. A ping answered means it is done.
            ping = self.next_id()
            self.exchange(
                "POST", {"jsonrpc": "2.0", "id": ping, "method": "ping"}, until_answer=ping
            )
        return ans

    @property
    def initialized(self) -> bool:
        """The MCP server answered this wire's initialize: it issued a session (its answer
        may be lost on the way while the session id in its headers is not), or it answered
        the request (a server without sessions)."""
        return bool(self.session or (self.init_result and "result" in self.init_result))

    def call(self, tool: str, arguments: dict[str, Any], rid: str, **kw: Any) -> Answer:
        return self.exchange(
            "POST",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments, "_meta": {"progressToken": rid}},
            },
            until_answer=rid,
            **kw,
        )

    def delete(self) -> Answer:
        return self.exchange("DELETE", cleanup=True)

    def resume(self, cursor: str, **kw: Any) -> Answer:
        return self.exchange("GET", extra={"Last-Event-ID": cursor}, **kw)


def _watchdog(resp: httpx2.Response, seconds: float, stopped: threading.Event) -> threading.Timer:
    """Shut the response's socket after `seconds`: the blocked read returns at once, where
    closing the response from another thread could wait on the reader's own lock."""
    stream = resp.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None

    def stop() -> None:
        stopped.set()
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    return timer


def _answer_doc(ans: Answer, rid: str) -> dict[str, Any] | None:
    for ev in ans.events:
        if ev.answers == rid and ev.doc is not None:
            return ev.doc
    if ans.body:
        try:
            doc = json.loads(ans.body)
        except ValueError:
            return None
        return doc if isinstance(doc, dict) else None
    return None


def _version() -> str:
    from replaygate import __version__

    return __version__
