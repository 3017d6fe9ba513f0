"""`replaygate probe` without a server: SSE parsing, the reference alignment that turns
what a client received into receipts with seqs and origins, the request budget, the
command's errors, and that a plain install (no `probe` extra) runs every other command."""

from __future__ import annotations

import io
import itertools
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from replaygate.audit import outputs
from replaygate.cli import cli

pytest.importorskip("httpx2")

from replaygate.probe.discover import Discovery  # noqa: E402
from replaygate.probe.trials import Probe, Settings, _stale  # noqa: E402
from replaygate.probe.wire import Answer, BudgetExhausted, Event, Pacer, sse_events  # noqa: E402


def test_sse_events_join_data_lines_and_skip_comments():
    lines = iter(
        [
            "id: a1",
            "retry: 500",
            "data:",
            "",
            ": keep-alive",
            "id: a2",
            'data: {"jsonrpc": "2.0",',
            'data:  "id": "rgp-1", "result": {}}',
            "",
        ]
    )
    got = list(sse_events(lines))
    assert [(e.event_id, e.kind, e.retry_ms) for e in got] == [
        ("a1", "priming", 500),
        ("a2", "result", None),
    ]
    assert got[1].answers == "rgp-1"


def _ev(eid, doc):
    return Event(eid, json.dumps(doc), None, doc, ts=1)


def _log(eid, n):
    return _ev(
        eid,
        {
            "jsonrpc": "2.0",
            "method": "notifications/message",
            "params": {"level": "info", "data": str(n)},
        },
    )


def _result(eid, rid, text="done"):
    return _ev(eid, {"jsonrpc": "2.0", "id": rid, "result": {"content": [text]}})


def test_content_ignores_ids_and_progress_tokens():
    a = _ev(
        "x",
        {"method": "notifications/progress", "params": {"progressToken": "rgp-1", "progress": 1}},
    )
    b = _ev(
        "y",
        {"method": "notifications/progress", "params": {"progressToken": "rgp-2", "progress": 1}},
    )
    assert a.content == b.content and a.kind == "progress" and a.progress_token == "rgp-1"
    assert _result("1", "rgp-1").content == _result("2", "rgp-2").content
    assert _result("1", "rgp-1").content != _result("2", "rgp-1", "other").content


def _probe(tmp_path):
    s = Settings(
        url="http://127.0.0.1:9/mcp", out=tmp_path, run_id="t", key=b"k", sink=outputs.Guard()
    )
    return Probe(s, Discovery("2025-11-25", "x", [], False))


def _reference():
    events = [Event("r0", "", 500)] + [_log(f"r{i}", i) for i in range(1, 5)]
    return Answer(200, {}, events + [_result("r5", "ref")])


def _receipts(tmp_path):
    rows = [json.loads(x) for x in (tmp_path / "inbox-probe-t.jsonl").read_text().splitlines()]
    return [r for r in rows if r["stream_id"] == "cut"]


def test_a_replay_that_skips_an_event_leaves_a_hole_in_the_cut_streams_seqs(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [Event("c0", "", 500), _log("c1", 1), _log("c2", 2)], cut=True)
    # The replay after c2 lost "3" and went on with "4" and the answer.
    replay = Answer(200, {}, [_log("c4", 4), _result("c5", "cut")])
    judged = p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    assert judged["missing"] == [(3, "message")] and judged["foreign"] == 0
    got = _receipts(tmp_path)
    assert [(r["event_id"], r["seq"], r["delivery"]) for r in got] == [
        ("c0", 0, "live"),
        ("c1", 1, "live"),
        ("c2", 2, "live"),
        ("c4", 4, "replay"),
        ("c5", 5, "replay"),
    ]
    assert {r["origin_stream_id"] for r in got} == {"cut"}


def test_an_event_of_the_other_stream_keeps_its_origin_and_seq(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [Event("c0", "", 500), _log("c1", 1), _log("c2", 2)], cut=True)
    # A store that mixes streams replays the reference call's "3" (r3) as well.
    replay = Answer(200, {}, [_log("c3", 3), _log("r3", 3), _log("c4", 4), _result("c5", "cut")])
    judged = p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    assert judged["foreign"] == 1 and judged["missing"] == []
    (foreign,) = [r for r in _receipts(tmp_path) if r["event_id"] == "r3"]
    assert foreign["origin_stream_id"] == "ref" and foreign["seq"] == 3
    assert foreign["verdict"] == "accepted"


