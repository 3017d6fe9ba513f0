"""End to end against a client nobody here wrote: the official MCP conformance suite
(npm `@modelcontextprotocol/conformance`, every server scenario, in one pass) drives the
official Python SDK server (tests/conformance_server.py) with the ledger recorder,
behind real Caddy. replaygate then reads Caddy's access log and the recorder's ledgers,
and its reading must agree with the suite, scenario by scenario: nothing stored that
could not be read, no raw session id stored, and no finding where the suite saw a
server behave.

The traffic also holds answers that never reached their client, on purpose: a tool's
answer dropped by a proxy after the server produced it (Caddy logs 200 with no body),
and a call whose client hung up before the answer and never resumed. Caddy itself
sometimes answers a POST with 200 and no body ("use of closed network connection" in
its runtime log) and the suite's client times out: the scenario fails on a lost answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from . import nodejs
from .procs import REAL_PROXIES, caddy, stop
from .procs import free_port as _port
from .procs import wait_port as _wait
from .test_e2e_real import Client, _hang_up

pytest.importorskip("mcp")
pytestmark = [*REAL_PROXIES, nodejs.needs(nodejs.CONFORMANCE)]
ROOT = Path(__file__).resolve().parent.parent
KEY = "conformance-key-not-secret"
STAGE = "conformance"

# Any Host (`http://:port`): the suite's DNS-rebinding probe sends a foreign Host, which
# must reach the server (a site bound to 127.0.0.1 by name answers it with Caddy's own
# empty 200). Request bodies buffered: the note on tests/test_e2e_real.py's CADDYFILE.
CADDYFILE = """
{{
  admin off
  auto_https off
}}
http://:{port} {{
  bind 127.0.0.1
  log {{
    output file {d}/logs/caddy-access.log
    format json
  }}
  reverse_proxy 127.0.0.1:{server} {{
    flush_interval -1
    buffer_requests
  }}
}}
http://:{drop_port} {{
  bind 127.0.0.1
  log {{
    output file {d}/logs/caddy-drop-access.log
    format json
  }}
  reverse_proxy 127.0.0.1:{dropper} {{
    flush_interval -1
    buffer_requests
  }}
}}
"""


class AnswerDropper:
    """A TCP proxy in front of the server that passes the request and the response
    headers, then swallows the body until the server has written its JSON-RPC result,
    and closes: the server produced the answer and it went out, but no byte of it
    reached the client."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.dropped = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = self.sock.accept()
                threading.Thread(target=self._relay, args=(conn,), daemon=True).start()

    @staticmethod
    def _read_head(s: socket.socket) -> tuple[bytes, bytes]:
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise OSError("closed before the headers")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n\r\n")
        return head + b"\r\n\r\n", rest

    def _relay(self, conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", self.upstream)) as up:
            try:
                head, body = self._read_head(conn)
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                while m and len(body) < int(m.group(1)):
                    body += conn.recv(65536)
                up.sendall(head + body)
                head, seen = self._read_head(up)
                conn.sendall(head)
                while b'"result"' not in seen:
                    chunk = up.recv(65536)
                    if not chunk:
                        break
                    seen += chunk
                self.dropped += 1
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()


def _write(client: Client, key: str):
    """Call the `lost_answer` write with an idempotency key (a careful client)."""
    rid = client._id()
    conn, r = client.request(
        "POST",
        {"jsonrpc": "2.0", "id": rid, "method": "tools/call"}
        | {"params": {"name": "lost_answer", "arguments": {}, "_meta": {"progressToken": 1}}},
        extra={"Idempotency-Key": key},
    )
    return conn, r, str(rid)


def _run_suite(url: str, out: Path, log) -> list[tuple[float, str]]:
    """Run every server scenario in one pass; return (start time, scenario) in order,
    from the runner's own announcements."""
    starts: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        [nodejs.node(), str(nodejs.CONFORMANCE), "server", "--suite", "all"]
        + ["--url", url, "-o", str(out)],
        cwd=nodejs.NODE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    timer = threading.Timer(240, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            log.write(line)
            m = re.match(r"=== Running scenario: (\S+) ===", line)
            if m:
                starts.append((time.time(), m.group(1)))
        proc.wait()
    finally:
        timer.cancel()
    return starts


def _results(out: Path) -> dict[str, list[dict]]:
    """The suite's checks per scenario (its `-o` folder: server-<scenario>-<time>/)."""
    found: dict[str, list[dict]] = {}
    for d in out.iterdir():
        m = re.match(r"server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$", d.name)
        if m and (d / "checks.json").exists():
            found[m.group(1)] = json.loads((d / "checks.json").read_text())
    return found


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    d = tmp_path_factory.mktemp("conformance")
    (d / "logs").mkdir()
    t0 = int(time.time() * 1000) - 60_000
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "write"}) + "\n"
    )
    server, caddy_port, drop_port = _port(), _port(), _port()
    env = dict(os.environ, REPLAYGATE_HMAC_KEY=KEY, PYTHONPATH=str(ROOT))
    procs: list = []
    logs = contextlib.ExitStack()
    dropper = None
    truth: dict = {"lost": []}
    try:
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.conformance_server", "--port", str(server)]
                + ["--ledger", str(d / "logs" / "ledger"), "--stage", STAGE],
                env=env,
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=logs.enter_context(open(d / "server.log", "w")),  # noqa: SIM115
            )
        )
        _wait(server)
        dropper = AnswerDropper(server)
        procs.append(
            caddy(
                d,
                CADDYFILE.format(
                    d=d, port=caddy_port, server=server, drop_port=drop_port, dropper=dropper.port
                ),
                logs,
            )
        )
        _wait(caddy_port)
        _wait(drop_port)
        started = time.time()
        with open(d / "conformance.log", "w") as out_log:
            starts = _run_suite(f"http://127.0.0.1:{caddy_port}/mcp", d / "out", out_log)
        suite_end = time.time()

        # Lost answers on purpose. 1: the answer of a write dropped between the server and
        # Caddy (the proxy's evidence: a 200 event stream of 0 bytes).
        c = Client(caddy_port, Path(os.devnull), agent="lost-answer/1")
        c.receipt = lambda stream, event_id: None  # type: ignore[method-assign]
        assert c.initialize() == 200
        via_drop = Client(drop_port, Path(os.devnull), agent="lost-answer/1")
        via_drop.session = c.session
        via_drop.next_id = 100  # one session: JSON-RPC ids (and so stream ids) not reused
        conn, r, s = _write(via_drop, "lost-answer-1")
        assert r.status == 200 and r.read() == b""
        truth["lost"].append({"stream": s, "session": c.session, "via": "dropped"})
        # 2: a client that hangs up before the answer and never resumes (the server's
        # evidence: the stream ended before the result it then produced).
        conn, r, s = _write(c, "lost-answer-2")
        assert r.status == 200
        c.events(r, s, limit=2)  # the priming event and the progress
        _hang_up(conn)
        truth["lost"].append({"stream": s, "session": c.session, "via": "hung_up"})
        time.sleep(1.2)  # the tool finishes after the client is gone
    finally:
        stop(procs)
        if dropper:
            dropper.close()
        logs.close()
    truth.update(starts=starts, suite_end=suite_end, elapsed=time.time() - started)
    truth["dropped"] = dropper.dropped if dropper else 0
    return d, _results(d / "out"), truth


@pytest.fixture(scope="module")
def analysed(traffic):
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    d, _, _ = traffic
    os.environ["REPLAYGATE_HMAC_KEY_CONFORMANCE"] = KEY
    config = from_mapping({"hmac_key_env": "REPLAYGATE_HMAC_KEY_CONFORMANCE"})
    con = dbm.connect(str(d / "conformance.duckdb"))
    report = ingest(con, [d / "logs"], config)
    runner.analyse(con, config)
    return con, config, report


def _caddy_rows(d: Path, name: str = "caddy-access.log") -> list[dict]:
    return [json.loads(line) for line in (d / "logs" / name).read_text().splitlines()]


def test_the_suite_ran_every_server_scenario_in_one_quick_pass(traffic):
    _, results, truth = traffic
    scenarios = [name for _, name in truth["starts"]]
    assert len(scenarios) >= 32 and set(results) == set(scenarios)
    # A lost answer costs the suite's client its 60 s request timeout; anything more is
    # a hang.
    assert truth["elapsed"] < 150


def _scenario_at(truth: dict, ts: float) -> str:
    """The scenario that was running at `ts` (after the suite: "after")."""
    bounds = [*truth["starts"], (truth["suite_end"], "after")]
    return next((n for t, n in reversed(bounds) if t <= ts), bounds[0][1])


