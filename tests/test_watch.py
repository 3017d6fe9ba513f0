"""`replaygate watch` end to end: a writer process appends to the logs while watch runs;
a local HTTP receiver gets the one decision change, once (after a failed delivery)."""

from __future__ import annotations

import gzip
import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest

from replaygate.duration import parse
from replaygate.notify import message, slack_escape

from .procs import watch_cycle

SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
CONF = str(SAMPLE / "replaygate.toml")
# A proxy record inside the open stage's window that carries a raw session id: the
# raw_session_ids gate fails and the stage turns from PROCEED to ROLLBACK.
RAW_ID_LINE = (
    '{"ts":"2026-11-28T06:30:00.000Z","method":"POST","status":200,"path":"/mcp",'
    '"duration_ms":12.0,"session_id":"raw-session-id-0001","origin":"https://app.example.com"}\n'
)
WRITER = """
import sys, time, pathlib
log, go = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
line = sys.argv[3]
while not go.exists():
    time.sleep(0.1)
with open(log, "a") as fh:          # half a line: watch must wait for the rest
    fh.write(line[:40]); fh.flush()
    time.sleep(3)
    fh.write(line[40:]); fh.flush()
print("written", flush=True)
"""


def _plain_copy(dst: Path) -> None:
    dst.mkdir()
    for f in SAMPLE.iterdir():
        if f.suffix in (".md", ".toml") or f.name in ("truth.json", "recipe.json"):
            continue
        if f.name.endswith(".gz"):
            (dst / f.name[:-3]).write_bytes(gzip.decompress(f.read_bytes()))
        else:
            shutil.copy(f, dst / f.name)


class Receiver(http.server.BaseHTTPRequestHandler):
    attempts: list[dict] = []
    accepted: list[dict] = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Receiver.attempts.append(body)
        code = 503 if len(Receiver.attempts) == 1 else 200  # the first delivery fails
        if code == 200:
            Receiver.accepted.append(body)
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args):
        pass


def _cli(*args, **kw):
    return subprocess.run(
        [sys.executable, "-m", "replaygate", *args], capture_output=True, text=True, **kw
    )


def _wait(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_watch_against_a_writer_notifies_one_decision_change_once(tmp_path):
    logs = tmp_path / "logs"
    _plain_copy(logs)
    db = tmp_path / "fleet.duckdb"
    first = _cli("ingest", str(logs), "--db", str(db), "--config", CONF)
    assert first.returncode == 0, first.stderr
    Receiver.attempts, Receiver.accepted = [], []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/hook"
    go = tmp_path / "go"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(logs / "proxy-access.jsonl"), str(go), RAW_ID_LINE],
        stdout=subprocess.PIPE,
        text=True,
    )
    watch = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db)]
        + ["--config", CONF, "--every", "1s", "--notify", url]
        + ["--dashboard-url", "http://dash.example:8501"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: watch_cycle(db) >= 2, 120, "two quiet cycles")
        go.touch()
        assert writer.wait(60) == 0
        _wait(lambda: Receiver.accepted, 180, "the notification")
        seen = watch_cycle(db)
        _wait(lambda: watch_cycle(db) >= seen + 3, 120, "three more cycles")
    finally:
        watch.send_signal(signal.SIGTERM)
        out, err = watch.communicate(timeout=120)
        writer.kill()
        server.shutdown()
    assert watch.returncode == 0, err
    assert "stopped after" in err
    lines = out.splitlines()
    cycles = [ln for ln in lines if " #" in ln and " | " in ln]
    assert len(cycles) >= 6
    # One line per cycle; the half-written line was neither loaded nor quarantined early.
    assert "quarantined" not in out
    assert sum("+1 proxy" in ln for ln in cycles) == 1
    changes = [ln for ln in lines if "stage write-10pct-v2: PROCEED -> ROLLBACK" in ln]
    assert len(changes) == 1
    # Delivered once, after one failed attempt that was retried.
    assert len(Receiver.accepted) == 1
    assert len(Receiver.attempts) == 2
    doc = Receiver.accepted[0]
    assert doc["stage"] == "write-10pct-v2"
    assert (doc["previous"], doc["decision"]) == ("PROCEED", "ROLLBACK")
    assert doc["reasons"] == ["Raw session ids in logs: 1 raw session id in logs (threshold 0)"]
    assert doc["url"] == "http://dash.example:8501/?stage=write-10pct-v2"
    assert "ROLLBACK" in doc["text"] and "Raw session ids in logs" in doc["text"]
    assert [g["id"] for g in doc["gates"]] == ["raw_session_ids"]
    # The published database is consistent and readable while nobody writes it.
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM proxy WHERE raw_session_id").fetchone()[0] >= 1
    con.close()
    assert not (tmp_path / ".fleet.duckdb.watch").exists()


