"""Helpers for tests that start processes: a free port, waiting until something listens
on it, stopping what was started, the cycle a running `watch` has reached, and the pieces
of the end-to-end runs (the recorder's example MCP server, Caddy in front of a server,
a `replaygate probe` run)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replaygate.watch import heartbeat_path

ROOT = Path(__file__).resolve().parent.parent

# The marks of a test module that runs real Caddy and nginx (Debian's) in front of a server.
REAL_PROXIES = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("caddy") and shutil.which("nginx")),
        reason="Debian's caddy and nginx are not installed",
    ),
]


# Ports handed out in this process. A fixture picks every port before anything binds one
# (a server's imports take seconds on a busy machine), and the kernel may hand the same
# free port out twice meanwhile: two servers would then race for it.
_GIVEN: set[int] = set()

# `./dev test` runs two pytest processes at once, and the kernel may hand a port one of them
# picked to the other too. It gives each its own half of the ports (0 or 1), so the two
# never hand out the same port: the half of port p is p // 2 % 2, not p % 2, as Linux
# hands out only odd ports to a bind to port 0 while it can.
PORT_HALF = "REPLAYGATE_TEST_PORT_HALF"


def free_port() -> int:
    """A port nothing listens on now and that this process has not handed out before, of
    this process's half of the ports when it has one (`PORT_HALF`)."""
    half = int(os.environ[PORT_HALF]) if PORT_HALF in os.environ else None
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if half is not None and port // 2 % 2 != half:
            continue
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port


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


def example_server(
    ledger: Path, log: Path, logs: contextlib.ExitStack, key: str, *args: str
) -> tuple[subprocess.Popen, int]:
    """The recorder's example MCP server (the official Python SDK's, with the recorder) on a
    free port, its ledger at `ledger`, its stderr in `log`; `args` are further options of
    it (`--event-store tests.e2e_stores:...` is found from the repository root)."""
    port = free_port()
    cmd = [sys.executable, "-m", "replaygate.recorder.example_server"]
    cmd += ["--port", str(port), "--ledger", str(ledger), *args]
    env = dict(os.environ, REPLAYGATE_HMAC_KEY=key, PYTHONPATH=str(ROOT))
    err = logs.enter_context(open(log, "w"))  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    return proc, port


def caddy(d: Path, caddyfile: str, logs: contextlib.ExitStack) -> subprocess.Popen:
    """Caddy (Debian's) run with this Caddyfile, written to d/Caddyfile; its own log in
    d/caddy.log."""
    (d / "Caddyfile").write_text(caddyfile)
    return subprocess.Popen(
        ["caddy", "run", "--config", str(d / "Caddyfile"), "--adapter", "caddyfile"],
        stdout=subprocess.DEVNULL,
        stderr=logs.enter_context(open(d / "caddy.log", "w")),  # noqa: SIM115
    )


def probe(
    url: str, out: Path, key: str, *args: str, cwd: Path | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`replaygate probe URL --out OUT --json ARGS` in a process of its own; its summary is
    its stdout (asserted to be there, else its stderr says why)."""
    run = subprocess.run(
        [sys.executable, "-m", "replaygate", "probe", url, "--out", str(out), "--json", *args],
        env=dict(os.environ, REPLAYGATE_HMAC_KEY=key),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.stdout, run.stderr
    return run