def _lost_in_caddy(d: Path, truth: dict) -> dict[str, int]:
    """Per scenario, the POSTs Caddy answered 200 with an event stream of no bytes."""
    lost: dict[str, int] = {}
    for row in _caddy_rows(d):
        kind = ((row.get("resp_headers") or {}).get("Content-Type") or [""])[0]
        empty = row["status"] == 200 and row["size"] == 0
        if row["request"]["method"] == "POST" and empty and kind == "text/event-stream":
            name = _scenario_at(truth, row["ts"] - row["duration"])
            lost[name] = lost.get(name, 0) + 1
    return lost


def test_the_server_passes_the_suite_but_where_caddy_lost_an_answer(traffic):
    """Every check passes, except in a scenario where Caddy answered a POST with an
    empty event stream: the suite's client then waits for the answer until it times
    out. The answers this test loses on purpose come after the suite."""
    d, results, truth = traffic
    failed = {
        name for name, checks in results.items() if any(c["status"] == "FAILURE" for c in checks)
    }
    assert failed <= set(_lost_in_caddy(d, truth)), (failed, _lost_in_caddy(d, truth))
    assert truth["dropped"] == 1
    # The DNS-rebinding probe reached the server through Caddy and was refused there.
    probe = next(c for c in results["dns-rebinding-protection"] if "rejected" in c["id"])
    assert probe["status"] == "SUCCESS" and probe["details"]["statusCode"] == 421


def test_everything_ingests_without_a_raw_session_id(traffic, analysed):
    d, _, _ = traffic
    con, _, report = analysed
    assert report.quarantined == 0, report.quarantine_reasons
    rows = report.rows_by_type()
    assert rows["proxy"] >= 100 and rows["sessions"] >= 30 and rows["streams"] >= 60
    # Every session id Caddy saw, in requests and answers: none is stored anywhere.
    raw = set()
    for name in ("caddy-access.log", "caddy-drop-access.log"):
        for row in _caddy_rows(d, name):
            for h in (row["request"]["headers"], row.get("resp_headers") or {}):
                raw.update(h.get("Mcp-Session-Id") or [])
    assert len(raw) >= 30
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
    for t in tables:
        text = con.execute(f"SELECT string_agg(CAST(COLUMNS(*) AS VARCHAR), '|') FROM \"{t}\"")
        blob = "|".join(str(v) for v in text.fetchone() or () if v)
        leaked = [s for s in raw if s in blob]
        assert not leaked, (t, leaked[:3])


def test_the_proxy_saw_what_the_suite_did(traffic, analysed):
    """The suite's DNS-rebinding probe is one 421 in the log; the answer dropped on
    purpose is a 200 event stream with no body; every other request was answered."""
    d, results, truth = traffic
    con, _, _ = analysed
    statuses = dict(con.execute("SELECT status, count(*) FROM proxy GROUP BY 1").fetchall())
    assert set(statuses) <= {200, 202, 421}, statuses
    assert statuses[421] == 1
    probe = con.execute("SELECT origin FROM proxy WHERE status = 421").fetchone()
    assert probe == ("http://evil.example.com",)
    dropped = [r for r in _caddy_rows(d, "caddy-drop-access.log")]
    assert [(r["status"], r["size"]) for r in dropped] == [(200, 0)]


def _hmac(session: str) -> str:
    import hashlib
    import hmac

    return hmac.new(KEY.encode(), session.encode(), hashlib.sha256).hexdigest()