def test_failed_cycles_are_reported_and_retried(tmp_path):
    logs = tmp_path / "logs"
    _plain_copy(logs)
    missing = tmp_path / "later"
    out = _cli(
        "watch", str(missing), "--db", str(tmp_path / "f.duckdb"), "--every", "0.2s",
        "--cycles", "3", timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    failed = [ln for ln in out.stdout.splitlines() if "failed:" in ln]
    assert len(failed) == 3 and "no such file or folder" in failed[0]


def test_overrun_cycles_are_skipped_and_said(tmp_path, monkeypatch):
    import types

    from replaygate import watch as watch_module
    from replaygate.core.config import Config
    from replaygate.watch import Cycle, Watcher

    lines: list[str] = []
    w = Watcher([str(tmp_path)], str(tmp_path / "f.duckdb"), Config(), every=0.1, say=lines.append)
    calls = []
    # A clock of the test's own: the first cycle takes 0.35 s of it and waiting advances
    # it, so a loaded machine's slow sleep cannot change how many ticks were missed.
    now = [100.0]

    class Stop(threading.Event):
        def wait(self, timeout=None):
            now[0] += timeout or 0.0
            return self.is_set()

    monkeypatch.setattr(
        watch_module,
        "time",
        types.SimpleNamespace(
            monotonic=lambda: now[0],
            **{k: getattr(time, k) for k in ("perf_counter", "strptime", "sleep")},
        ),
    )

    def slow(n):
        calls.append(now[0])
        now[0] += 0.35 if n == 1 else 0.0
        return Cycle(n, __import__("datetime").datetime.now())

    monkeypatch.setattr(w, "cycle", slow)
    w.run(Stop(), cycles=3)
    skipped = [ln for ln in lines if "skipped" in ln]
    assert len(skipped) == 1 and "skipped 3 cycles" in skipped[0]
    # The next cycle starts on the next tick, not right away and not three times.
    assert calls[1] - calls[0] >= 0.39


def test_durations():
    assert parse("15s") == 15 and parse("1m") == 60 and parse("1h30m") == 5400
    assert parse("500ms") == 0.5 and parse("2") == 2
    with pytest.raises(ValueError):
        parse("15 minutes")


def test_message_is_slack_compatible_and_escapes_logged_values():
    doc = message(
        {
            "stage": "<!channel> & co",
            "decision": "HOLD",
            "previous": "PROCEED",
            "reasons": ["recovery_p99: <b>"],
            "gates": [],
        },
        "http://127.0.0.1:8501/",
    )
    assert "<!channel>" not in doc["text"] and "&lt;!channel&gt; &amp; co" in doc["text"]
    assert doc["url"] == "http://127.0.0.1:8501/?stage=%3C%21channel%3E+%26+co"
    assert doc["stage"] == "<!channel> & co"  # the structured fields stay as they are
    assert os.environ.get("REPLAYGATE_HMAC_KEY")  # conftest's key reaches the children
    assert slack_escape("a<b>") == "a&lt;b&gt;"
