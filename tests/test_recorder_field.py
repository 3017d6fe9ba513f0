"""The recorder's part in the field failures: a store's evictions reach the event log
(with its depth), and a resume the store cannot serve is reported to the middleware,
which writes RESUME_PENDING + CURSOR_REJECTED with the cursor."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("mcp")

from mcp.server.streamable_http import EventStore  # noqa: E402
from mcp_types import JSONRPCNotification  # noqa: E402

from replaygate.recorder import LedgerWriter, MemoryEventStore, RecordingEventStore  # noqa: E402
from replaygate.recorder.store import current  # noqa: E402


def _note(i: int):
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": i})


def _rows(path, table):
    return [json.loads(x) for f in sorted(path.glob(f"{table}-*.jsonl")) for x in open(f)]


class SilentStore(EventStore):
    """An operator's bounded store that does not say when it evicts."""

    def __init__(self, max_events):
        self._inner = MemoryEventStore(max_events)

    async def store_event(self, stream_id, message):
        return await self._inner.store_event(stream_id, message)

    async def replay_events_after(self, last_event_id, send_callback):
        return await self._inner.replay_events_after(last_event_id, send_callback)


def _play(store, holder):
    answers = []
    holder["on_replay"] = answers.append

    async def go():
        token = current.set(holder)
        try:
            ids = [await store.store_event("7", _note(i)) for i in range(6)]

            async def send(ev):
                pass

            served = await store.replay_events_after(ids[1], send)
            return ids, served
        finally:
            current.reset(token)

    ids, served = asyncio.run(go())
    return ids, served, answers


def test_evictions_are_logged_with_the_store_depth(tmp_path):
    store = RecordingEventStore(LedgerWriter(tmp_path, b"k"), MemoryEventStore(max_events=3))
    ids, served, answers = _play(store, {"session": "s-1"})
    assert served is None and answers == [None]  # the middleware hears: not served
    evicted = [r for r in _rows(tmp_path, "events") if r["disposition"] == "evicted"]
    assert [r["event_id"] for r in evicted] == ids[:3]  # once each, oldest first
    assert {r["buffer_depth"] for r in evicted} == {3}
    assert [r["seq"] for r in evicted] == [1, 2, 3] and {r["stream_id"] for r in evicted} == {"7"}


def test_a_store_that_evicts_silently_is_found_out_at_the_resume(tmp_path):
    store = RecordingEventStore(LedgerWriter(tmp_path, b"k"), SilentStore(max_events=3))
    ids, served, answers = _play(store, {"session": "s-1"})
    assert served is None and answers == [None]
    evicted = [r for r in _rows(tmp_path, "events") if r["disposition"] == "evicted"]
    # Only the cursor is known to be gone, and when the store held how many is unknown.
    assert [(r["event_id"], r.get("buffer_depth")) for r in evicted] == [(ids[1], None)]


def test_a_served_resume_is_reported_and_evicts_nothing(tmp_path):
    store = RecordingEventStore(LedgerWriter(tmp_path, b"k"), MemoryEventStore(max_events=100))
    _, served, answers = _play(store, {"session": "s-1"})
    assert served == "7" and answers == ["7"]
    assert not [r for r in _rows(tmp_path, "events") if r["disposition"] == "evicted"]


def test_another_sessions_cursor_is_neither_served_nor_an_eviction(tmp_path):
    """Stream ids repeat across sessions: a resume in session B with a cursor of session
    A's stream "7" is not served, and A's event is not written as evicted."""
    store = RecordingEventStore(LedgerWriter(tmp_path, b"k"), MemoryEventStore(max_events=100))
    ids, served, _ = _play(store, {"session": "s-a"})
    answers = []

    async def resume():
        token = current.set({"session": "s-b", "on_replay": answers.append})
        try:

            async def send(ev):
                pass

            return await store.replay_events_after(ids[1], send)
        finally:
            current.reset(token)

    assert served == "7" and asyncio.run(resume()) is None and answers == [None]
    assert all(r["disposition"] != "evicted" for r in _rows(tmp_path, "events"))