def test_a_second_delivery_of_one_event_is_a_duplicate_receipt(tmp_path):
    p = _probe(tmp_path)
    cut = Answer(200, {}, [_log("c1", 1), _log("c2", 2)], cut=True)
    replay = Answer(200, {}, [_log("c2", 2), _log("c3", 3), _log("c4", 4), _result("c5", "cut")])
    p._receipts("sid", "ref", "cut", _reference(), cut, [replay])
    verdicts = [(r["event_id"], r["verdict"]) for r in _receipts(tmp_path)]
    assert verdicts.count(("c2", "duplicate")) == 1


def test_stale_cursors_keep_the_shape_of_real_ones():
    real = "23a1ecc6-37ba-471f-9948-325fd0d1437f"
    stale = _stale(real)
    assert stale != real and len(stale) == len(real)
    assert [i for i, c in enumerate(stale) if c == "-"] == [
        i for i, c in enumerate(real) if c == "-"
    ]
    assert _stale("stream-1:12") == "stream-1:1000000012"


def test_the_request_budget_stops_the_run():
    pacer = Pacer(2, 1000.0)
    pacer.take()
    pacer.take()
    with pytest.raises(BudgetExhausted):
        pacer.take()


def test_probe_needs_the_hmac_key(tmp_path, monkeypatch):
    monkeypatch.delenv("REPLAYGATE_HMAC_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["probe", "http://127.0.0.1:9/mcp", "--out", str(tmp_path)])
    assert r.exit_code == 1 and "REPLAYGATE_HMAC_KEY" in str(r.exception)


def test_unknown_scenarios_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", "k")
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(
        cli, ["probe", "http://127.0.0.1:9/mcp", "--out", str(tmp_path), "--scenarios", "nope"]
    )
    assert r.exit_code == 1 and "unknown nope" in str(r.exception)


def test_a_plain_install_runs_other_commands_and_probe_names_its_extra(tmp_path):
    """Without the `probe` extra (mcp, httpx2 blocked): the CLI loads, and `probe` says
    which extra it needs instead of crashing."""
    code = (
        "import sys\n"
        "sys.modules['mcp'] = None\n"
        "sys.modules['httpx2'] = None\n"
        "from replaygate.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    env_run = [sys.executable, "-c", code]
    r = subprocess.run(env_run + ["--help"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "probe" in r.stdout
    r = subprocess.run(
        env_run + ["probe", "http://127.0.0.1:9/mcp", "--out", "o"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"REPLAYGATE_HMAC_KEY": "k", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 1 and "pip install 'replaygate[probe]'" in r.stderr
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import replaygate.cli, sys; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'httpx2')))",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert r.stdout.strip() == "[]"


# -- the run's deadline ----------------------------------------------------------------------


class _Stalling(BaseHTTPRequestHandler):
    """An endpoint that keeps a client waiting: `silent` reads each request and never
    answers; `trickle` completes the handshake and lists a read-only tool, but its calls
    and GET streams send a priming event with `retry:` of an hour, then a progress event
    and keep-alive comments every 0.2 s, forever, never the answer."""

    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def _json(self, code, doc=None, headers=()):
        body = b"" if doc is None else json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _stream(self, rid=None):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(b"id: e0\nretry: 3600000\ndata: \n\n")
            for n in itertools.count(1):
                if n <= 3 and rid is not None:
                    note = {"jsonrpc": "2.0", "method": "notifications/progress",
                            "params": {"progressToken": rid, "progress": n}}  # fmt: skip
                    self.wfile.write(f"id: e{n}\ndata: {json.dumps(note)}\n\n".encode())
                else:
                    self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            return

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.server.mode == "silent":
            time.sleep(120)
            return
        method, rid = body.get("method"), body.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": body["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "stalling", "version": "0"},
            }
            self._json(200, {"jsonrpc": "2.0", "id": rid, "result": result},
                       [("Mcp-Session-Id", "s-" + uuid.uuid4().hex)])  # fmt: skip
        elif rid is None:
            self._json(202)
        elif method == "ping":
            self._json(200, {"jsonrpc": "2.0", "id": rid, "result": {}})
        elif method == "tools/list":
            tool = {"name": "count", "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": True}}  # fmt: skip
            self._json(200, {"jsonrpc": "2.0", "id": rid, "result": {"tools": [tool]}})
        elif method == "tools/call":
            self._stream(rid)
        else:
            error = {"code": -32601, "message": "Method not found"}
            self._json(200, {"jsonrpc": "2.0", "id": rid, "error": error})

    def do_GET(self):  # noqa: N802
        if self.server.mode == "silent":
            time.sleep(120)
            return
        self._stream()

    def do_DELETE(self):  # noqa: N802
        self._json(200)


