"""`replaygate watch --probe`: the synthetic client run on watch's cycle against the
official MCP Python SDK server (the recorder's example server, with the lossy event store
of seed 002), its evidence ingested with the rest: a lossy replay becomes a client-based
finding in the published database while watch runs, with no recorder data read."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .procs import ROOT, example_server, stop, wait_port, watch_cycle
from .test_e2e_real import KEY

pytest.importorskip("mcp")
pytestmark = pytest.mark.slow
STAGE = "probe-canary"


def test_watch_runs_probes_and_ingests_their_evidence(tmp_path):
    env = dict(os.environ, REPLAYGATE_HMAC_KEY=KEY, PYTHONPATH=str(ROOT))
    with contextlib.ExitStack() as files:  # the server keeps its own copy of its log
        server, port = example_server(
            tmp_path / "server-ledger",
            tmp_path / "server.log",
            files,
            KEY,
            *("--event-store", "tests.e2e_stores:LossyStore"),
        )
    procs = [server]
    logs = tmp_path / "logs"
    logs.mkdir()
    t0 = int(time.time() * 1000) - 60_000
    (logs / "rollout.jsonl").write_text(
        json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "read"}) + "\n"
    )
    db = tmp_path / "fleet.duckdb"
    try:
        wait_port(port, 180)
        watch = subprocess.Popen(
            [sys.executable, "-m", "replaygate", "watch", str(logs), "--db", str(db),
             "--every", "1s", "--probe", f"http://127.0.0.1:{port}/mcp",
             "--probe-every", "1h",
             "--probe-args", f"--tool count --arguments '{{\"n\": 6}}' --scenarios resume "
                             f"--stage {STAGE} --deadline 60s"],
            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(watch)
        probes = tmp_path / "fleet.duckdb.probes"
        deadline = time.monotonic() + 150
        while not list(probes.glob("probe-*.json")):
            assert time.monotonic() < deadline and watch.poll() is None, "no probe run ended"
            time.sleep(0.5)
        # Two more cycles: the probe's end is reported, its files ingested and published.
        seen = watch_cycle(db)
        while watch_cycle(db) < seen + 2:
            assert time.monotonic() < deadline and watch.poll() is None
            time.sleep(0.5)
        watch.send_signal(signal.SIGTERM)
        out, errs = watch.communicate(timeout=60)
    finally:
        stop(procs)
    assert watch.returncode == 0, errs
    (line,) = [x for x in out.splitlines() if " probe #" in x]
    assert "probe #1 FAIL: resume FAIL" in line and "requests" in line, out
    from replaygate.core import db as dbm

    con = dbm.connect(str(db), read_only=True)
    with contextlib.closing(con):
        files = {p for (p,) in con.execute("SELECT path FROM files").fetchall()}
        assert any("inbox-probe-" in p for p in files), files
        rows = con.execute(
            "SELECT detector, json_extract_string(detail, '$.basis'), stage FROM findings "
            "WHERE detector IN ('replay_gap', 'silent_truncation')"
        ).fetchall()
    assert {(d, b) for d, b, _ in rows} == {
        ("replay_gap", "client"),
        ("silent_truncation", "client"),
    }
    assert {s for _, _, s in rows} == {STAGE}
    # One run at a time, no more often than asked: a single run in the hour.
    assert len(list(probes.glob("probe-*.json"))) == 1
