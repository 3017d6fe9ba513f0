"""Proxy lines written by real Caddy and nginx in front of the official MCP Python and
TypeScript SDK servers (tests/fixtures/proxy/captured/README.md says how each was made):
every line is read, field by field as the proxy wrote it, and no session id is stored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest.load import ingest

CAPTURED = Path(__file__).parent / "fixtures" / "proxy" / "captured"
FILES = [
    "caddy-conformance.log",
    "caddy-ts-redacted.log",
    "nginx-ts-redacted.log",
    "nginx-ts-off-redacted.log",
]


def _as_written(line: str) -> tuple:
    """(method, status, Origin, Last-Event-ID, User-Agent) as the proxy logged them."""
    j = json.loads(line)
    if "request" in j:  # Caddy

        def h(k: str) -> str | None:
            return (j["request"]["headers"].get(k) or [None])[0]

        row = (j["request"]["method"], j["status"], h("Origin"), h("Last-Event-Id"))
        return (*row, h("User-Agent"))
    row = (j["method"], int(j["status"]), j["origin"] or None, j["last_event_id"] or None)
    return (*row, j["user_agent"] or None)


@pytest.mark.parametrize("name", FILES)
def test_every_captured_line_reads_as_written(tmp_path, name):
    path = CAPTURED / name
    lines = path.read_text().splitlines()
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    report = ingest(con, [path], Config())
    assert report.quarantined == 0, report.quarantine_reasons
    got = con.execute(
        "SELECT method, status, origin, last_event_id, user_agent FROM proxy ORDER BY pos"
    ).fetchall()
    assert got == [_as_written(line) for line in lines]
    ids = set(re.findall(r'"Mcp-Session-Id":\["([^"]+)"\]', path.read_text()))
    stored = " ".join(
        str(v)
        for t in ("proxy", "files", "quarantine")
        for row in con.execute(f"SELECT * FROM {t}").fetchall()
        for v in row
    )
    assert not [i for i in ids if i in stored]
    if "redacted" in name:
        # The formats that keep raw ids out leave nothing to hash.
        assert con.execute("SELECT count(session_hmac) FROM proxy").fetchone() == (0,)
    con.close()


def test_the_conformance_lines_hold_the_probe_and_the_lost_answers():
    rows = [_as_written(x)[:3] for x in (CAPTURED / FILES[0]).read_text().splitlines()]
    assert ("POST", 421, "http://evil.example.com") in rows
    sizes = [
        (j["request"]["method"], j["status"], j["size"])
        for j in map(json.loads, (CAPTURED / FILES[0]).read_text().splitlines())
    ]
    assert sizes.count(("POST", 200, 0)) == 2


@pytest.mark.parametrize("name", [f for f in FILES if "redacted" in f])
def test_a_redacting_log_reads_no_initialize_and_leaves_the_reinit_gate_insufficient(
    tmp_path, name
):
    """The TypeScript server sets Mcp-Session-Id on every SSE answer, and these formats
    hide the request's session: no answer reads as an initialize, the log is said to show
    neither the session id nor an initialize (from its rows, not its format), and every
    404 is a unit the reinit gate cannot judge — `insufficient`, never a pass."""
    from replaygate.queries import gates, runner

    path = CAPTURED / name
    lines = path.read_text().splitlines()
    as_written = [_as_written(x)[:2] for x in lines]
    gone = sum(1 for m, s in as_written if s == 404 and m != "DELETE")
    assert gone
    first = min(float(j["msec"]) if "msec" in j else j["ts"] for j in map(json.loads, lines))
    rollout = tmp_path / "rollout.jsonl"
    start = {"schema": "mcpRollout.v1", "ts": int(first * 1000) - 60_000, "stage": "s"}
    rollout.write_text(json.dumps({**start, "action": "start", "scope": "read"}) + "\n")
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    report = ingest(con, [path, rollout], Config())
    assert report.quarantined == 0, report.quarantine_reasons
    runner.analyse(con, Config())
    assert con.execute(
        "SELECT count(*) FROM proxy WHERE jsonrpc_method = 'initialize'"
    ).fetchone() == (0,)
    facts = next(f.facts for f in report.files if f.facts)
    assert {"proxy.session_hmac", "proxy.initialize"} <= set(facts["missing"])
    blind = runner.cannot_tell(con)["reinit_missing"]
    assert [(e["missing"], e["units"]) for e in blind] == [("proxy.session_hmac", gone)]
    stage = gates.evaluate(con, Config())["stages"][0]
    gate = {g["id"]: g for g in stage["gates"]}["reinit_after_404"]
    assert gate["status"] == "insufficient", gate
    assert gate["cannot_tell"] == gone
    con.close()


def test_the_conformance_probe_refused_passes_the_origin_gate_once_configured(tmp_path):
    """The suite's DNS-rebinding probe (foreign Host and Origin) that the Python SDK
    refused with 421, under an allow-list of the suite's own loopback origin: refused, so
    never `invalid_origin_accepted`; only the ungated low `origin_refused_not_403` (the
    specification asks for 403); the Origin gate passes (unconfigured it is
    `insufficient` and nothing is found, tests/test_e2e_conformance.py)."""
    from replaygate.core.config import from_mapping
    from replaygate.queries import gates, runner

    path = CAPTURED / FILES[0]
    first = min(j["ts"] for j in map(json.loads, path.read_text().splitlines()))
    rollout = tmp_path / "rollout.jsonl"
    start = {"schema": "mcpRollout.v1", "ts": int(first * 1000) - 60_000, "stage": "s"}
    rollout.write_text(json.dumps({**start, "action": "start", "scope": "read"}) + "\n")
    config = from_mapping({"origin_allowlist": ["http://127.0.0.1:*", "http://localhost:*"]})
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    try:
        ingest(con, [path, rollout], config)
        runner.analyse(con, config)
        origin = con.execute(
            "SELECT detector, severity, detail->>'status' FROM findings WHERE detector IN "
            "('invalid_origin_accepted', 'origin_refused_not_403', 'allowed_origin_refused')"
        ).fetchall()
        stage = gates.evaluate(con, config)["stages"][0]
    finally:
        con.close()
    assert origin == [("origin_refused_not_403", "low", "421")]
    gate = {g["id"]: g for g in stage["gates"]}
    assert gate["invalid_origin_rejection"]["status"] == "pass", gate["invalid_origin_rejection"]
    assert gate["invalid_origin_rejection"]["sample"] >= 1
    assert gate["allowed_origin_refusals"]["status"] == "pass"
