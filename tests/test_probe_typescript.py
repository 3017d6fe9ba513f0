"""`replaygate probe` against a server nobody here wrote: the official TypeScript SDK's
(tests/node/ts_server.mjs, with its in-memory event store and DNS-rebinding protection)
behind real Caddy. Every scenario runs, its receipts and facts ingest cleanly with the
proxy log alone, and a healthy TypeScript deployment yields no finding."""

from __future__ import annotations

import contextlib
import json
import subprocess

import pytest

from . import nodejs
from .procs import REAL_PROXIES, caddy, probe, stop
from .procs import free_port as _port
from .procs import wait_port as _wait
from .test_e2e_real import CADDYFILE, KEY
from .test_e2e_typescript import _node
from .test_probe_e2e import _analyse, _counts, _why

pytest.importorskip("mcp")
pytestmark = [*REAL_PROXIES, nodejs.needs(nodejs.SDK)]
STAGE = "probe-canary"
# The server's allow-list is the local web client's origin (MCP Inspector's), exactly.
ALLOWED = "http://localhost:6274"


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe-ts")
    (d / "logs").mkdir()
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps({"ts": 1_700_000_000_000, "stage": STAGE, "action": "start", "scope": "read"})
        + "\n"
    )
    server, proxy = _port(), _port()
    procs: list = []
    logs = contextlib.ExitStack()
    try:
        procs.append(
            _node(
                "ts_server.mjs",
                # The server forgets a session idle for --idle-ms (1.5 s by default, for
                # test_e2e_typescript's expiries). A probe held up that long on a busy machine
                # found its own session gone in the middle of a scenario: a 404 on a request
                # it never meant to be refused, after which it did not re-initialize, which
                # the proxy log shows as reinit_missing. Here the sessions outlive the run,
                # as an active client's do on a real deployment.
                *("--port", str(server), "--protect", "on", "--idle-ms", "600000"),
                stdout=subprocess.DEVNULL,
                stderr=logs.enter_context(open(d / "server.log", "w")),  # noqa: SIM115
            )
        )
        procs.append(caddy(d, CADDYFILE.format(d=d, port=proxy, server=server), logs))
        _wait(server)
        _wait(proxy)
        run = probe(
            f"http://127.0.0.1:{proxy}/mcp",
            d / "logs" / "probe",
            KEY,
            *("--origin", ALLOWED, "--stage", STAGE),
            *("--tool", "count", "--arguments", '{"n": 8}'),
        )
    finally:
        stop(procs)
        logs.close()
    return d, run.returncode, json.loads(run.stdout)


def test_every_scenario_runs_against_the_typescript_sdk(probed):
    _, rc, summary = probed
    verdicts = {s["scenario"]: s for s in summary["rounds"][0]["scenarios"]}
    assert summary["discovery"]["read_only_tools"] == ["count"]
    assert {k: v["status"] for k, v in verdicts.items()} == {
        "resume": "pass",
        "cursors": "pass",
        "dead_session": "pass",
        "origin": "pass",
    }, verdicts
    assert rc == 0
    assert verdicts["resume"]["detail"]["replayed"] >= 1
    # The SDK's transport answers a foreign Origin 403, Caddy a foreign Host itself.
    assert verdicts["origin"]["detail"]["foreign_origin"] == 403


def test_its_evidence_ingests_cleanly_and_shows_a_healthy_deployment(probed):
    d, _, summary = probed
    con, config, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    rows = report.rows_by_type()
    assert rows["inbox"] >= 10 and rows["sessions"] >= 5 and rows["streams"] >= 4
    assert _counts(con) == {}, _why(con)
    from replaygate.queries import gates

    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["silent_truncations"]["status"] == "pass" and g["silent_truncations"]["sample"] >= 1
    assert g["cross_stream_acceptances"]["status"] in ("pass", "insufficient")
