"""One writer per database (core/lock.py): a write beside `watch` is refused with one
line instead of vanishing at watch's next publish; the lock dies with its holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from replaygate.core import db as dbm
from replaygate.core import lock
from replaygate.core.config import Config
from replaygate.watch import Watcher

from .procs import stop, watch_cycle


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "replaygate", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "REPLAYGATE_ACTOR": "ci", **(env or {})},
    )


def _rollouts(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT action, stage FROM rollout ORDER BY ts").fetchall()
    finally:
        con.close()


def _wait(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_writes_beside_a_running_watch_are_refused_not_lost(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    db = tmp_path / "fleet.duckdb"
    start = ("--release", "r1", "--stage", "canary", "--at", "2026-11-28T04:00:00Z")
    assert _cli("rollout", "start", *start, "--to", str(logs / "rollout.jsonl")).returncode == 0
    w = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db), "--every", "1s"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait(lambda: watch_cycle(db) >= 1, 60, "watch's first cycle")
        assert (lock.holder(db) or {}).get("role") == "watch"
        rb = ("--release", "r1", "--stage", "canary", "--at", "2026-11-28T05:00:00Z")
        for args in (
            ("rollout", "rollback", *rb, "--db", str(db)),
            ("ingest", str(logs), "--db", str(db)),
        ):
            r = _cli(*args)
            assert r.returncode == 1, (args, r.stdout, r.stderr)
            err = r.stderr.strip()
            assert len(err.splitlines()) == 1 and "owned by `replaygate watch`" in err, err
        # The way that works beside watch: a record in a log watch reads.
        assert _cli("rollout", "rollback", *rb, "--to", str(logs / "rollout.jsonl")).returncode == 0
        _wait(lambda: ("rollback", "canary") in _rollouts(db), 60, "the rollback published")
    finally:
        stop([w])
    assert lock.holder(db) is None
    # Once watch has stopped, the database takes direct writes again.
    fin = ("--release", "r1", "--stage", "canary", "--at", "2026-11-28T06:00:00Z")
    r = _cli("rollout", "finish", *fin, "--db", str(db))
    assert r.returncode == 0, r.stderr
    assert ("complete", "canary") in _rollouts(db)


def test_in_process_writers_meet_the_same_lock(tmp_path):
    db = tmp_path / "x.duckdb"
    w = Watcher([str(tmp_path)], str(db), Config(), say=lambda *_: None)
    w.own()
    try:
        for role in ("ingest", "rollout", "record"):
            with pytest.raises(lock.DatabaseBusy, match="owned by `replaygate watch`"):
                dbm.connect(str(db), role=role)
        second = Watcher([str(tmp_path)], str(db), Config(), say=lambda *_: None)
        with pytest.raises(lock.DatabaseBusy, match="one watch per database"):
            second.own()
    finally:
        w.close()
    con = dbm.connect(str(db), role="ingest")
    assert (lock.holder(db) or {}).get("role") == "ingest"
    del con
    assert lock.holder(db) is None


def test_a_writer_killed_by_sigkill_leaves_no_lock(tmp_path):
    db = tmp_path / "k.duckdb"
    code = (
        "import sys, time; from replaygate.core import db as dbm; "
        "con = dbm.connect(sys.argv[1], role='ingest'); print('held', flush=True); "
        "time.sleep(60)"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        assert (lock.holder(db) or {}).get("pid") == p.pid
        with pytest.raises(lock.DatabaseBusy, match=r"being written by `replaygate ingest`"):
            lock.acquire(str(db), "rollout", wait=0.3)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert lock.holder(db) is None
    dbm.connect(str(db), role="rollout").close()
