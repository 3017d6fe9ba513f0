"""Faulty EventStores an operator might run, for the end-to-end test's server (passed
with `--event-store tests.e2e_stores:NAME`): the recorder wraps them and must show what
they got wrong from the server's own records."""

from __future__ import annotations

from replaygate.recorder import MemoryEventStore


class LossyStore(MemoryEventStore):
    """Loses the first event after the cursor on every replay (an off-by-one in its
    range query): the client never learns that an event is missing."""

    async def replay_events_after(self, last_event_id, send_callback):
        state = {"skip": True}

        async def skip_first(event):
            if state.pop("skip", False):
                return
            await send_callback(event)

        return await super().replay_events_after(last_event_id, skip_first)


class CrossStreamStore(MemoryEventStore):
    """Replays everything stored after the cursor in arrival order, whatever its stream
    (a store keyed by time, not by stream): events of a concurrent call leak into the
    resumed one."""

    async def replay_events_after(self, last_event_id, send_callback):
        from mcp.server.streamable_http import EventMessage

        item = self.events.get(last_event_id)
        if item is None:
            return None
        order = list(self.order)
        for event_id in order[order.index(last_event_id) + 1 :]:
            message = self.events[event_id][1]
            if message is not None:
                await send_callback(EventMessage(message, event_id))
        return item[0]


class SmallStore(MemoryEventStore):
    """The bundled store bounded to 40 events: a busy session evicts its oldest cursors."""

    def __init__(self) -> None:
        super().__init__(40)


class RingStore(SmallStore):
    """A ring buffer that, asked for a cursor it no longer holds, replays the oldest events
    it still has (of whatever stream) instead of refusing: the client gets a stream that
    starts somewhere after what it acknowledged, with nothing to say what was lost."""

    async def replay_events_after(self, last_event_id, send_callback):
        from mcp.server.streamable_http import EventMessage

        if last_event_id in self.events:
            return await super().replay_events_after(last_event_id, send_callback)
        if not self.order:
            return None
        oldest = self.order[0]
        stream, _, _, owner = self.events[oldest]
        for event_id in list(self.streams[(owner, stream)]):
            message = self.events[event_id][1]
            if message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream
