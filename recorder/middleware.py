"""ASGI middleware that writes the session and stream ledgers and the dispatch records
around the SDK's app.

Per request it puts a holder (the session id) in the recorder's context variable, so
the event store can attribute events, and watches the exchange: a new Mcp-Session-Id
in a response opens a session; a successful DELETE ends it; a POST answered with an
SSE stream opens a stream (stream id = the JSON-RPC request id, as in the SDK). A GET
with Last-Event-ID resumes one: STREAM_OPEN when the event store replayed from the
cursor, CURSOR_REJECTED (with the cursor) when it no longer held it — the SDK answers
both with an event stream. A GET without Last-Event-ID after a stream of the session
broke re-opens that stream without a cursor (RESUME_PENDING, STREAM_OPEN). A stream that
ends after its result is CLOSED; one that ends before it is DISCONNECTED: cut by the
client (`client_disconnect`), closed by the server to make the client reconnect
(`server_close`: the response ended on purpose), or broken under it (`network`). The SSE
`retry` a stream's priming event really carried is written on the row that ends the
stream, never assumed from the configuration (the SDK sends no priming event below
protocol 2025-11-25). Every tools/call gets a dispatch
record when its outcome is known: when its result is stored (even if the client is gone
by then), else at the end of the response that carried it. The raw session id is only
ever hashed.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Callable

from .ledger import LedgerWriter, now_ms, payload_digest
from .store import RecordingEventStore, current

_BODY_LIMIT = 1 << 20  # response bytes kept to read a JSON answer's outcome
# An SSE `retry:` field (the priming event's reconnection delay, in ms).
_RETRY = re.compile(rb"(?m)^retry:[ ]?(\d+)\s*$")


def _headers(raw) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in raw}


class LedgerMiddleware:
    def __init__(
        self,
        app,
        writer: LedgerWriter,
        store: RecordingEventStore,
        server_instance: str = "mcp-0",
        retry_ms: int | None = None,
        release: str | None = None,
        rollout_stage: str | None = None,
        tool_class: Callable[[str], str | None] | None = None,
    ):
        self.app = app
        self.tool_class = tool_class or (lambda name: None)
        store.on_result = self._on_result
        # The server's release identifies its cohort; the stage is a window of the rollout
        # log, not something a process knows for its lifetime.
        self.release = release
        self.rollout_stage = rollout_stage
        # (session, stream) -> the request now carrying it; only that one may end it.
        self.carrier: dict[tuple[str, str], object] = {}
        # session -> its streams that went DISCONNECTED and were neither resumed nor
        # closed since, oldest first: what a reconnecting GET re-opens.
        self.broken: dict[str, dict[str, None]] = {}
        self.writer = writer
        self.store = store
        self.server_instance = server_instance
        # The configured retry interval: what the server would send in a priming event.
        # Only the `retry:` a stream really carried is written (a priming event is not
        # sent to every client).
        self.retry_ms = retry_ms

    def _row(self, table: str, session: str, **fields) -> None:
        row = {
            "ts": now_ms(),
            "session_hmac": self.writer.session_hmac(session),
            "generation": 1,
            **fields,
        }
        self.writer.write(table, row)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        req = _headers(scope["headers"])
        holder = {"session": req.get("mcp-session-id")}
        token = current.set(holder)
        body = bytearray()
        state = {
            "stream": None,
            "status": None,
            "done": False,
            "delivered": False,
            "call": None,
            "sse": False,
            "answer": bytearray(),
            "cursor": None,  # Last-Event-ID of a resume
            "opened": False,  # STREAM_OPEN written for the stream this request carries
            "retry": None,  # the `retry:` this response really sent, in ms
        }
        method = scope["method"]
        last_event_id = req.get("last-event-id")

        async def tee_receive():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
                if method == "POST" and not message.get("more_body"):
                    self._begin_call(scope, holder, state, rpc())
            elif message["type"] == "http.disconnect" and not state["done"]:
                # The client went away mid-stream: that is when it broke, not later.
                self._end_stream(holder.get("session"), state, "client_disconnect")
            return message

        def rpc() -> dict:
            with contextlib.suppress(ValueError):
                doc = json.loads(body or b"{}")
                return doc if isinstance(doc, dict) else {}
            return {}

        if method == "GET" and last_event_id and holder["session"]:
            # A cursor the recorder no longer knows re-opens the session's broken stream.
            stream = self.store.stream_of(last_event_id, holder["session"]) or self._broken(
                holder["session"]
            )
            if stream is not None:
                key = (holder["session"], stream)
                if key in self.carrier:
                    # The client resumes a stream whose response the server has not seen
                    # end: it was lost without the server noticing (a cut socket is only
                    # found out on a later write). The break is known only now, so its
                    # time is not evidence of when it happened: close_reason says so.
                    self._row(
                        "streams",
                        holder["session"],
                        stream_id=stream,
                        state="DISCONNECTED",
                        close_reason="client_lost",
                    )
                state["stream"] = stream
                state["cursor"] = last_event_id
                self.carrier[key] = state
                self.broken.get(holder["session"], {}).pop(stream, None)
                self._row(
                    "streams",
                    holder["session"],
                    stream_id=stream,
                    state="RESUME_PENDING",
                    resume_from_event_id=last_event_id,
                    last_acked_event_id=last_event_id,
                )
                # STREAM_OPEN or CURSOR_REJECTED once the store says whether it could
                # replay from the cursor.
                holder["on_replay"] = lambda served: self._replayed(holder, state, served)

        async def watch_send(message):
            if message["type"] == "http.response.start":
                status = state["status"] = message["status"]
                resp = _headers(message.get("headers", []))
                new_session = resp.get("mcp-session-id")
                if new_session and not holder["session"] and status == 200:
                    holder["session"] = new_session
                    self._open_session(new_session, rpc())
                    self.store.flush_pending()
                sse = resp.get("content-type", "").startswith("text/event-stream")
                state["sse"] = sse
                session = holder["session"]
                if session and sse and status == 200:
                    if method == "POST":
                        doc = rpc()
                        if "id" in doc:
                            state["stream"] = str(doc["id"])
                            self.carrier[(session, state["stream"])] = state
                            state["opened"] = True
                            params = doc.get("params") or {}
                            self._row(
                                "streams",
                                session,
                                stream_id=state["stream"],
                                state="STREAM_OPEN",
                                method="POST",
                                request_id=str(doc["id"]),
                                payload_digest=_request_digest(doc),
                                tool_name=params.get("name")
                                if doc.get("method") == "tools/call"
                                else None,
                            )
                    elif method == "GET" and not last_event_id and self._broken(session):
                        # A GET without Last-Event-ID after a stream of this session broke:
                        # the client re-opens without its cursor, so nothing can be
                        # replayed. Linked to the most recently broken stream.
                        stream = self._broken(session)
                        self.broken[session].pop(stream)
                        state["stream"] = stream
                        self.carrier[(session, stream)] = state
                        self._row("streams", session, stream_id=stream, state="RESUME_PENDING")
                        self._row(
                            "streams", session, stream_id=stream, state="STREAM_OPEN", method="GET"
                        )
                        state["opened"] = True
                elif method == "GET" and state["stream"] is not None and session:
                    holder.pop("on_replay", None)
                    self._row(
                        "streams",
                        session,
                        stream_id=state["stream"],
                        state="CURSOR_REJECTED",
                        resume_from_event_id=state.get("cursor"),
                    )
                    self._row(
                        "streams",
                        session,
                        stream_id=state["stream"],
                        state="CLOSED",
                        close_reason="cursor_rejected",
                    )
                    self.carrier.pop((session, state["stream"]), None)
                    state["stream"] = None
                if method == "DELETE" and session and 200 <= status < 300:
                    self.broken.pop(session, None)
                    self._row("sessions", session, state="DELETE_REQUESTED")
                    self._row("sessions", session, state="TERMINATED")
            elif message["type"] == "http.response.body":
                session, stream = holder.get("session"), state["stream"]
                result = self.store.result_event(session, stream) if session and stream else None
                chunk = message.get("body", b"")
                if result and f"id: {result}".encode() in chunk:
                    state["delivered"] = True
                if state["sse"] and b"retry:" in chunk:
                    m = _RETRY.search(chunk)
                    if m:
                        state["retry"] = int(m.group(1))
                if state["call"] is not None and len(state["answer"]) < _BODY_LIMIT:
                    state["answer"].extend(chunk[: _BODY_LIMIT - len(state["answer"])])
                if not message.get("more_body"):
                    state["done"] = True
            await send(message)

        try:
            await self.app(scope, tee_receive, watch_send)
        finally:
            current.reset(token)
            self._end_stream(holder.get("session"), state)
            self._end_call(state)

    def _open_session(self, session: str, init: dict) -> None:
        params = init.get("params") or {}
        info = params.get("clientInfo") or {}
        self._row(
            "sessions",
            session,
            state="SESSION_ACTIVE",
            protocol_version=params.get("protocolVersion"),
            server_instance=self.server_instance,
            client_name=info.get("name"),
            client_version=info.get("version"),
            resumable=True,
            release=self.release,
            rollout_stage=self.rollout_stage,
        )

    def _broken(self, session: str | None) -> str | None:
        streams = self.broken.get(session) if session else None
        return next(reversed(streams)) if streams else None

    def _replayed(self, holder: dict, state: dict, served: str | None) -> None:
        """The store's answer to a resume: served from the cursor, or not (it no longer
        holds it: evicted, or never stored)."""
        holder.pop("on_replay", None)
        session, stream = holder.get("session"), state["stream"]
        if not session or stream is None or self.carrier.get((session, stream)) is not state:
            return
        if served is not None:
            self._row("streams", session, stream_id=stream, state="STREAM_OPEN", method="GET")
            state["opened"] = True
            return
        self._row(
            "streams",
            session,
            stream_id=stream,
            state="CURSOR_REJECTED",
            resume_from_event_id=state.get("cursor"),
        )
        self._row(
            "streams", session, stream_id=stream, state="CLOSED", close_reason="cursor_rejected"
        )
        del self.carrier[(session, stream)]
        state["stream"] = None

    def _end_stream(self, session: str | None, state: dict, reason: str = "network") -> None:
        stream = state["stream"]
        if not session or stream is None or self.carrier.get((session, stream)) is not state:
            return  # ended already, or another request carries the stream now
        del self.carrier[(session, stream)]
        if state.get("cursor") and not state["opened"]:
            # A resume that ended before the store answered it: it never re-opened, and
            # stays RESUME_PENDING (unrecovered) rather than breaking again.
            return
        if state["delivered"]:
            # Its result went out on this response (a resumed GET may stay open after it
            # until the client hangs up): the operation is complete.
            self._row(
                "streams",
                session,
                stream_id=stream,
                state="CLOSED",
                close_reason="completed",
                retry_ms=state["retry"],
            )
            self.broken.get(session, {}).pop(stream, None)
        else:
            # Ended before its result: cut by the client, or closed by the server so that
            # the client reconnects after `retry` (the response ended whole, on purpose:
            # SEP-1699 polling, or the SDK ending a resumed stream after its replay).
            if reason == "network" and state["done"]:
                reason = "server_close"
            self._row(
                "streams",
                session,
                stream_id=stream,
                state="DISCONNECTED",
                close_reason=reason,
                retry_ms=state["retry"],
            )
            self.broken.setdefault(session, {})[stream] = None

    # -- dispatch records ----------------------------------------------------------------
    def _begin_call(self, scope, holder: dict, state: dict, doc: dict) -> None:
        if doc.get("method") != "tools/call" or "id" not in doc:
            return
        raw = doc.get("params")
        params = raw if isinstance(raw, dict) else {}
        name = str(params.get("name", ""))
        raw_meta, raw_args = params.get("_meta"), params.get("arguments")
        meta = raw_meta if isinstance(raw_meta, dict) else {}
        args = raw_args if isinstance(raw_args, dict) else {}
        req = _headers(scope["headers"])
        key = (
            req.get("idempotency-key")
            or meta.get("idempotencyKey")
            or meta.get("idempotency_key")
            or args.get("idempotency_key")
        )
        call = {
            "ts": now_ms(),
            "session": holder.get("session"),
            "request_id": str(doc["id"]),
            "tool_name": name,
            "tool_class": self.tool_class(name),
            "payload_digest": _request_digest(doc),
            "idempotency_key": str(key) if key is not None else None,
            "principal": _principal(scope),
            "written": False,
        }
        state["call"] = call
        if call["session"]:
            # The result may be stored after this response ended (client gone): the
            # store writes the record then.
            self.store.calls[(call["session"], call["request_id"])] = call

    def _on_result(self, call: dict, kind: str, is_error: bool) -> None:
        outcome = "rejected" if kind == "error" or is_error else "executed"
        self._write_dispatch(call, outcome, call.get("status") or 200)

    def _end_call(self, state: dict) -> None:
        call = state["call"]
        if call is None or call["written"]:
            return
        call["status"] = state["status"]
        if state["status"] is not None and state["status"] >= 400:
            self.store.calls.pop((call["session"], call["request_id"]), None)
            self._write_dispatch(call, "rejected", state["status"])
            return
        outcome = _outcome(bytes(state["answer"]), call["request_id"])
        if outcome is not None:
            self.store.calls.pop((call["session"], call["request_id"]), None)
            self._write_dispatch(call, outcome, state["status"])
        # else: the answer is still to come through the event store, or never known.

    def _write_dispatch(self, call: dict, outcome: str, status) -> None:
        if call["written"]:
            return
        call["written"] = True
        session = call["session"]
        self.writer.write(
            "dispatches",
            {
                "ts": call["ts"],
                "dispatch_id": f"{self.server_instance}-{uuid.uuid4()}",
                "outcome": outcome,
                "tool_name": call["tool_name"],
                "tool_class": call["tool_class"],
                "session_hmac": self.writer.session_hmac(session) if session else None,
                "generation": 1 if session else None,
                "principal": call["principal"],
                "request_id": call["request_id"],
                "idempotency_key": call["idempotency_key"],
                "payload_digest": call["payload_digest"],
                "http_status": status,
            },
        )


def _request_digest(doc: dict) -> str:
    """payload_digest of a request: a tools/call by its tool and arguments, anything else
    by method and params; never the JSON-RPC id, so a re-send has the same digest."""
    raw = doc.get("params")
    params = raw if isinstance(raw, dict) else {}
    if doc.get("method") == "tools/call":
        return payload_digest(params.get("name"), params.get("arguments") or {})
    return payload_digest(doc.get("method"), {k: v for k, v in params.items() if k != "_meta"})


# `replaygate probe` marks every request with this header and a User-Agent starting with
# its principal; ingest reads a proxy log's unauthenticated rows so marked as that
# principal too (ingest/adapters.py), so its dispatches are known as synthetic even where
# they have no session (2026-07-28).
PROBE_HEADER = "replaygate-probe"
PROBE_PRINCIPAL = "replaygate-probe"


def _principal(scope) -> str | None:
    """The authenticated principal when the SDK's auth middleware found one, else the
    probe's for a request it marked (a claim, so never over an authenticated one)."""
    token = getattr(scope.get("user"), "access_token", None)
    if token is not None:
        found = getattr(token, "subject", None) or getattr(token, "client_id", None)
        if found:
            return str(found)
    req = _headers(scope.get("headers") or [])
    if PROBE_HEADER in req or req.get("user-agent", "").startswith(PROBE_PRINCIPAL + "/"):
        return PROBE_PRINCIPAL
    return None


def _outcome(answer: bytes, request_id: str) -> str | None:
    """executed / rejected from a response body (JSON, or SSE data lines) that answers
    `request_id`; None when it holds no answer."""
    docs = []
    text = answer.decode("utf-8", "replace")
    candidates = [text] + [
        line[5:].strip() for line in text.splitlines() if line.startswith("data:")
    ]
    for item in candidates:
        with contextlib.suppress(ValueError):
            doc = json.loads(item)
            if isinstance(doc, dict):
                docs.append(doc)
    for doc in docs:
        if str(doc.get("id")) != request_id:
            continue
        if "error" in doc:
            return "rejected"
        result = doc.get("result")
        if isinstance(result, dict):
            return "rejected" if result.get("isError") else "executed"
    return None
