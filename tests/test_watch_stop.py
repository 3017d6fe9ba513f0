"""`replaygate watch` stops promptly on SIGTERM or SIGINT whatever its cycle is doing (a
DuckDB operator that runs for a minute, Python code, a copy), abandons that cycle and
leaves the published database as it was (replaygate/watch.py, "Stopping")."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

HEADER = "ts,stage,release,action,percent,scope,actor,note\n"
T0 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def _rollout(n: int, start: int = 0) -> str:
    at = [(i, T0 + dt.timedelta(seconds=10 * i)) for i in range(start, start + n)]
    return "".join(f"{t:%Y-%m-%dT%H:%M:%S}.000Z,stage-{i},,start,5.0,read,bot,\n" for i, t in at)


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _published(tmp_path: Path) -> tuple[Path, Path]:
    """A logs folder and the database watch published from it (one cycle)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "rollout.csv").write_text(HEADER + _rollout(3))
    db = tmp_path / "f.duckdb"
    done = subprocess.run(
        [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db)]
        + ["--cycles", "1"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return logs, db


def _left_behind(tmp_path: Path) -> list[str]:
    return sorted(
        p.name for p in tmp_path.iterdir() if p.name.endswith((".watch", ".publish", ".wal"))
    )


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_cycle_over_100000_stages_within_seconds(tmp_path, sig):
    """The real shape: a rollout log of 100,000 stages makes the first cycle run for
    minutes (one DuckDB statement alone ran 90 s); watch took the signal only after it."""
    logs, db = _published(tmp_path)
    before = _digest(db)
    with open(logs / "rollout.csv", "a") as fh:
        fh.write(_rollout(100_000, start=3))
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        work = tmp_path / ".f.duckdb.watch"
        deadline = time.monotonic() + 60
        while not work.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert work.exists(), "the cycle never started"
        time.sleep(3)  # well inside the cycle (ingest, then the analysis)
        assert proc.poll() is None
        proc.send_signal(sig)
        t0 = time.monotonic()
        out, err = proc.communicate(timeout=15)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    # Generous for a loaded 2-core machine: the cycle alone runs for minutes.
    assert took < 8, f"watch took {took:.1f} s to stop"
    assert "stopped after 0 cycles; cycle #1 was interrupted and nothing of it published" in err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    assert _digest(db) == before
    assert _left_behind(tmp_path) == []
    assert json.loads((tmp_path / "f.duckdb.watch.json").read_text())["state"] == "stopped"


def _stop_in_process(monkeypatch, tmp_path, sig, slow_step):
    """Run `watch` in this process with `slow_step` patched in (it calls `arm()` when it
    has started); the signal is sent then. Seconds from the signal to watch's return."""
    from replaygate import watch

    logs, db = _published(tmp_path)
    before = _digest(db)
    with open(logs / "rollout.csv", "a") as fh:
        fh.write(_rollout(2, start=3))  # new data: this cycle would publish
    sent: list[float] = []

    def arm():
        if not sent:
            sent.append(time.monotonic())
            os.kill(os.getpid(), sig)

    slow_step(watch, arm)
    t0 = time.monotonic()
    watch.main([str(logs)], str(db), None, 3600.0, (), "http://x", "auto", None)
    took = time.monotonic() - (sent[0] if sent else t0)
    assert sent, "the slow step never ran"
    assert _digest(db) == before
    assert _left_behind(tmp_path) == []
    return took


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_a_cycle_busy_in_python(monkeypatch, tmp_path, capsys, sig):
    """A cycle in a long stretch of Python (100,000 stages' evaluations) is abandoned too:
    `Interrupted` is raised into its thread, not waited for."""

    def slow_step(watch, arm):
        def busy(self, con, baseline=False):
            arm()
            end = time.monotonic() + 20
            while time.monotonic() < end:  # pure Python, never back in DuckDB
                sum(range(1000))
            return {}

        monkeypatch.setattr(watch.Watcher, "_decisions", busy)

    took = _stop_in_process(monkeypatch, tmp_path, sig, slow_step)
    assert took < 5, f"watch took {took:.1f} s to stop"
    err = capsys.readouterr().err
    assert "stopped after 0 cycles; cycle #1 was interrupted" in err


def test_a_signal_during_the_publish_copy_publishes_nothing(monkeypatch, tmp_path, capsys):
    """The publish copies in steps and looks for a stop between two: a stop before the
    rename leaves the published database as it was and no temporary file."""

    def slow_step(watch, arm):
        monkeypatch.setattr(watch, "_COPY_STEP", 4096)
        real = os.sendfile
        publishing = threading.Event()
        publish = watch.Watcher.publish

        def marked(self):
            publishing.set()
            return publish(self)

        def slow(out, in_, offset, count):
            if publishing.is_set():
                arm()
                time.sleep(0.02)  # a large database: many steps
            return real(out, in_, offset, count)

        monkeypatch.setattr(watch.Watcher, "publish", marked)
        monkeypatch.setattr(os, "sendfile", slow)

    took = _stop_in_process(monkeypatch, tmp_path, signal.SIGTERM, slow_step)
    assert took < 5, f"watch took {took:.1f} s to stop"
    assert "cycle #1 was interrupted" in capsys.readouterr().err
