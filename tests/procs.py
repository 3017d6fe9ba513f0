"""Helpers for tests that start processes: a free port, waiting until something listens
on it, stopping what was started, and the cycle a running `watch` has reached."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from replaygate.watch import heartbeat_path

# The marks of a test module that runs real Caddy and nginx (Debian's) in front of a server.
REAL_PROXIES = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("caddy") and shutil.which("nginx")),
        reason="Debian's caddy and nginx are not installed",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30) -> None:
    """Return once something accepts connections on the port; RuntimeError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port}")


def stop(procs: list[subprocess.Popen]) -> None:
    """Terminate every process, then kill those that do not end within ten seconds."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()


def watch_cycle(db: Path) -> int:
    """The last cycle `watch` finished on this database (0 before the first)."""
    try:
        return json.loads(heartbeat_path(str(db)).read_text())["cycle"]
    except (OSError, ValueError, KeyError):
        return 0
