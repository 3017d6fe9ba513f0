"""ASGI middleware that writes the session and stream ledgers around the SDK's app.

Per request it puts a holder (the session id) in the recorder's context variable, so
the event store can attribute events, and watches the exchange: a new Mcp-Session-Id
in a response opens a session; a successful DELETE ends it; a POST answered with an
SSE stream opens a stream (stream id = the JSON-RPC request id, as in the SDK); a GET
with Last-Event-ID resumes one. A stream that ends after its result is CLOSED; one that
ends before it (cut by the client, or closed by the server to make it reconnect) is
DISCONNECTED. The raw session id is only ever hashed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json

from .ledger import LedgerWriter, now_ms
from .store import RecordingEventStore, current


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
        rollout_stage: str | None = None,
    ):
        self.app = app
        self.rollout_stage = rollout_stage
        # (session, stream) -> the request now carrying it; only that one may end it.
        self.carrier: dict[tuple[str, str], object] = {}
        self.writer = writer
        self.store = store
        self.server_instance = server_instance
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
        state = {"stream": None, "status": None, "done": False, "delivered": False}
        method = scope["method"]
        last_event_id = req.get("last-event-id")

        async def tee_receive():
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
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
            stream = self.store.stream_of(last_event_id)
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
                self.carrier[key] = state
                self._row(
                    "streams",
                    holder["session"],
                    stream_id=stream,
                    state="RESUME_PENDING",
                    resume_from_event_id=last_event_id,
                    last_acked_event_id=last_event_id,
                )

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
                session = holder["session"]
                if session and sse and status == 200:
                    if method == "POST":
                        doc = rpc()
                        if "id" in doc:
                            state["stream"] = str(doc["id"])
                            self.carrier[(session, state["stream"])] = state
                            params = doc.get("params") or {}
                            self._row(
                                "streams",
                                session,
                                stream_id=state["stream"],
                                state="STREAM_OPEN",
                                method="POST",
                                request_id=str(doc["id"]),
                                payload_digest=hashlib.sha256(bytes(body)).hexdigest(),
                                tool_name=params.get("name")
                                if doc.get("method") == "tools/call"
                                else None,
                                retry_ms=self.retry_ms,
                            )
                    elif state["stream"] is not None:
                        self._row(
                            "streams",
                            session,
                            stream_id=state["stream"],
                            state="STREAM_OPEN",
                            method="GET",
                        )
                elif method == "GET" and state["stream"] is not None and session:
                    self._row(
                        "streams", session, stream_id=state["stream"], state="CURSOR_REJECTED"
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
                    self._row("sessions", session, state="DELETE_REQUESTED")
                    self._row("sessions", session, state="TERMINATED")
            elif message["type"] == "http.response.body":
                session, stream = holder.get("session"), state["stream"]
                result = self.store.result_event(session, stream) if session and stream else None
                if result and f"id: {result}".encode() in message.get("body", b""):
                    state["delivered"] = True
                if not message.get("more_body"):
                    state["done"] = True
            await send(message)

        try:
            await self.app(scope, tee_receive, watch_send)
        finally:
            current.reset(token)
            self._end_stream(holder.get("session"), state)

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
            rollout_stage=self.rollout_stage,
        )

    def _end_stream(self, session: str | None, state: dict, reason: str = "network") -> None:
        stream = state["stream"]
        if not session or stream is None or self.carrier.get((session, stream)) is not state:
            return  # ended already, or another request carries the stream now
        del self.carrier[(session, stream)]
        if state["delivered"]:
            # Its result went out on this response (a resumed GET may stay open after it
            # until the client hangs up): the operation is complete.
            self._row(
                "streams", session, stream_id=stream, state="CLOSED", close_reason="completed"
            )
        else:
            # Ended before its result: cut by the client, or closed by the server so that
            # the client reconnects after `retry`.
            self._row(
                "streams", session, stream_id=stream, state="DISCONNECTED", close_reason=reason
            )
