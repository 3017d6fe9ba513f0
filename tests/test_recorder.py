"""The recorder's event stores: the operator's store is wrapped (what it stores and what
it really replays is logged), replays cost O(k), eviction is O(1), digests leave the
JSON-RPC id out."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

pytest.importorskip("mcp")

from mcp_types import JSONRPCNotification, JSONRPCResponse  # noqa: E402

from replaygate.recorder import (  # noqa: E402
    LedgerWriter,
    MemoryEventStore,
    RecordingEventStore,
    payload_digest,
    tool_class_of,
)
from replaygate.recorder.store import current  # noqa: E402


def _note(i: int):
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/message", params={"n": i})


def _result(rid: int):
    return JSONRPCResponse(jsonrpc="2.0", id=rid, result={"content": []})


class SkipFirstStore(MemoryEventStore):
    """An operator's store that loses the first event after the cursor on replay."""

    async def replay_events_after(self, last_event_id, send_callback):
        first = {"skip": True}

        async def lossy(event):
            if first.pop("skip", False):
                return
            await send_callback(event)

        return await super().replay_events_after(last_event_id, lossy)


class GlobalOrderStore(MemoryEventStore):
    """Replays everything stored after the cursor, whatever its stream."""

    async def replay_events_after(self, last_event_id, send_callback):
        stream = self.events[last_event_id][0]
        after = list(self.order)[list(self.order).index(last_event_id) + 1 :]
        for eid in after:
            await send_callback(type("E", (), {"event_id": eid, "message": _note(0)})())
        return stream


def _rows(path, table):
    return [json.loads(x) for f in sorted(path.glob(f"{table}-*.jsonl")) for x in open(f)]


def _run(coro):
    return asyncio.run(coro)


def test_memory_store_replays_only_its_stream_after_the_cursor():
    store = MemoryEventStore()

    async def go():
        a = [await store.store_event("a", _note(i)) for i in range(5)]
        await store.store_event("b", _note(99))
        got = []

        async def send(ev):
            got.append(ev.event_id)

        stream = await store.replay_events_after(a[1], send)
        return a, stream, got

    a, stream, got = _run(go())
    assert stream == "a" and got == a[2:]


def test_memory_store_evicts_oldest_first_and_keeps_positions():
    store = MemoryEventStore(max_events=4)

    async def go():
        ids = [await store.store_event("a" if i % 2 else "b", _note(i)) for i in range(8)]
        got = []

        async def send(ev):
            got.append(ev.event_id)

        # ids of "a": 1, 3, 5, 7; only 5 and 7 (and b's 4, 6) remain after eviction
        gone = await store.replay_events_after(ids[1], send)
        kept = await store.replay_events_after(ids[5], send)
        return ids, gone, kept, got

    ids, gone, kept, got = _run(go())
    assert gone is None and kept == "a" and got == [ids[7]]
    assert len(store.events) == 4 and sum(len(v) for v in store.streams.values()) == 4


def test_a_replay_is_linear_in_what_it_sends():
    store = MemoryEventStore(max_events=200_000)
    calls = {"n": 0}

    async def go():
        ids = [await store.store_event("s", _note(i)) for i in range(100_000)]

        async def send(ev):
            calls["n"] += 1

        await store.replay_events_after(ids[-3], send)

    _run(go())
    assert calls["n"] == 2


def test_the_wrapper_logs_what_the_operator_store_really_replayed(tmp_path):
    writer = LedgerWriter(tmp_path, b"k")
    store = RecordingEventStore(writer, SkipFirstStore())
    holder = {"session": "sess-1"}

    async def go():
        token = current.set(holder)
        try:
            ids = [await store.store_event("7", None)]
            ids += [await store.store_event("7", _note(i)) for i in range(1, 5)]
            ids.append(await store.store_event("7", _result(7)))
            sent = []

            async def send(ev):
                sent.append(ev.event_id)

            stream = await store.replay_events_after(ids[2], send)
            return ids, stream, sent
        finally:
            current.reset(token)

    ids, stream, sent = _run(go())
    writer.close()
    assert stream == "7" and sent == ids[4:]  # ids[3] was lost by the operator's store
    rows = _rows(tmp_path, "events")
    assert [r["seq"] for r in rows if r["disposition"] == "sent"] == [0, 1, 2, 3, 4, 5]
    replayed = [r for r in rows if r["disposition"] == "replayed"]
    assert [(r["event_id"], r["seq"], r["stream_id"]) for r in replayed] == [
        (ids[4], 4, "7"),
        (ids[5], 5, "7"),
    ]
    assert all("sess-1" not in json.dumps(r) for r in rows)
    assert {r["kind"] for r in rows} == {"priming", "message", "result"}