def test_the_server_produced_both_lost_answers(traffic, analysed):
    """What each side recorded of the answers lost on purpose: the server produced and
    stored both results; the dropped one it wrote out whole (its stream CLOSED, the
    proxy saw 0 bytes), the other its client had left before (DISCONNECTED)."""
    _, _, truth = traffic
    con, _, _ = analysed
    ends = {"dropped": "CLOSED", "hung_up": "DISCONNECTED"}
    for lost in truth["lost"]:
        key = {"s": _hmac(lost["session"]), "st": lost["stream"]}
        kinds = con.execute(
            "SELECT list(kind) FROM events WHERE session_hmac = $s AND stream_id = $st", key
        ).fetchone()[0]
        assert "result" in kinds, lost
        states = con.execute(
            "SELECT list(state ORDER BY ts, pos) FROM streams "
            "WHERE session_hmac = $s AND stream_id = $st",
            key,
        ).fetchone()[0]
        assert states == ["STREAM_OPEN", ends[lost["via"]]], (lost, states)


def _findings_by_scenario(con, truth: dict) -> dict[str, list[tuple[str, str]]]:
    """Each finding (but the per-file raw-id one) under the scenario that was running
    when its unit began; after the suite, under "after"."""
    out: dict[str, list[tuple[str, str]]] = {n: [] for _, n in truth["starts"]}
    out["after"] = []
    rows = con.execute(
        "SELECT detector, severity, epoch_ms(ts) / 1000.0 FROM findings "
        "WHERE detector <> 'raw_session_id_logged' ORDER BY ts"
    ).fetchall()
    for detector, severity, ts in rows:
        out[_scenario_at(truth, ts)].append((detector, severity))
    return out


def test_no_finding_where_the_suite_saw_the_server_behave(traffic, analysed):
    """Every scenario Caddy lost no answer in has no finding: the DNS-rebinding probe
    the SDK refused with 421 is none, and with no allow-list configured the Origin gate
    cannot judge the foreign origin it saw (insufficient), it does not fail; no allowed
    origin was refused."""
    from replaygate.queries import gates

    d, results, truth = traffic
    con, config, _ = analysed
    found = _findings_by_scenario(con, truth)
    lost = _lost_in_caddy(d, truth)
    for name in results:
        if name not in lost:
            assert found[name] == [], (name, found[name])
    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["invalid_origin_rejection"]["status"] == "insufficient"
    assert "not configured" in g["invalid_origin_rejection"]["reason"]
    assert g["allowed_origin_refusals"]["status"] == "pass"


def test_every_lost_answer_is_an_undelivered_result(traffic, analysed):
    """Where Caddy lost an answer the suite's client waited for, and for both answers
    lost on purpose, replaygate finds `undelivered_result`, whatever the timestamps:
    from the proxy's empty event stream or from the server's own record; the lost
    writes are high, and the `lost_responses` gate fails."""
    from replaygate.queries import gates

    d, _, truth = traffic
    con, config, _ = analysed
    found = _findings_by_scenario(con, truth)
    for name, n in _lost_in_caddy(d, truth).items():
        if name != "after":
            # A stream the server also saw break lost its priming event with the answer
            # (Caddy served none of its bytes): `priming_lost` is true of it, checked below.
            lost = [f for f in found[name] if f != ("priming_lost", "medium")]
            assert lost == [("undelivered_result", "medium")] * n, (name, found[name])
    primed = con.execute(
        """SELECT p.stream_id, u.detail->>'bases' FROM findings p
           LEFT JOIN findings u ON u.detector = 'undelivered_result'
            AND u.session_hmac = p.session_hmac AND u.stream_id = p.stream_id
           WHERE p.detector = 'priming_lost'"""
    ).fetchall()
    assert all(bases and "proxy" in bases for _, bases in primed), primed
    # ... and the client that never got the stream's `retry:` is not blamed for ignoring it.
    assert not any(f[0] == "retry_not_honored" for fs in found.values() for f in fs), found
    assert sorted(found["after"]) == [("undelivered_result", "high")] * 2, found["after"]
    units = {
        (s, st)
        for s, st in con.execute(
            "SELECT session_hmac, stream_id FROM findings WHERE detector = 'undelivered_result'"
        ).fetchall()
    }
    for lost in truth["lost"]:
        assert (_hmac(lost["session"]), lost["stream"]) in units, lost
    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["lost_responses"]["status"] == "fail"
