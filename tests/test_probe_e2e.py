"""End to end: `replaygate probe` against the official MCP Python SDK server behind real
Caddy, with three event stores an operator might run — a lossy one (each replay loses the
first event after the cursor, seed 002), a healthy one, and one that replays another
stream's events — and replaygate fed the probe's output and Caddy's access log only (no
recorder data). The probe's receipts alone must make the lossy replay a client-based
`replay_gap` and `silent_truncation`, the crossed one a client-based
`cross_stream_acceptance`, and leave the healthy deployment without a finding. Two
stores bounded to 40 events show the probe's evicted cursor: the bundled store replays
nothing for it, a ring buffer that replays the oldest events it still holds is a
client-based `cross_stream_acceptance`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .procs import REAL_PROXIES, caddy, example_server, probe, stop
from .procs import free_port as _port
from .procs import wait_port as _wait
from .test_e2e_real import CADDYFILE, KEY
from .test_e2e_server import _findings

pytest.importorskip("mcp")
pytestmark = REAL_PROXIES
STAGE = "probe-canary"
STORES = {
    "lossy": "tests.e2e_stores:LossyStore",
    "healthy": None,
    "cross": "tests.e2e_stores:CrossStreamStore",
    "small": "tests.e2e_stores:SmallStore",
    "ring": "tests.e2e_stores:RingStore",
}
SCENARIOS = {
    "lossy": "resume",
    "healthy": "resume,cursors,dead_session,origin",
    "cross": "resume",
    "small": "evicted",
    "ring": "evicted",
}
# Ten further calls of `count` (7 events each): past the 40 events the small stores hold.
EXTRA = {"small": ["--evict-calls", "10"], "ring": ["--evict-calls", "10"]}


def _server(d: Path, store: str | None, logs: contextlib.ExitStack) -> tuple[subprocess.Popen, int]:
    """The example server with this event store (None: the bundled one)."""
    extra = ["--event-store", store] if store else []
    return example_server(d / "server-ledger", d / "server.log", logs, KEY, *extra)


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """Per store: its folder (logs/: Caddy's access log, the probe's files and the rollout
    log), the probe's exit code and summary."""
    root = tmp_path_factory.mktemp("probe-e2e")
    procs: list = []
    logs = contextlib.ExitStack()
    out: dict[str, tuple[Path, int, dict]] = {}
    t0 = int(time.time() * 1000) - 60_000
    try:
        ports = {}
        for name, store in STORES.items():
            d = root / name
            (d / "logs").mkdir(parents=True)
            (d / "logs" / "rollout.jsonl").write_text(
                json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "read"}) + "\n"
            )
            server, port = _server(d, store, logs)
            procs.append(server)
            proxy = _port()
            procs.append(caddy(d, CADDYFILE.format(d=d, port=proxy, server=port), logs))
            ports[name] = (port, proxy)
        for port, proxy in ports.values():
            # Five SDK servers start at once: on a busy machine their imports alone take
            # longer than the default wait.
            _wait(port, 180)
            _wait(proxy, 60)
        for name, (_, proxy) in ports.items():
            d = root / name
            run = probe(
                f"http://127.0.0.1:{proxy}/mcp",
                d / "logs" / "probe",
                KEY,
                *("--scenarios", SCENARIOS[name], "--tool", "count", "--arguments", '{"n": 6}'),
                *("--stage", STAGE, "--deadline", "100s", *EXTRA.get(name, [])),
                cwd=root,
                # The probe ends itself by its deadline (and the DELETEs' grace).
                timeout=150,
            )
            out[name] = (d, run.returncode, json.loads(run.stdout))
    finally:
        stop(procs)
        logs.close()
    return out


def _analyse(d: Path, **settings):
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    os.environ["REPLAYGATE_HMAC_KEY_E2E"] = KEY
    config = from_mapping(
        {
            "hmac_key_env": "REPLAYGATE_HMAC_KEY_E2E",
            "origin_allowlist": ["http://127.0.0.1:*", "http://localhost:*"],
            **settings,
        }
    )
    con = dbm.connect(str(d / f"rg-{'-'.join(map(str, settings.values())) or 'default'}.duckdb"))
    report = ingest(con, [d / "logs"], config)
    runner.analyse(con, config)
    return con, config, report


def _counts(con) -> dict[str, int]:
    rows = con.execute("SELECT detector, count(*) FROM findings GROUP BY 1").fetchall()
    # Caddy's default JSON log keeps the Mcp-Session-Id header: a proxy setting, not the
    # store's doing (docs/sources.md has formats that keep it out).
    return {d: n for d, n in rows if d != "raw_session_id_logged"}