def test_a_crossed_replay_is_logged_on_the_stream_it_was_replayed_on(tmp_path):
    writer = LedgerWriter(tmp_path, b"k")
    store = RecordingEventStore(writer, GlobalOrderStore())

    async def go():
        token = current.set({"session": "s"})
        try:
            a1 = await store.store_event("a", _note(1))
            b1 = await store.store_event("b", _note(1))
            await store.replay_events_after(a1, lambda ev: asyncio.sleep(0))
            return b1
        finally:
            current.reset(token)

    b1 = _run(go())
    writer.close()
    rep = [r for r in _rows(tmp_path, "events") if r["disposition"] == "replayed"]
    assert [(r["event_id"], r["stream_id"], r["seq"]) for r in rep] == [(b1, "a", 1)]


def test_a_replay_the_client_left_midway_still_logs_what_it_sent(tmp_path):
    """A client that hangs up during a replay makes the SDK's send fail: the events sent
    before that reached the client and are logged as replayed (a crossed replay among them
    is still seen), and the failure goes on to the SDK."""

    writer = LedgerWriter(tmp_path, b"k")
    store = RecordingEventStore(writer, GlobalOrderStore())

    async def go():
        token = current.set({"session": "s"})
        sent = []

        async def send(ev):
            if len(sent) == 2:
                raise ConnectionResetError("client went away")
            sent.append(ev.event_id)

        try:
            a1 = await store.store_event("a", _note(1))
            ids = [await store.store_event("b", _note(i)) for i in range(1, 4)]
            with pytest.raises(ConnectionResetError):
                await store.replay_events_after(a1, send)
            return ids, sent
        finally:
            current.reset(token)

    ids, sent = _run(go())
    writer.close()
    rep = [r for r in _rows(tmp_path, "events") if r["disposition"] == "replayed"]
    assert sent == ids[:2]
    assert [(r["event_id"], r["stream_id"]) for r in rep] == [(ids[0], "a"), (ids[1], "a")]


def test_payload_digest_ignores_the_request_id_and_key_order():
    a = payload_digest("create_ticket", {"title": "x", "n": 1})
    b = payload_digest("create_ticket", {"n": 1, "title": "x"})
    assert a == b and len(a) == 64
    assert payload_digest("create_ticket", {"title": "y", "n": 1}) != a
    assert (
        a
        == __import__("hashlib")
        .sha256(b'{"arguments":{"n":1,"title":"x"},"name":"create_ticket"}')
        .hexdigest()
    )


def test_tool_class_from_annotations():
    from mcp_types import ToolAnnotations as T

    assert tool_class_of(T(readOnlyHint=True)) == "read"
    assert tool_class_of(T(idempotentHint=True, destructiveHint=False)) == "read"
    assert tool_class_of(T(idempotentHint=True)) == "write"
    assert tool_class_of(T()) == "write"
    assert tool_class_of(None) == "write"


def test_dispatch_fields_from_the_request_and_the_auth_context():
    from types import SimpleNamespace

    from replaygate.recorder.middleware import _outcome, _principal, _request_digest

    call = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "create_ticket", "arguments": {"title": "x"}, "_meta": {"k": 1}},
    }
    resend = dict(call, id=42)
    assert (
        _request_digest(call)
        == _request_digest(resend)
        == payload_digest("create_ticket", {"title": "x"})
    )
    token = SimpleNamespace(subject="alice", client_id="app-1")
    assert _principal({"user": SimpleNamespace(access_token=token)}) == "alice"
    token.subject = None
    assert _principal({"user": SimpleNamespace(access_token=token)}) == "app-1"
    assert _principal({}) is None
    ok = b'data: {"jsonrpc":"2.0","id":41,"result":{"content":[]}}\n\n'
    failed = b'{"jsonrpc":"2.0","id":41,"result":{"content":[],"isError":true}}'
    error = b'{"jsonrpc":"2.0","id":41,"error":{"code":-32602,"message":"bad"}}'
    assert _outcome(ok, "41") == "executed"
    assert _outcome(failed, "41") == "rejected"
    assert _outcome(error, "41") == "rejected"
    assert _outcome(ok, "7") is None and _outcome(b"", "41") is None


