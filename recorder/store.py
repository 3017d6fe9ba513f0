"""An in-memory EventStore that also writes the server event log.

The SDK never tells an event store which session an event belongs to. The ledger
middleware puts a mutable holder in a context variable for each request and fills it
with the session id (from the request header, or from the response header of an
initialize). The SDK's per-session message router is started inside the initialize
request, so it inherits that holder: every event can be attributed to its session.
Events stored before the initialize response names the session wait until it does.
"""

from __future__ import annotations

import contextvars
import hashlib
import uuid

from mcp.server.streamable_http import EventMessage, EventStore

from .ledger import LedgerWriter, now_ms

current = contextvars.ContextVar("replaygate_recorder_request", default=None)


def _kind(message) -> tuple[str, str | None]:
    if message is None:
        return "priming", None
    name = type(message).__name__
    if name == "JSONRPCResponse":
        return "result", str(message.id)
    if name == "JSONRPCError":
        return "error", str(message.id)
    method = getattr(message, "method", "")
    return ("progress" if method == "notifications/progress" else "message"), None


def _digest(message) -> str | None:
    if message is None:
        return None
    return hashlib.sha256(message.model_dump_json(by_alias=True).encode()).hexdigest()


class RecordingEventStore(EventStore):
    def __init__(self, writer: LedgerWriter, max_events: int = 100_000):
        self.writer = writer
        self.max_events = max_events
        self.events: dict[str, tuple[str, object, str | None]] = {}  # id -> stream, msg, sid
        self.order: list[str] = []
        self.seq: dict[tuple, int] = {}
        self.results: dict[tuple, str] = {}  # (session, stream) -> event id of its result
        self.pending: list[tuple[dict, dict]] = []

    # -- ledger ----------------------------------------------------------------------------
    def _emit(self, holder: dict | None, row: dict) -> None:
        session = holder.get("session") if holder else None
        if session is None:
            self.pending.append((holder, row))
            return
        row["session_hmac"] = self.writer.session_hmac(session)
        row.setdefault("generation", 1)
        self.writer.write("events", row)

    def flush_pending(self) -> None:
        """Write events whose session became known (called by the middleware)."""
        waiting, self.pending = self.pending, []
        for holder, row in waiting:
            self._emit(holder, row)

    def stream_of(self, event_id: str) -> str | None:
        item = self.events.get(event_id)
        return item[0] if item else None

    def result_event(self, session: str, stream_id: str) -> str | None:
        return self.results.get((session, stream_id))

    # -- EventStore ------------------------------------------------------------------------
    async def store_event(self, stream_id, message):
        holder = current.get()
        session = holder.get("session") if holder else None
        event_id = str(uuid.uuid4())
        self.events[event_id] = (stream_id, message, session)
        self.order.append(event_id)
        if len(self.order) > self.max_events:
            self.events.pop(self.order.pop(0), None)
        key = (id(holder), stream_id)
        seq = 0 if message is None else self.seq.get(key, 0) + 1
        if message is not None:
            self.seq[key] = seq
        kind, jsonrpc_id = _kind(message)
        if kind in ("result", "error") and session:
            self.results[(session, stream_id)] = event_id
        self._emit(
            holder,
            {
                "ts": now_ms(),
                "stream_id": stream_id,
                "event_id": event_id,
                "seq": seq,
                "kind": kind,
                "disposition": "sent",
                "cumulative": kind == "message" or None,
                "message_digest": _digest(message),
                "jsonrpc_id": jsonrpc_id,
            },
        )
        return event_id

    async def replay_events_after(self, last_event_id, send_callback):
        if last_event_id not in self.events:
            return None
        stream_id, _, session = self.events[last_event_id]
        holder = current.get()
        start = self.order.index(last_event_id) + 1
        for event_id in self.order[start:]:
            s, message, owner = self.events[event_id]
            if s != stream_id or owner != session or message is None:
                continue
            await send_callback(EventMessage(message, event_id))
            kind, jsonrpc_id = _kind(message)
            self._emit(
                holder,
                {
                    "ts": now_ms(),
                    "stream_id": stream_id,
                    "event_id": event_id,
                    "kind": kind,
                    "disposition": "replayed",
                    "seq": self._seq_of(event_id),
                    "jsonrpc_id": jsonrpc_id,
                    "message_digest": _digest(message),
                },
            )
        return stream_id

    def _seq_of(self, event_id: str) -> int | None:
        stream_id, _, session = self.events[event_id]
        n = 0
        for eid in self.order:
            s, m, owner = self.events[eid]
            if s == stream_id and owner == session and m is not None:
                n += 1
            if eid == event_id:
                return n
        return None
