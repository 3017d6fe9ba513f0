"""Overhead of the ledger recorder on an SDK server's request latency.

Starts the example server twice on loopback — with a plain in-memory event store, and
with the recorder — and times N sequential tool calls (initialize once, then tools/call
of `slow` with n=0, read to the result) against each.

    python bench/recorder.py --calls 300
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SERVER = "replaygate.recorder.example_server"

PLAIN = """
import sys, uuid, uvicorn
from mcp.server.streamable_http import EventStore, EventMessage
from replaygate.recorder.example_server import mcp
from mcp.server.transport_security import TransportSecuritySettings

class Memory(EventStore):
    def __init__(self):
        self.events, self.order = {}, []
    async def store_event(self, stream_id, message):
        eid = str(uuid.uuid4()); self.events[eid] = (stream_id, message); self.order.append(eid)
        return eid
    async def replay_events_after(self, last_event_id, send_callback):
        return None

app = mcp.streamable_http_app(event_store=Memory(), retry_interval=500,
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*"], allowed_origins=["http://localhost:*"]))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def _port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(cmd: list[str], port: int, calls: int) -> list[float]:
    from tests.test_e2e_real import Client, _wait

    env = dict(os.environ, REPLAYGATE_HMAC_KEY="bench-key")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(port)
        inbox = Path(tempfile.mkdtemp()) / "inbox.jsonl"
        c = Client(port, inbox)
        c.initialize()
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            _, r, s = c.call("slow", {"n": 0})
            c.events(r, s)
            out.append((time.perf_counter() - t0) * 1000)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=300)
    args = ap.parse_args()
    ledger = tempfile.mkdtemp()
    p1, p2 = _port(), _port()
    plain = measure([sys.executable, "-c", PLAIN, str(p1)], p1, args.calls)
    rec = measure(
        [sys.executable, "-m", SERVER, "--port", str(p2), "--ledger", ledger],
        p2,
        args.calls,
    )
    for name, xs in (("plain event store", plain), ("with recorder", rec)):
        xs = sorted(xs[10:])  # warm-up
        print(
            f"{name:18} median {statistics.median(xs):.2f} ms  "
            f"p95 {xs[int(len(xs) * 0.95)]:.2f} ms  ({len(xs)} calls)"
        )


if __name__ == "__main__":
    main()
