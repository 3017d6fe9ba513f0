"""Event stores for the recorder: a wrapper that records what passes through the
operator's own store, and a bounded in-memory store for servers that have none.

`RecordingEventStore(writer, inner)` delegates every call to `inner` (the operator's
store: Redis, a database, the SDK's example store, ...) and writes the server event log:
each stored event (`sent`), and on a resume each event the inner store really replayed
(`replayed`, on the stream it was replayed on). Events stored after the cursor that the
inner store did not replay are then visible in the log itself, so a lossy or crossed
store is observed, never masked. Per-stream indexes keep a replay of k events O(k).
An event that leaves the store is logged as `evicted` (with the store's depth when the
store reports its evictions, as the in-memory one does; else when a resume finds it gone).

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
from collections import deque
from collections.abc import Callable

from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import JSONRPCMessage

from .ledger import LedgerWriter, now_ms

current = contextvars.ContextVar("replaygate_recorder_request", default=None)


def kind_of(message) -> tuple[str, str | None]:
    """(event kind, JSON-RPC id it answers) of a stored message; None is priming."""
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


class MemoryEventStore(EventStore):
    """A bounded in-memory store (per process) with per-stream indexes: a replay of k
    events costs O(k), eviction of the oldest event O(1).

    The SDK names a stream by the JSON-RPC id of the request that opened it (or one
    name for every standalone GET stream), so two sessions have streams of the same
    name: a stream here is (session, stream id), its session read from the recorder's
    request holder, and a resume is served only from a cursor of the resuming session's
    own streams. An initialize's stream is stored before its session is named: it is
    held under its request's holder until the holder names the session (the first look
    at it after that files it under the session)."""

    def __init__(self, max_events: int = 100_000):
        self.max_events = max_events
        # Called with (event id, events held) for each event evicted; the recorder
        # writes it to the event log.
        self.on_evict: Callable[[str, int], None] | None = None
        # id -> stream id, message, pos, owner (the session; an unnamed holder's key)
        self.events: dict[str, tuple[str, JSONRPCMessage | None, int, object]] = {}
        # (owner, stream id) -> its event ids, oldest first
        self.streams: dict[tuple[object, str], deque[str]] = {}
        self.first_pos: dict[tuple[object, str], int] = {}  # position of streams[k][0]
        self.order: deque[str] = deque()
        # id(holder) -> (holder, its streams) for holders that had no session yet
        self.unnamed: dict[int, tuple[dict, set[str]]] = {}

    def _owner(self, holder: dict | None) -> object:
        """The owner of the streams a request stores: its session, else (before an
        initialize's answer names it) its holder."""
        if holder is None:
            return None  # used without the recorder: one namespace, as the SDK's
        session = holder.get("session")
        if session is not None:
            self._name(id(holder))
            return session
        return ("unnamed", id(holder))

    def _name(self, key: int) -> None:
        """File the streams of a holder that has named its session under the session."""
        entry = self.unnamed.get(key)
        if entry is None or entry[0].get("session") is None:
            return
        holder, streams = self.unnamed.pop(key)
        session, old = holder["session"], ("unnamed", key)
        for stream_id in list(streams):
            if (session, stream_id) in self.streams:
                continue  # a request id the session used twice: it keeps its own
            streams.discard(stream_id)
            ids = self.streams.pop((old, stream_id))
            self.streams[(session, stream_id)] = ids
            self.first_pos[(session, stream_id)] = self.first_pos.pop((old, stream_id))
            for event_id in ids:
                stream, message, pos, _ = self.events[event_id]
                self.events[event_id] = (stream, message, pos, session)
        if streams:
            self.unnamed[key] = (holder, streams)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(uuid.uuid4())
        holder = current.get()
        owner = self._owner(holder)
        if holder is not None and isinstance(owner, tuple):
            self.unnamed.setdefault(id(holder), (holder, set()))[1].add(stream_id)
        key = (owner, stream_id)
        ids = self.streams.setdefault(key, deque())
        pos = self.first_pos.setdefault(key, 0) + len(ids)
        ids.append(event_id)
        self.events[event_id] = (stream_id, message, pos, owner)
        self.order.append(event_id)
        if len(self.order) > self.max_events:
            self._evict()
        return event_id

    def _evict(self) -> None:
        old = self.order.popleft()
        stream_id, _, _, owner = self.events.pop(old)
        key = (owner, stream_id)
        # Eviction is oldest first, so the evicted event heads its stream's index.
        self.streams[key].popleft()
        self.first_pos[key] += 1
        if not self.streams[key]:
            del self.streams[key], self.first_pos[key]
            if isinstance(owner, tuple):
                entry = self.unnamed.get(owner[1])
                if entry is not None:
                    entry[1].discard(stream_id)
                    if not entry[1]:
                        del self.unnamed[owner[1]]
        if self.on_evict is not None:
            self.on_evict(old, len(self.order))

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        item = self.events.get(last_event_id)
        if item is None:
            return None
        if isinstance(item[3], tuple):
            self._name(item[3][1])  # an initialize's stream whose session is named now
            item = self.events[last_event_id]
        stream_id, _, pos, owner = item
        if owner != self._owner(current.get()):
            return None  # a cursor of another session's stream: not this one's to resume
        key = (owner, stream_id)
        ids = self.streams[key]
        start = pos - self.first_pos[key] + 1
        for i in range(start, len(ids)):
            event_id = ids[i]
            message = self.events[event_id][1]
            if message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


class RecordingEventStore(EventStore):
    """Wraps the operator's event store and writes what passes through it."""

    def __init__(
        self,
        writer: LedgerWriter,
        inner: EventStore | None = None,
        max_events: int = 100_000,
    ):
        self.writer = writer
        self.inner = inner if inner is not None else MemoryEventStore(max_events)
        self.max_events = max_events
        # event id -> (session, stream, seq, kind, digest); bounded like a store would be.
        self.index: dict[str, tuple[str | None, str, int, str, str | None]] = {}
        self.order: deque[str] = deque()
        self.seq: dict[tuple, int] = {}
        self.results: dict[tuple, str] = {}  # (session, stream) -> event id of its result
        self.pending: list[tuple[dict | None, dict]] = []
        # (session, stream) -> tools/call awaiting its result; set by the middleware.
        self.calls: dict[tuple, dict] = {}
        self.on_result: Callable[[dict, str, bool], None] | None = None
        # Events already logged as gone from the store (each is written once).
        self.evicted: set[str] = set()
        if hasattr(self.inner, "on_evict"):
            # A store that says when it evicts (the in-memory one does): its evictions
            # go to the event log as they happen, with how full the store was.
            self.inner.on_evict = self._log_eviction

    # -- ledger ----------------------------------------------------------------------------
    def _emit(self, holder: dict | None, row: dict) -> None:
        session = holder.get("session") if holder else None
        if session is None:
            self.pending.append((holder, row))
            return
        row["session_hmac"] = self.writer.session_hmac(session)
        row.setdefault("generation", 1)
        self.writer.write("events", row)
        event_id, stream_id = str(row.get("event_id")), row.get("stream_id")
        known = self.index.get(event_id)
        if known is not None and known[0] is None:
            # Stored before its session was known (an initialize): attribute it now, so
            # its delivery and its eviction are recognised like any other event's.
            self.index[event_id] = (session, *known[1:])
            if row.get("kind") in ("result", "error") and row.get("disposition") == "sent":
                self.results[(session, stream_id)] = event_id

    def flush_pending(self) -> None:
        """Write events whose session became known (called by the middleware)."""
        waiting, self.pending = self.pending, []
        for holder, row in waiting:
            self._emit(holder, row)

    def stream_of(self, event_id: str, session: str | None = None) -> str | None:
        """The stream an event was stored on; with `session`, only an event of that
        session's (stream ids repeat across sessions: another's cursor names none)."""
        item = self.index.get(event_id)
        if item is None or (session is not None and item[0] not in (None, session)):
            return None
        return item[1]

    def result_event(self, session: str, stream_id: str) -> str | None:
        return self.results.get((session, stream_id))

    def _log_eviction(self, event_id: str, depth: int | None) -> None:
        """An `evicted` row: the event left the replay store, so a resume from it (or
        from before it) can no longer be served. `buffer_depth` is how many events the
        store held then (None when the store did not say)."""
        item = self.index.get(event_id)
        if item is None or event_id in self.evicted:
            return
        session, stream_id, seq, kind, digest = item
        if session is None:
            return  # never attributed to a session: nothing to join it to
        self.evicted.add(event_id)
        if len(self.evicted) > self.max_events:
            self.evicted.clear()  # bounded like the index; a repeat row is harmless
        self.writer.write(
            "events",
            {
                "ts": now_ms(),
                "session_hmac": self.writer.session_hmac(session),
                "generation": 1,
                "stream_id": stream_id,
                "event_id": event_id,
                "seq": seq,
                "kind": kind,
                "disposition": "evicted",
                "message_digest": digest,
                "buffer_depth": depth,
            },
        )

    def _remember(self, event_id: str, item: tuple) -> None:
        self.index[event_id] = item
        self.order.append(event_id)
        if len(self.order) > self.max_events:
            self.index.pop(self.order.popleft(), None)

    # -- EventStore ------------------------------------------------------------------------
    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = await self.inner.store_event(stream_id, message)
        holder = current.get()
        session = holder.get("session") if holder else None
        # Seq counts per request holder and stream: the session may not be known yet.
        key = (id(holder), stream_id)
        seq = 0 if message is None else self.seq.get(key, 0) + 1
        if message is not None:
            self.seq[key] = seq
        kind, jsonrpc_id = kind_of(message)
        digest = _digest(message)
        self._remember(event_id, (session, stream_id, seq, kind, digest))
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
                "message_digest": digest,
                "jsonrpc_id": jsonrpc_id,
            },
        )
        if kind in ("result", "error"):
            call = self.calls.pop((session, stream_id), None)
            if call is not None and self.on_result is not None:
                self.on_result(call, kind, _is_error_result(message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        holder = current.get()
        cursor = self.index.get(last_event_id)
        rows: list[dict] = []

        async def recording_send(event: EventMessage) -> None:
            await send_callback(event)
            known = self.index.get(event.event_id) if event.event_id else None
            kind, jsonrpc_id = kind_of(event.message)
            rows.append(
                {
                    "ts": now_ms(),
                    "event_id": event.event_id,
                    "kind": kind,
                    "disposition": "replayed",
                    "seq": known[2] if known else None,
                    "jsonrpc_id": jsonrpc_id,
                    "message_digest": _digest(event.message),
                }
            )

        stream_id = None
        try:
            stream_id = await self.inner.replay_events_after(last_event_id, recording_send)
        finally:
            # What was sent is logged even when the replay broke off (the client hung up
            # mid-replay and the SDK's send failed): those events reached it. A replayed
            # row names the stream it was replayed on (the one the store resumed); the
            # event's own stream is in its `sent` row, so a crossed replay shows as the
            # two differing.
            resumed = stream_id or (cursor[1] if cursor else None)
            for row in rows:
                if resumed is not None:
                    self._emit(holder, {**row, "stream_id": resumed})
        session = holder.get("session") if holder else None
        if stream_id is None and cursor is not None and cursor[0] in (None, session):
            # The server produced this cursor, yet its store no longer holds it: the
            # store gave no notice of the eviction, so it is logged now.
            self._log_eviction(last_event_id, None)
        # The middleware learns whether the resume was served (it writes STREAM_OPEN)
        # or not (CURSOR_REJECTED): the SDK answers both with a 200 event stream.
        outcome = holder.get("on_replay") if holder else None
        if outcome is not None:
            outcome(stream_id)
        return stream_id


def _is_error_result(message) -> bool:
    """A tools/call answered with isError (the tool failed) rather than a result."""
    result = getattr(message, "result", None)
    return bool(isinstance(result, dict) and result.get("isError"))