def test_a_request_the_probe_marked_is_its_principal_unless_authenticated():
    """The recorder reads `replaygate probe`'s marker as ingest does in proxy logs
    (ingest/adapters.py): a dispatch without a session is still known as the probe's."""
    from types import SimpleNamespace

    from replaygate.ingest import adapters
    from replaygate.recorder import middleware as mw

    assert mw.PROBE_PRINCIPAL == adapters.PROBE_PRINCIPAL
    assert adapters.PROBE_HEADER.lower() == mw.PROBE_HEADER
    agent = (b"user-agent", b"replaygate-probe/0.1.0 (20261202T050001Z-963d86)")
    header = (b"Replaygate-Probe", b"20261202T050001Z-963d86")
    assert mw._principal({"headers": [agent]}) == "replaygate-probe"
    assert mw._principal({"headers": [(b"user-agent", b"node"), header]}) == "replaygate-probe"
    assert mw._principal({"headers": [(b"user-agent", b"node replaygate-probe/1")]}) is None
    user = SimpleNamespace(access_token=SimpleNamespace(subject="alice", client_id=None))
    assert mw._principal({"headers": [agent, header], "user": user}) == "alice"


def _stream_rows(tmp_path, chunks, client_leaves=False):
    """The stream ledger the middleware writes for one POST answered with an event stream
    of `chunks` that ends without the call's result (the server closed it, or the client
    left). The recorder is configured with a retry interval of 500 ms."""
    from replaygate.recorder import LedgerMiddleware

    writer = LedgerWriter(tmp_path, b"k")
    store = RecordingEventStore(writer)

    async def app(scope, receive, send):
        await receive()
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if client_leaves:
            await receive()  # the client is gone: the server learns it here
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call"}
    call["params"] = {"name": "t", "arguments": {}}
    inbox = [{"type": "http.request", "body": json.dumps(call).encode(), "more_body": False}]

    async def receive():
        return inbox.pop(0) if inbox else {"type": "http.disconnect"}

    async def send(message):
        pass

    scope = {"type": "http", "method": "POST", "headers": [(b"mcp-session-id", b"sess-1")]}
    _run(LedgerMiddleware(app, writer, store, retry_ms=500)(scope, receive, send))
    writer.close()
    return _rows(tmp_path, "streams")


PRIMING = b"id: e-0\r\ndata: \r\nretry: 1000\r\n\r\n"
PROGRESS = b'event: message\r\nid: e-1\r\ndata: {"method":"notifications/progress"}\r\n\r\n'


def test_retry_is_written_only_where_a_priming_event_carried_it(tmp_path):
    """The retry the priming event really sent (1000 ms), not the configured 500; a stream
    without a priming event (protocol 2025-03-26) has none."""
    primed = _stream_rows(tmp_path / "a", [PRIMING, PROGRESS])
    assert [r.get("retry_ms") for r in primed] == [None, 1000], primed
    bare = _stream_rows(tmp_path / "b", [PROGRESS])
    assert all("retry_ms" not in r for r in bare), bare


def test_a_stream_the_server_ended_is_a_server_close(tmp_path):
    """A response that ended whole before its result was closed by the server on purpose
    (SEP-1699 polling); a client that left is client_disconnect. Both are values of the
    contract's close_reason."""
    from replaygate.core.contract import STREAMS

    closed = _stream_rows(tmp_path / "a", [PRIMING])
    assert [(r["state"], r.get("close_reason")) for r in closed] == [
        ("STREAM_OPEN", None),
        ("DISCONNECTED", "server_close"),
    ]
    left = _stream_rows(tmp_path / "b", [PRIMING], client_leaves=True)
    assert left[-1]["close_reason"] == "client_disconnect" and left[-1]["retry_ms"] == 1000
    assert "server_close" in STREAMS.field("close_reason").doc