def _why(con) -> str:
    """What a finding on a healthy deployment said, and the proxy's rows within two
    seconds of it: the evidence a failure under load leaves in its message, since the
    run's folder is gone by the time anyone looks."""
    found = con.execute(
        "SELECT detector, ts, detail FROM findings WHERE detector <> 'raw_session_id_logged'"
        " ORDER BY ALL"
    ).fetchall()
    lines = [f"{d} at {ts}: {detail}" for d, ts, detail in found]
    for _, ts, _ in found:
        near = con.execute(
            "SELECT ts, method, status, jsonrpc_method, left(session_hmac, 8), duration_ms"
            " FROM proxy WHERE ts BETWEEN $t - INTERVAL 2 SECOND AND $t + INTERVAL 2 SECOND"
            " ORDER BY ts",
            {"t": ts},
        ).fetchall()
        lines += [f"  {r}" for r in near]
    return "\n".join(lines)


async def _answer_at_once(scope, receive, send):
    """An endpoint that answers a POST as an MCP server does: the event stream's headers and
    first event as soon as the body is read, a second event a little later, the end."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
    await send({"type": "http.response.body", "body": b"id: 1\ndata: one\n\n", "more_body": True})
    await asyncio.sleep(0.02)
    await send({"type": "http.response.body", "body": b"id: 2\ndata: two\n\n"})


def _caddyfiles():
    from .test_e2e_conformance import CADDYFILE as CONFORMANCE
    from .test_e2e_typescript import CADDYFILE as TYPESCRIPT

    # Each end-to-end Caddyfile, its first site in front of `server` on `port`.
    return {
        "e2e": lambda d, port, server: CADDYFILE.format(d=d, port=port, server=server),
        "typescript": lambda d, port, server: TYPESCRIPT.format(
            d=d, raw_port=port, red_port=_port(), on=server
        ),
        "conformance": lambda d, port, server: CONFORMANCE.format(
            d=d, port=port, server=server, drop_port=_port(), dropper=server
        ),
    }


@pytest.mark.parametrize("site", ["e2e", "typescript", "conformance"])
def test_the_proxy_streams_every_answer_to_a_post_whole(tmp_path, site):
    """Through the Caddy in front of every server here, a POST answered at once with an
    event stream arrives whole. With the body proxied as it streams in, Debian's Caddy cut
    such answers after their first event now and then (the note on CADDYFILE): a healthy
    deployment's calls and initializes then ended without their answer, and the probe's
    verdicts on it changed from run to run."""
    import httpx2
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(_answer_at_once, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for sub in ("caddy-raw", "caddy-redacted"):
        (tmp_path / "logs" / sub).mkdir(parents=True)
    logs = contextlib.ExitStack()
    proxy = _port()
    caddyfile = _caddyfiles()[site](tmp_path, proxy, sock.getsockname()[1])
    procs = [caddy(tmp_path, caddyfile, logs)]
    try:
        _wait(proxy)
        cut = 0
        for _ in range(100):
            with (
                httpx2.Client(timeout=10) as client,
                client.stream("POST", f"http://127.0.0.1:{proxy}/mcp", content=b"{}") as resp,
            ):
                data = [line for line in resp.iter_lines() if line.startswith("data:")]
            cut += data != ["data: one", "data: two"]
    finally:
        stop(procs)
        logs.close()
        server.should_exit = True
        thread.join(10)
        sock.close()
    assert cut == 0, f"{cut} of 100 answers cut\n" + (tmp_path / "caddy.log").read_text()[-1500:]


def test_lossy_replay_is_a_client_based_truncation_on_proxy_logs_and_probe_receipts(probed):
    d, rc, summary = probed["lossy"]
    (resume,) = summary["rounds"][0]["scenarios"]
    assert rc == 3 and resume["status"] == "fail", resume
    lost = [seq for seq, _ in resume["detail"]["missing"]]
    assert lost and "truncated" in resume["line"]
    con, config, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    rows = report.rows_by_type()
    assert rows["proxy"] >= 5 and rows["inbox"] >= 10 and not rows.get("events")
    assert _counts(con) == {"replay_gap": 1, "silent_truncation": 1}
    (gap,) = _findings(con, "replay_gap")
    assert gap["detail"]["basis"] == "client" and gap["severity"] == "high"
    assert gap["detail"]["missing_seqs"] == lost
    (trunc,) = _findings(con, "silent_truncation")
    assert trunc["detail"]["basis"] == "client" and trunc["stream_id"] == gap["stream_id"]
    from replaygate.queries import gates

    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["silent_truncations"]["status"] == "fail"
    assert stage["decision"] == "ROLLBACK"


def test_healthy_store_passes_every_scenario_without_a_finding(probed):
    d, rc, summary = probed["healthy"]
    verdicts = {s["scenario"]: s for s in summary["rounds"][0]["scenarios"]}
    assert {k: v["status"] for k, v in verdicts.items()} == {
        "resume": "pass",
        "cursors": "pass",
        "dead_session": "pass",
        "origin": "pass",
    }, verdicts
    assert rc == 0 and summary["verdict"] == "pass"
    assert verdicts["dead_session"]["detail"] == {"delete": 200, "reuse": 404, "reinitialize": 200}
    # Caddy answers a Host it has no site for itself (an empty 200): never served by MCP.
    assert verdicts["origin"]["detail"] == {
        "foreign_origin": 403,
        "foreign_host": 200,
        "foreign_host_not_mcp": True,
        "allowed_origin": 200,
    }
    con, config, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    assert _counts(con) == {}, _why(con)
    # Every request was marked: the proxy saw only the probe's User-Agent.
    agents = {a for (a,) in con.execute("SELECT DISTINCT user_agent FROM proxy").fetchall()}
    assert agents and all(a.startswith("replaygate-probe/") for a in agents)
    # Its session rows and, through Caddy's log, its requests are the probe's principal.
    for table in ("sessions", "proxy"):
        sql = f"SELECT DISTINCT principal FROM {table}"
        assert {p for (p,) in con.execute(sql).fetchall()} == {"replaygate-probe"}, table
    # The probe's completed streams are judged units: the truncation gate passes on them.
    # Its staged requests (foreign Origin and Host, a dead session reused) are not the
    # users' traffic: by default no real-traffic gate counts them.
    from replaygate.queries import gates

    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["silent_truncations"]["status"] == "pass" and g["silent_truncations"]["sample"] >= 1
    assert g["invalid_origin_rejection"]["sample"] == 0
    assert g["reinit_after_404"]["sample"] == 0
    # probe_gates = "all": they count in every gate, and pass.
    con.close()
    con, config, _ = _analyse(d, probe_gates="all")
    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["silent_truncations"]["status"] == "pass" and g["silent_truncations"]["sample"] >= 1
    assert g["invalid_origin_rejection"]["status"] == "pass"
    assert g["invalid_origin_rejection"]["sample"] >= 1
    assert g["reinit_after_404"]["status"] == "pass" and g["reinit_after_404"]["sample"] >= 1


def test_crossed_store_is_a_client_based_cross_stream_acceptance(probed):
    d, rc, summary = probed["cross"]
    (resume,) = summary["rounds"][0]["scenarios"]
    assert rc == 3 and resume["status"] == "fail" and resume["detail"]["foreign"] >= 1, resume
    con, _, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    found = _findings(con, "cross_stream_acceptance")
    assert len(found) == resume["detail"]["foreign"]
    assert {f["detail"]["basis"] for f in found} == {"client"}
    streams = {f["stream_id"] for f in found}
    origins = {f["detail"]["origin_stream_id"] for f in found}
    assert len(streams) == 1 and len(origins) == 1 and streams != origins
    assert set(_counts(con)) == {"cross_stream_acceptance"}


def test_a_truly_evicted_cursor_is_refused_by_a_bounded_store(probed):
    d, rc, summary = probed["small"]
    (evicted,) = summary["rounds"][0]["scenarios"]
    assert rc == 0 and evicted["status"] == "pass", evicted
    assert evicted["detail"]["events"] > 40 and evicted["detail"]["replayed"] == 0
    con, _, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    assert _counts(con) == {}, _why(con)


def test_a_ring_buffer_replaying_past_an_evicted_cursor_is_a_client_based_finding(probed):
    # The ring replays the oldest call it still holds onto the evicted cursor's stream.
    d, rc, summary = probed["ring"]
    (evicted,) = summary["rounds"][0]["scenarios"]
    assert rc == 3 and evicted["status"] == "fail" and evicted["detail"]["replayed"], evicted
    con, _, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    found = _findings(con, "cross_stream_acceptance")
    assert found and {f["detail"]["basis"] for f in found} == {"client"}
    assert len({f["stream_id"] for f in found}) == 1


def test_the_probe_stayed_within_its_budget(probed):
    for _, _, summary in probed.values():
        assert 0 < summary["requests"] <= 200
        assert Path(summary["summary"]).name.startswith("probe-")
