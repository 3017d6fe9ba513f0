"""End to end: the probe's 2026-07-28 re-send against the official MCP Python SDK server
(with the recorder) behind real Caddy. A write cut after its first progress event is sent
twice more with the same idempotency key: `create_ticket`, which takes the key and ignores
it, executes each re-send (the probe fails, and the server's dispatch ledger shows the key
executed more than once, a `duplicate_dispatch`); `file_ticket`, which honours it, answers
both with the original receipt (the probe passes); re-sends answered with an error are no
receipt (cannot tell). The recorder marks the probe's dispatches with its principal, so
even without a session (2026-07-28) they are known as synthetic, and by default no
real-traffic gate counts them."""

from __future__ import annotations

import contextlib
import json

import pytest

from .procs import REAL_PROXIES, caddy, probe, stop
from .procs import free_port as _port
from .procs import wait_port as _wait
from .test_e2e_real import CADDYFILE, KEY
from .test_e2e_server import _findings
from .test_probe_e2e import _analyse, _server

pytest.importorskip("mcp")
pytestmark = REAL_PROXIES
STAGE = "probe-canary"
RUNS = {
    "ignored": ["--write-tool", "create_ticket", "--write-arguments", '{"title": "probe"}'],
    "honoured": ["--write-tool", "file_ticket", "--write-arguments", '{"title": "probe"}'],
    # no title: the tool answers an error each time
    "errors": ["--write-tool", "file_ticket", "--write-arguments", "{}"],
}


@pytest.fixture(scope="module")
def resent(tmp_path_factory):
    """One server behind Caddy, one probe run per case: {case: (exit code, resend verdict)},
    and the folder (logs/: Caddy's log, the probe's files, the server's ledger)."""
    d = tmp_path_factory.mktemp("probe-resend")
    (d / "logs").mkdir()
    procs: list = []
    logs = contextlib.ExitStack()
    out = {}
    try:
        server, port = _server(d, None, logs)
        procs.append(server)
        proxy = _port()
        # Three probe processes in a row through one Caddy: without keep-alive to the
        # server, Caddy never re-uses a connection uvicorn closed after its 5 s idle
        # timeout meanwhile (the next run's first POST would get a 502).
        caddyfile = CADDYFILE.replace(
            "flush_interval -1",
            "flush_interval -1\n    transport http {{\n      keepalive off\n    }}",
        )
        procs.append(caddy(d, caddyfile.format(d=d, port=proxy, server=port), logs))
        _wait(port, 180)
        _wait(proxy, 60)
        first = None
        for case, extra in RUNS.items():
            run = probe(
                f"http://127.0.0.1:{proxy}/mcp",
                d / "logs" / "probe",
                KEY,
                *("--scenarios", "resend", "--idempotency-key-arg", "idempotency_key"),
                *("--stage", STAGE, "--deadline", "60s", *extra),
                cwd=d,
            )
            doc = json.loads(run.stdout)
            first = first or doc["started"]
            (verdict,) = doc["rounds"][0]["scenarios"]
            out[case] = (run.returncode, {**verdict, "discovery": doc["discovery"]})
    finally:
        stop(procs)
        logs.close()
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps({"ts": first - 60_000, "stage": STAGE, "action": "start", "scope": "write"})
        + "\n"
    )
    # The server's dispatch ledger beside the proxy log and the probe's files.
    (d / "server-ledger").rename(d / "logs" / "server-ledger")
    return d, out


def test_a_write_that_ignores_its_key_executes_each_resend(resent):
    _, out = resent
    rc, v = out["ignored"]
    assert rc == 3 and v["status"] == "fail", v
    assert v["detail"]["cut"] and len(set(v["detail"]["answers"])) == 2


def test_a_write_that_honours_its_key_answers_the_original_receipt(resent):
    _, out = resent
    rc, v = out["honoured"]
    assert rc == 0 and v["status"] == "pass", v
    assert v["detail"]["cut"] and v["detail"]["same_receipt"]


def test_equal_errors_are_no_receipt(resent):
    _, out = resent
    rc, v = out["errors"]
    assert rc == 2 and v["status"] == "cannot_tell" and v["detail"]["errors"] == 2, v


def test_the_executed_resends_are_a_finding_on_the_probes_dispatches(resent):
    d, _ = resent
    con, config, report = _analyse(d)
    assert report.quarantined == 0, report.quarantine_reasons
    # Sessionless (2026-07-28), marked by the recorder with the probe's principal.
    rows = con.execute(
        "SELECT DISTINCT session_hmac IS NULL, principal FROM dispatches "
        "WHERE tool_name = 'create_ticket'"
    ).fetchall()
    assert rows == [(True, "replaygate-probe")]
    keyed = [
        f
        for f in _findings(con, "duplicate_dispatch")
        if f["detail"].get("basis") == "idempotency_key"
    ]
    assert keyed, _findings(con, "duplicate_dispatch")
    from replaygate.queries import gates

    (stage,) = gates.evaluate(con, config, STAGE)["stages"]
    g = {x["id"]: x for x in stage["gates"]}
    # The probe's writes are not the users': by default no gate counts them.
    assert g["duplicate_dispatches"]["sample"] == 0
    con.close()
    con, config, _ = _analyse(d, probe_gates="all")
    (stage,) = gates.evaluate(con, config, STAGE)["stages"]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["duplicate_dispatches"]["status"] == "fail"
    con.close()