def test_the_example_server_outlasts_a_proxys_idle_upstream_connections(monkeypatch, tmp_path):
    """Caddy pools idle upstream connections for 2 minutes and nginx for 60 s; a server
    that closes one after uvicorn's default 5 s races the proxy's reuse, and the proxy
    answers 502 or a 200 with no body (seen under load behind Caddy)."""
    import sys

    import uvicorn

    from replaygate.recorder import example_server

    seen: dict = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "k")
    monkeypatch.setattr(sys, "argv", ["example_server", "--ledger", str(tmp_path)])
    example_server.main()
    assert seen["timeout_keep_alive"] > 120


def test_two_sessions_with_the_same_request_ids_keep_their_own_streams():
    """Stream ids are the sessions' own JSON-RPC ids, so two sessions have a stream "0"
    (their initialize, stored before the answer names the session) and a stream "1": a
    resume replays only its session's events, and another session's cursor is not
    served. The holders are as the middleware makes them: the session's message router
    stores under the initialize's holder, a request's priming event under its own."""
    store = MemoryEventStore()

    async def session(name):
        init = {"session": None}
        token = current.set(init)
        try:
            ids = {"0": [await store.store_event("0", None)]}
            init["session"] = name  # the initialize's answer names the session
            ids["0"].append(await store.store_event("0", _result(0)))
        finally:
            current.reset(token)
        token = current.set({"session": name})  # the tools/call request: its priming
        try:
            ids["1"] = [await store.store_event("1", None)]
        finally:
            current.reset(token)
        token = current.set(init)  # the message router
        try:
            ids["1"] += [await store.store_event("1", _note(i)) for i in range(3)]
            ids["1"].append(await store.store_event("1", _result(1)))
        finally:
            current.reset(token)
        return ids

    async def resume(name, cursor):
        got: list[str] = []

        async def send(ev):
            got.append(ev.event_id)

        token = current.set({"session": name})
        try:
            return await store.replay_events_after(cursor, send), got
        finally:
            current.reset(token)

    async def go():
        a, b = await session("A"), await session("B")
        return (
            a,
            b,
            [
                await resume("A", a["1"][0]),
                await resume("A", a["0"][0]),
                await resume("B", b["1"][2]),
                await resume("B", a["1"][0]),
            ],
        )

    a, b, (a1, a0, b1, crossed) = _run(go())
    assert a1 == ("1", a["1"][1:])
    assert a0 == ("0", a["0"][1:])
    assert b1 == ("1", b["1"][3:])
    assert crossed == (None, [])


def _sse(resp, quiet_s: float) -> list[dict]:
    """Every SSE event of a response until it ends or is quiet for `quiet_s` seconds."""
    import socket

    resp.fp.raw._sock.settimeout(quiet_s)
    got, cur = [], {}
    with contextlib.suppress(socket.timeout, TimeoutError):
        while line := resp.readline():
            line = line.decode().rstrip("\r\n")
            if line == "":
                if "id" in cur:
                    got.append(cur)
                cur = {}
                continue
            field, _, value = line.partition(":")
            cur[field] = value.lstrip(" ")
    return got


@pytest.mark.slow
def test_the_example_server_resumes_only_the_sessions_own_stream(tmp_path):
    """The official SDK server with the recorder's in-memory store: two sessions call a
    tool under the same JSON-RPC ids; a resume of one from its first event on stream "1"
    replays that session's events after it, none of the other's."""
    from .procs import example_server, stop, wait_port
    from .test_e2e_real import KEY, Client

    with contextlib.ExitStack() as logs:
        proc, port = example_server(tmp_path / "ledger", tmp_path / "server.log", logs, KEY)
        try:
            wait_port(port)
            clients = [Client(port, tmp_path / f"inbox-{n}.jsonl") for n in "ab"]
            seen = []
            for client in clients:
                assert client.initialize() == 200
                _, resp, rid = client.call("burst", {"n": 3})
                assert rid == "1"
                seen.append([e["id"] for e in client.events(resp, rid)])
            a, b = seen
            assert len(a) == 5 and len(b) == 5  # priming, three messages, the result
            _, resp = clients[0].request("GET", extra={"Last-Event-ID": a[0]})
            assert resp.status == 200
            replayed = [e["id"] for e in _sse(resp, 2.0) if e.get("data")]
        finally:
            stop([proc])
    assert replayed == a[1:] and not set(replayed) & set(b)