def _probe_fake(tmp_path, handler, mode, *args):
    """Run `replaygate probe` against a fake endpoint in this process: its completed
    process and how long it took."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.mode = mode
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/mcp"
    try:
        t0 = time.monotonic()
        r = subprocess.run(
            [sys.executable, "-m", "replaygate", "probe", url, "--out", str(tmp_path),
             *args, "--json"],
            env={**os.environ, "REPLAYGATE_HMAC_KEY": "k"}, cwd=tmp_path,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        return r, time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("mode", ["silent", "trickle"])
def test_the_deadline_ends_a_run_against_an_endpoint_that_never_answers(tmp_path, mode):
    r, took = _probe_fake(tmp_path, _Stalling, mode, "--deadline", "4s", "--timeout", "30")
    # Within the deadline, the DELETEs' grace and the interpreter's start: never the
    # 30 s a read may wait, nor the hour the endpoint asks the client to stay away.
    assert took < 25, (took, r.stderr)
    doc = json.loads(r.stdout)
    assert r.returncode == 2 and doc["verdict"] == "cannot_tell", doc
    assert doc["deadline_s"] == 4
    verdicts = {v["scenario"]: v for v in doc["rounds"][0]["scenarios"]}
    assert set(verdicts) == {"resume", "cursors", "dead_session", "origin"}, verdicts
    assert {v["status"] for v in verdicts.values()} == {"cannot_tell"}, verdicts
    assert any("deadline" in v["line"] for v in verdicts.values()), verdicts
    assert (tmp_path / f"probe-{doc['run_id']}.json").exists()


def test_deadline_defaults_cover_the_rounds():
    from replaygate.probe import ROUND_DEADLINE, default_deadline

    assert default_deadline(1, None) == ROUND_DEADLINE
    assert default_deadline(3, None) == 3 * ROUND_DEADLINE
    assert default_deadline(30, 60.0) == 29 * 60 + ROUND_DEADLINE


def test_nothing_starts_after_the_deadline():
    from replaygate.probe.wire import DeadlineReached

    pacer = Pacer(100, 1000.0, deadline=time.monotonic() - 0.1)
    with pytest.raises(DeadlineReached):
        pacer.take()
    pacer.take(cleanup=True)  # the DELETEs of the sessions opened: a short grace
    t0 = time.monotonic()
    Pacer(100, 1000.0, deadline=time.monotonic() + 0.2).pause(3600)
    assert time.monotonic() - t0 < 1


class _QuietResume(_Stalling):
    """A server that stores a call's answer but, on the first resume of a session, sends
    only what came before it and then keeps the stream open in silence (the answer was
    produced while the stream was being attached); a second resume replays it."""

    resumed: dict[str, int] = {}

    def _events(self, rid):
        notes = [
            {"jsonrpc": "2.0", "method": "notifications/progress",
             "params": {"progressToken": rid, "progress": n}}
            for n in (1, 2, 3)
        ]  # fmt: skip
        result = {"jsonrpc": "2.0", "id": rid, "result": {"content": []}}
        return [(f"{rid}.{i + 1}", doc) for i, doc in enumerate([*notes, result])]

    def _send(self, events, stay=0.0):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for eid, doc in events:
                self.wfile.write(f"id: {eid}\ndata: {json.dumps(doc)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.05)
            time.sleep(stay)
        except OSError:
            return

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if body.get("method") != "tools/call":
            self.rfile = io.BytesIO(json.dumps(body).encode())
            self.headers.replace_header("Content-Length", str(len(json.dumps(body))))
            return super().do_POST()
        rid = body["id"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            self.wfile.write(f"id: {rid}.0\nretry: 100\ndata: \n\n".encode())
            for eid, doc in self._events(rid):
                self.wfile.write(f"id: {eid}\ndata: {json.dumps(doc)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            return

    def do_GET(self):  # noqa: N802
        cursor = self.headers.get("Last-Event-ID") or ""
        rid, _, n = cursor.rpartition(".")
        after = [e for e in self._events(rid) if int(e[0].rpartition(".")[2]) > int(n or 0)]
        session = self.headers.get("Mcp-Session-Id") or ""
        first = self.resumed.setdefault(session, 0) == 0
        self.resumed[session] += 1
        self._send(after[:-1] if first else after, stay=60 if first else 0)


def test_a_silent_resumed_stream_is_resumed_again_without_waiting_the_timeout(tmp_path):
    r, _ = _probe_fake(
        tmp_path, _QuietResume, "answer", "--scenarios", "resume", "--tool", "count",
        "--timeout", "25",
    )  # fmt: skip
    doc = json.loads(r.stdout)
    (resume,) = doc["rounds"][0]["scenarios"]
    assert resume["status"] == "pass", resume
    assert resume["detail"]["resumes"] == 2
    # Given up after a few quiet seconds, not after --timeout.
    assert resume["seconds"] < 20, resume


def test_the_probes_marks_are_what_ingest_reads():
    """The header and principal the probe sends (its User-Agent starts with the principal)
    are those ingest knows it by: the probe imports nothing of ingest, so the two are held
    together here (the end-to-end test reads them back from Caddy's log)."""
    from replaygate.ingest import adapters
    from replaygate.probe import wire

    assert wire.PROBE_HEADER == adapters.PROBE_HEADER
    assert wire.PRINCIPAL == adapters.PROBE_PRINCIPAL
    assert adapters.PROBE_AGENT == wire.PRINCIPAL + "/"


def test_an_unfinished_reference_call_says_why():
    """'the reference call did not finish' names its cause: the budget or deadline that kept
    it from being sent, the error or status it ended with, a stream that ended without the
    answer, or a call still running when the resumed one was judged."""
    from replaygate.probe.trials import _unfinished

    assert _unfinished(None, "not sent: budget spent") == "not sent: budget spent"
    assert _unfinished(None, None) == "still running when the resumed call ended"
    failed = Answer(0, {}, error="ReadTimeout: timed out")
    assert _unfinished(failed, None) == "ReadTimeout: timed out"
    assert _unfinished(Answer(502, {}), None) == "HTTP 502"
    streamed = Answer(200, {"content-type": "text/event-stream"}, events=[Event(None, "{}")])
    assert _unfinished(streamed, None) == "its stream ended after 1 events without the answer"


class _LostAnswers(_Stalling):
    """An endpoint behind a proxy that loses the rest of a POST's streamed answer now and
    then (Debian's Caddy 2.6, tests/test_e2e_real.py's CADDYFILE): the probe's initialize
    is answered 200 with a session id and a stream that ends after its priming event, its
    tools/call after the priming event and one message, without the answer. A foreign
    Origin is refused 403, a foreign Host 421. The SDK client's discovery is served whole."""

    def _cut(self, rid, headers=(), messages=0):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b"id: e0\nretry: 100\ndata: \n\n")
        for n in range(1, messages + 1):
            note = {"jsonrpc": "2.0", "method": "notifications/message",
                    "params": {"level": "info", "data": str(n)}}  # fmt: skip
            self.wfile.write(f"id: e{n}\ndata: {json.dumps(note)}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        body = json.loads(raw or b"{}")
        rid, method = body.get("id"), body.get("method")
        if str(rid).startswith("rgp-") and method in ("initialize", "tools/call"):
            if self.headers.get("Origin") == "https://replaygate-probe.invalid":
                return self._json(403, {"error": "Origin not allowed"})
            if self.headers.get("Host") == "replaygate-probe.invalid":
                return self._json(421, {"error": "Host not allowed"})
            if method == "initialize":
                return self._cut(rid, [("Mcp-Session-Id", "s-" + uuid.uuid4().hex)])
            return self._cut(rid, messages=1)
        self.rfile = io.BytesIO(raw)
        return super().do_POST()


def test_an_answer_lost_on_the_way_is_not_the_servers_verdict(tmp_path):
    """A proxy that cuts a POST's streamed answer short is not a server that refuses the
    allowed Origin (it issued a session for it) nor a tool that answered within the cut:
    the origin scenario passes on the session it was given, and resume says the call's
    stream ended before its answer."""
    r, _ = _probe_fake(
        tmp_path, _LostAnswers, "answer", "--scenarios", "resume,origin", "--tool", "count",
        "--timeout", "10",
    )  # fmt: skip
    doc = json.loads(r.stdout)
    verdicts = {v["scenario"]: v for v in doc["rounds"][0]["scenarios"]}
    assert verdicts["origin"]["status"] == "pass", verdicts["origin"]
    assert verdicts["origin"]["detail"]["allowed_origin"] == 200
    resume = verdicts["resume"]
    assert resume["status"] == "cannot_tell", resume
    assert "ended before its answer" in resume["line"] and "answered within" not in resume["line"]


class _Forgetful(_Stalling):
    """An endpoint that forgets its sessions (a restart between two requests): every
    tools/call on a session is answered 404, as a server answers a session it does not
    know. Behind it a proxy that answers a Host it has no site for itself, with an empty
    200 (Caddy). Every request is noted in `seen`, in order: (method, session id sent,
    JSON-RPC method, status)."""

    seen: list[tuple[str, str | None, str | None, int]] = []

    def _note(self, method, rpc, status):
        self.seen.append((method, self.headers.get("Mcp-Session-Id"), rpc, status))

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        body = json.loads(raw or b"{}")
        rpc = body.get("method")
        if self.headers.get("Host") == "replaygate-probe.invalid":
            self._note("POST", rpc, 200)
            return self._json(200)
        if self.headers.get("Origin") == "https://replaygate-probe.invalid":
            self._note("POST", rpc, 403)
            return self._json(403, {"error": "Origin not allowed"})
        if rpc == "tools/call" and self.headers.get("Mcp-Session-Id"):
            self._note("POST", rpc, 404)
            return self._json(404, {"error": "Session not found"})
        self._note("POST", rpc, 200 if body.get("id") is not None else 202)
        self.rfile = io.BytesIO(raw)
        return super().do_POST()

    def do_GET(self):  # noqa: N802
        self._note("GET", None, 405)
        self._json(405)

    def do_DELETE(self):  # noqa: N802
        self._note("DELETE", None, 200)
        self._json(200)


def test_the_probe_starts_a_new_session_after_a_404_and_sends_nothing_after_a_proxys_answer(
    tmp_path,
):
    """A request on a session answered 404 means the session is gone: a client MUST start
    a new one (an initialize without a session id) and never use the old one again (the
    probe's own traffic must not be a reinit_missing). An initialize that a proxy answered
    itself (no session, no answer) initialized nothing: no notifications/initialized nor
    ping follows it."""
    _Forgetful.seen = []
    r, _ = _probe_fake(
        tmp_path, _Forgetful, "forget", "--scenarios", "resume,origin", "--tool", "count",
        "--timeout", "5",
    )  # fmt: skip
    doc = json.loads(r.stdout)
    verdicts = {v["scenario"]: v for v in doc["rounds"][0]["scenarios"]}
    assert verdicts["resume"]["status"] == "fail", verdicts  # its calls answered 404
    seen = list(_Forgetful.seen)
    assert not [
        s for s in seen if s[2] in ("notifications/initialized", "ping") and s[1] is None
    ], seen
    dead = {s[1]: i for i, s in enumerate(seen) if s[3] == 404}  # its last 404
    assert dead, seen
    for sid, last in dead.items():
        # (two connections of the session may each have had a call in flight)
        first = next(i for i, s in enumerate(seen) if s[1] == sid and s[3] == 404)
        assert any(s[2] == "initialize" and s[1] is None for s in seen[first + 1 :]), seen
        assert not [s for s in seen[last + 1 :] if s[1] == sid and s[0] != "DELETE"], seen
