"""`watch --notify` under abuse: a webhook that never answers delays nobody else, queues
are bounded, a stop delivers or logs what was pending, only http(s) URLs, failures name
the HTTP status, only changes are announced, and a killed watch is seen as dead."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from replaygate.core import lock as dblock
from replaygate.core.config import Config
from replaygate.notify import Notifier, check_url
from replaygate.watch import Cycle, Watcher, check, heartbeat_path


class _Hung:
    """Accepts connections and reads, never answers (a webhook that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(50)
        self.conns: list[socket.socket] = []
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook/secret"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


class _Answering:
    """Answers every POST with `code` (after `delay` seconds), recording the bodies."""

    def __init__(self, code: int = 200, delay: float = 0.0, location: str | None = None):
        got: list[dict] = []
        self.got = got

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                time.sleep(delay)
                self.send_response(code)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _doc(stage: str, decision: str = "ROLLBACK") -> dict:
    return {"stage": stage, "decision": decision, "text": stage}


def _until(pred, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


@pytest.fixture
def hung():
    h = _Hung()
    yield h
    h.close()


def test_a_hung_webhook_delays_no_other_url_and_never_the_sender(hung):
    good = _Answering()
    lines: list[str] = []
    n = Notifier([hung.url, good.url], log=lines.append, timeout=30, grace=0.5).start()
    try:
        t0 = time.monotonic()
        for i in range(3):
            n.send(_doc(f"s{i}"))
        assert time.monotonic() - t0 < 0.5  # sending never waits on a delivery
        # The answering URL gets all three while the other hangs on the first.
        assert _until(lambda: len(good.got) == 3, 10), good.got
        assert time.monotonic() - t0 < 10
        assert [d["stage"] for d in good.got] == ["s0", "s1", "s2"]
    finally:
        pending = n.close()
        good.close()
    # Stopped while the hung URL still held all three: each is logged, none silently lost.
    assert sorted(d["stage"] for _, d in pending) == ["s0", "s1", "s2"]
    said = [ln for ln in lines if "stopped before" in ln]
    assert len(said) == 3 and all("127.0.0.1" in ln for ln in said)
    assert not any("secret" in ln for ln in lines)  # the webhook's path is its secret


def test_queues_are_bounded_and_a_drop_is_said(hung):
    lines: list[str] = []
    n = Notifier([hung.url], log=lines.append, timeout=30, limit=2, grace=0.2).start()
    n.send(_doc("first"))
    assert _until(lambda: hung.conns, 5)  # the first is in flight, hanging
    t0 = time.monotonic()
    for i in range(5):
        n.send(_doc(f"s{i}"))
    assert time.monotonic() - t0 < 0.5
    assert n.dropped == 3
    assert sum("dropped the oldest" in ln for ln in lines) == 3
    pending = n.close()
    assert [d["stage"] for _, d in pending] == ["first", "s3", "s4"]


def test_stop_delivers_what_is_queued_within_the_grace():
    slow = _Answering(delay=0.3)
    lines: list[str] = []
    n = Notifier([slow.url], log=lines.append, grace=10).start()
    for i in range(4):
        n.send(_doc(f"s{i}"))
    t0 = time.monotonic()
    pending = n.close()
    slow.close()
    assert pending == [] and n.sent == 4 and len(slow.got) == 4
    assert time.monotonic() - t0 < 5
    assert not any("stopped before" in ln for ln in lines)


def test_watch_flushes_on_stop_and_logs_what_never_went(hung):
    """The watch loop's stop (SIGTERM/SIGINT set the same event) hands the queue over to
    the notifier's flush: a ROLLBACK stuck behind a hung webhook is logged by name."""
    lines: list[str] = []
    n = Notifier([hung.url], log=lines.append, timeout=30, grace=0.5)
    w = Watcher(["x"], "/nonexistent/f.duckdb", Config(), every=0.1, notifier=n, say=lines.append)
    change = {
        "stage": "write-10pct",
        "decision": "ROLLBACK",
        "previous": "PROCEED",
        "reasons": [],
        "gates": [],
    }
    w.own = lambda: None  # type: ignore[method-assign]
    w.cycle = lambda k: Cycle(k, dt.datetime.now(dt.UTC), changes=[change])  # type: ignore[method-assign]
    t0 = time.monotonic()
    w.run(threading.Event(), cycles=1)
    assert time.monotonic() - t0 < 5
    assert any(
        "stopped before the write-10pct ROLLBACK change reached http://127.0.0.1" in ln
        for ln in lines
    ), lines


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "data:text/plain,hello",
        "ftp://example.com/x",
        "gopher://example.com/",
        "http:///no-host",
        "hooks.slack.com/services/x",
        "http://example.com:port/",
    ],
)
def test_only_http_urls_are_accepted(url):
    assert check_url(url)
    with pytest.raises(ValueError):
        Notifier([url])


def test_http_urls_are_accepted():
    assert check_url("https://hooks.slack.com/services/T/B/x") is None
    assert check_url("HTTP://127.0.0.1:8080/hook") is None


def test_watch_refuses_a_file_url_in_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "replaygate", "watch", str(tmp_path), "--db"]
        + [str(tmp_path / "f.duckdb"), "--notify", "file:///etc/passwd", "--cycles", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.strip().splitlines() == [
        "replaygate: error: --notify URL must be an http:// or https:// URL (got a file: URL): "
        "webhooks are posted to over http(s)"
    ]
    assert not heartbeat_path(str(tmp_path / "f.duckdb")).exists()


@pytest.mark.parametrize(
    ("code", "said", "attempts"),
    [
        (500, "HTTP 500 Internal Server Error", 3),  # retried, then given up
        (404, "HTTP 404 Not Found", 1),  # refused: not retried
        (429, "HTTP 429 Too Many Requests", 3),
    ],
)
def test_failures_name_the_http_status(code, said, attempts):
    srv = _Answering(code)
    lines: list[str] = []
    n = Notifier([srv.url], log=lines.append, backoff=(0.05, 0.05)).start()
    n.send(_doc("canary"))
    n.close(grace=10)
    srv.close()
    assert len(srv.got) == attempts
    (line,) = [ln for ln in lines if "could not deliver" in ln]
    assert f"({said})" in line and "canary ROLLBACK" in line


def test_a_redirect_is_not_followed():
    target = _Answering()
    redirect = _Answering(307, location=target.url)
    lines: list[str] = []
    n = Notifier([redirect.url], log=lines.append, backoff=(0.05,)).start()
    n.send(_doc("canary"))
    n.close(grace=10)
    redirect.close()
    target.close()
    assert target.got == [] and len(redirect.got) == 1
    assert any("HTTP 307 Temporary Redirect, a redirect (not followed)" in ln for ln in lines)


def test_a_refused_connection_and_a_timeout_say_so(hung):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/"
    lines: list[str] = []
    n = Notifier([closed, hung.url], log=lines.append, backoff=(), timeout=0.3).start()
    n.send(_doc("canary"))
    n.close(grace=10)
    assert any("(connection refused)" in ln for ln in lines), lines
    assert any("(no answer within 0.3 s)" in ln for ln in lines), lines


# -- what is announced ----------------------------------------------------------------


def _state(decision: str, fail: tuple[str, ...] = ()) -> dict:
    gates = {"raw_session_ids": "pass", "recovery_p99": "pass"}
    gates.update(dict.fromkeys(fail, "fail"))
    return {"decision": decision, "reasons": [], "open": True, "gates": gates}


def test_a_new_stages_first_decision_is_announced_whatever_it_is():
    w = Watcher([], "f.duckdb", Config())
    w.known = {"canary": _state("PROCEED")}
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    got = w._changes({"canary": _state("PROCEED"), "write-10pct": _state("HOLD")}, now)
    assert [(c["stage"], c["previous"], c["decision"]) for c in got] == [
        ("write-10pct", None, "HOLD")
    ]
    # Unchanged stages are not announced again; a gate that starts failing is.
    w.known = {"canary": _state("ROLLBACK", ("raw_session_ids",))}
    again = {"canary": _state("ROLLBACK", ("raw_session_ids",))}
    assert w._changes(again, now) == []
    worse = {"canary": _state("ROLLBACK", ("raw_session_ids", "recovery_p99"))}
    (c,) = w._changes(worse, now)
    assert c["gates"] == [{"id": "recovery_p99", "status": "fail", "previous": "pass"}]


def test_without_an_earlier_state_the_first_cycle_announces_nothing(tmp_path):
    """Nothing analysed when watch starts: the stages its first cycle finds (ROLLBACKs
    that ended days ago among them) are the starting state, not changes."""
    from .test_watch import CONF, _plain_copy

    logs = tmp_path / "logs"
    _plain_copy(logs)
    from replaygate.core.config import load

    lines: list[str] = []
    w = Watcher([str(logs)], str(tmp_path / "f.duckdb"), load(CONF), say=lines.append)
    w.run(threading.Event(), cycles=1)
    # The sample fleet has a rolled-back stage, and a stage still open.
    assert "ROLLBACK" in {v["decision"] for v in (w.known or {}).values()}
    assert not [ln for ln in lines if " stage " in ln and "->" in ln], lines


def test_the_message_says_a_stage_is_new():
    from replaygate.notify import message

    doc = message(
        {"stage": "canary", "decision": "HOLD", "previous": None, "reasons": []}, "http://d"
    )
    assert "is HOLD (new stage)" in doc["text"]


# -- liveness --------------------------------------------------------------------------


def _heartbeat_pid(db: Path) -> int | None:
    try:
        return json.loads(heartbeat_path(str(db)).read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def test_a_killed_watch_is_seen_as_dead_and_a_stopped_one_as_stopped(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    db = tmp_path / "f.duckdb"

    def run_check():
        return subprocess.run(
            [sys.executable, "-m", "replaygate", "watch", "--check", "--db", str(db)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    r = run_check()
    assert r.returncode == 1 and "no watch has run" in r.stdout
    for how in (signal.SIGKILL, signal.SIGTERM):
        proc = subprocess.Popen(
            [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db)]
            + ["--every", "0.5s"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert _until(lambda p=proc.pid: _heartbeat_pid(db) == p, 60)
            r = run_check()
            assert r.returncode == 0, r.stdout
            assert f"watch (pid {proc.pid}) is running" in r.stdout
        finally:
            proc.send_signal(how)
            proc.wait(60)
        hb = json.loads(heartbeat_path(str(db)).read_text())
        r = run_check()
        assert r.returncode == 1
        if how == signal.SIGKILL:
            # The file still says it was fine; the lock that died with it says otherwise.
            assert hb["state"] == "running" and hb["ok"] is True
            assert f"pid {proc.pid} is gone without stopping (killed?)" in r.stdout
        else:
            assert hb["state"] == "stopped" and hb["stale_after"] is None
            assert "watch is not running: it stopped at" in r.stdout


def test_a_hung_watch_is_stale_though_it_holds_the_lock(tmp_path):
    db = str(tmp_path / "f.duckdb")
    at = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)
    lk = dblock.acquire(db, dblock.WATCH, wait=0)
    try:
        w = Watcher([], db, Config(), every=15)
        w._heartbeat(Cycle(7, at, seconds=2.0))
        hb = json.loads(heartbeat_path(db).read_text())
        assert hb["stale_after"] == "2026-12-01T09:01:04Z"  # 2 x (15 s + 2 s) + 30 s
        assert check(db, now=at + dt.timedelta(seconds=60)) == (
            True,
            f"watch (pid {os.getpid()}) is running; last cycle #7 at 2026-12-01T09:00:00Z",
        )
        alive, line = check(db, now=at + dt.timedelta(seconds=65))
        assert not alive and "heartbeat is stale" in line
    finally:
        lk.release()
    assert Path(db).with_name("f.duckdb.watch.json").exists()
