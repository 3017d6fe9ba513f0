"""End to end against real software: the official MCP Python SDK server with the ledger
recorder, behind real Caddy and nginx on 127.0.0.1, driven through a normal call, a
stream cut by the client and resumed with Last-Event-ID, a stream closed by the server
and resumed after `retry`, a deleted session reused (404) and re-initialized, a bad
Origin (403), a bad Host (421) and the SDK's default 2026-07-28 client. replaygate then
ingests the real access logs and ledgers; the findings and gate measures must be exactly
those this traffic produces."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .procs import REAL_PROXIES, caddy, stop
from .procs import free_port as _port
from .procs import wait_port as _wait

pytest.importorskip("mcp")
pytestmark = REAL_PROXIES
KEY = "e2e-key-not-secret"
MAX_EVENTS = 64
STAGE = "e2e-read"

NGINX_CONF = """
daemon off; worker_processes 1; user root; pid {d}/nginx.pid; error_log {d}/nginx-error.log;
events {{}}
http {{
  client_body_temp_path {d}/nb; proxy_temp_path {d}/np; fastcgi_temp_path {d}/nf;
  uwsgi_temp_path {d}/nu; scgi_temp_path {d}/ns;
  log_format mcp_json escape=json '{{'
    '"msec":"$msec","request_time":"$request_time",'
    '"method":"$request_method","uri":"$request_uri","status":"$status",'
    '"origin":"$http_origin","mcp_session_id":"$http_mcp_session_id",'
    '"mcp_protocol_version":"$http_mcp_protocol_version",'
    '"last_event_id":"$http_last_event_id","mcp_method":"$http_mcp_method",'
    '"user_agent":"$http_user_agent","remote_addr":"$remote_addr",'
    '"remote_user":"$remote_user","upstream":"$upstream_addr",'
    '"retry_after":"$sent_http_retry_after",'
    '"new_session_id":"$upstream_http_mcp_session_id"'
  '}}';
  # A second, differently keyed format (the keys a user might choose): replaygate must
  # still see the initialize in it (the answer's session header as resp_mcp_session_id).
  log_format mcp_alt escape=json '{{'
    '"msec":"$msec","request_time":"$request_time",'
    '"request_method":"$request_method","request_uri":"$request_uri","status":"$status",'
    '"http_mcp_session_id":"$http_mcp_session_id",'
    '"http_mcp_protocol_version":"$http_mcp_protocol_version",'
    '"http_user_agent":"$http_user_agent","client_ip":"$remote_addr",'
    '"resp_mcp_session_id":"$sent_http_mcp_session_id"'
  '}}';
  upstream mcp_backend {{ server 127.0.0.1:{server}; }}
  server {{
    listen 127.0.0.1:{alt_port};
    access_log {d}/alt-logs/nginx-alt-access.log mcp_alt;
    location /mcp {{
      proxy_pass http://mcp_backend;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
  server {{
    listen 127.0.0.1:{port};
    access_log {d}/logs/nginx-access.log mcp_json;
    location /mcp {{
      proxy_pass http://mcp_backend;
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
}}
"""

# `buffer_requests`: Caddy reads a request's body whole before it proxies it. Streamed, the
# body races the answer in Debian's Caddy 2.6.2 (Go 1.19 net/http, golang/go#40747): an MCP
# server answers a POST with its event stream's headers at once, writing them to the client
# makes Caddy's own server drain and close the request body, and the transport's last read
# of that body (its check for more bytes than declared) then fails and closes the upstream
# connection: the answer already on its way is cut after its first events, and the client
# sees a stream that ends cleanly without its answer (one POST in five to twenty on a busy
# machine; tests/test_probe_e2e.py holds the proxy to delivering them whole).
CADDYFILE = """
{{
  admin off
  auto_https off
}}
http://127.0.0.1:{port} {{
  log {{
    output file {d}/logs/caddy-access.log
    format json
  }}
  reverse_proxy 127.0.0.1:{server} {{
    flush_interval -1
    buffer_requests
  }}
}}
"""


def _hang_up(conn) -> None:
    """Close the connection now (FIN on the wire): closing the socket alone waits for the
    response object's reference to go too."""
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.sock.close()


class Client:
    """A raw Streamable HTTP client that keeps an inbox ledger (as a real client would)."""

    def __init__(
        self, port: int, inbox: Path, version: str = "2025-11-25", agent: str = "e2e-client/1"
    ):
        self.port, self.inbox, self.version, self.agent = port, inbox, version, agent
        self.session: str | None = None
        self.next_id = 0

    def _conn(self):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def request(
        self,
        method: str,
        body: dict | None = None,
        *,
        session: bool = True,
        extra: dict | None = None,
    ):
        c = self._conn()
        h = {
            "Accept": "application/json, text/event-stream",
            "User-Agent": self.agent,
            "Origin": "http://localhost:6274",
        }
        if body is not None:
            h["Content-Type"] = "application/json"
        if session and self.session:
            h["Mcp-Session-Id"] = self.session
            h["MCP-Protocol-Version"] = self.version
        h.update(extra or {})
        c.request(method, "/mcp", json.dumps(body) if body is not None else None, h)
        return c, c.getresponse()

    def events(self, resp, stream: str, limit: int | None = None) -> list[dict]:
        """Read SSE events, recording each as an accepted receipt."""
        got, cur = [], {}
        while limit is None or len(got) < limit:
            line = resp.readline()
            if not line:
                break
            line = line.decode().rstrip("\r\n")
            if line == "":
                if "id" in cur:
                    got.append(cur)
                    self.receipt(stream, cur["id"])
                    if '"result"' in cur.get("data", ""):
                        break
                cur = {}
                continue
            field, _, value = line.partition(":")
            cur[field] = value.lstrip(" ")
        return got

    def receipt(self, stream: str, event_id: str) -> None:
        row = {
            "ts": int(time.time() * 1000),
            "session_hmac": hmac.new(
                KEY.encode(), self.session.encode(), hashlib.sha256
            ).hexdigest(),
            "generation": 1,
            "stream_id": stream,
            "event_id": event_id,
            "verdict": "accepted",
            "delivery": "live",
        }
        with open(self.inbox, "a") as fh:
            fh.write(json.dumps(row) + "\n")

    def initialize(self, **extra):
        rid = self._id()
        c, r = self.request(
            "POST",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "initialize",
                "params": {
                    "protocolVersion": self.version,
                    "capabilities": {},
                    "clientInfo": {"name": "e2e", "version": "1"},
                },
            },
            session=False,
            extra=extra,
        )
        if r.status != 200:
            r.read()
            return r.status
        self.session = r.getheader("Mcp-Session-Id")
        self.events(r, str(rid))
        c2, r2 = self.request("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"})
        r2.read()
        return r.status

    def _id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    def call(self, tool: str, args: dict):
        rid = self._id()
        c, r = self.request(
            "POST",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": tool, "arguments": args, "_meta": {"progressToken": f"p{rid}"}},
            },
        )
        return c, r, str(rid)

    def resume(self, stream: str, last_event_id: str, retry_s: float = 0.6):
        """Reconnect with Last-Event-ID until the result arrives; the SDK ends a resumed
        stream after the replay while the first response is still registered, so a real
        client reconnects again after `retry`."""
        got: list[dict] = []
        for _ in range(8):
            c, r = self.request("GET", extra={"Last-Event-ID": last_event_id})
            assert r.status == 200, r.status
            more = [e for e in self.events(r, stream) if e.get("data")]
            got += more
            if got and '"result"' in got[-1].get("data", ""):
                return got
            if more:
                last_event_id = more[-1]["id"]
            time.sleep(retry_s)
        raise AssertionError("the stream never finished")


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    d = tmp_path_factory.mktemp("e2e")
    (d / "logs").mkdir()
    (d / "alt-logs").mkdir()
    for sub in ("nb", "np", "nf", "nu", "ns"):
        (d / sub).mkdir()
    ledger = d / "logs" / "ledger"
    inbox = d / "logs" / "inbox-client.jsonl"
    server, caddy_port, nginx_port, alt_port = _port(), _port(), _port(), _port()
    env = dict(os.environ, REPLAYGATE_HMAC_KEY=KEY)
    procs = []
    logs = contextlib.ExitStack()

    def log(name):
        return logs.enter_context(open(d / name, "w"))

    t0 = int(time.time() * 1000) - 60_000
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps({"ts": t0, "stage": STAGE, "action": "start", "scope": "read", "percent": 100})
        + "\n"
    )
    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "replaygate.recorder.example_server",
                    "--port",
                    str(server),
                    "--ledger",
                    str(ledger),
                    "--stage",
                    STAGE,
                    # A bounded replay store, as real servers have (256, 512 events): the
                    # burst of step 6c evicts a cursor.
                    "--max-events",
                    str(MAX_EVENTS),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log("server.log"),
            )
        )
        procs.append(caddy(d, CADDYFILE.format(d=d, port=caddy_port, server=server), logs))
        (d / "nginx.conf").write_text(
            NGINX_CONF.format(d=d, port=nginx_port, alt_port=alt_port, server=server)
        )
        procs.append(
            subprocess.Popen(
                ["nginx", "-c", str(d / "nginx.conf"), "-p", str(d)],
                stdout=subprocess.DEVNULL,
                stderr=log("nginx.out"),
            )
        )
        for p in (server, caddy_port, nginx_port, alt_port):
            _wait(p)
        started = time.time()
        # 1. A normal call, through Caddy.
        a = Client(caddy_port, inbox)
        assert a.initialize() == 200
        _, r, s = a.call("slow", {"n": 2})
        assert '"done 2"' in a.events(r, s)[-1]["data"]
        # 2. A stream cut by the client mid-way, resumed with Last-Event-ID after retry.
        c, r, s = a.call("slow", {"n": 8})
        seen = a.events(r, s, limit=3)
        c.sock.close()
        time.sleep(1.5)
        rest = a.resume(s, seen[-1]["id"])
        assert '"done 8"' in rest[-1]["data"]
        # 3. A stream closed by the server (close_sse_stream), resumed after retry.
        c, r, s = a.call("nudge", {})
        seen = a.events(r, s)
        assert seen and int(seen[0].get("retry", 0)) == 500
        time.sleep(0.8)
        rest = a.resume(s, seen[-1]["id"])
        assert '"nudged"' in rest[-1]["data"]
        # 4. Through nginx: a session deleted, reused (404), then a new initialize.
        b = Client(nginx_port, inbox, agent="e2e-client/2")
        assert b.initialize() == 200
        _, r, s = b.call("slow", {"n": 1})
        b.events(r, s)
        _, r = b.request("DELETE")
        r.read()
        assert r.status == 200
        _, r, s = b.call("slow", {"n": 1})
        r.read()
        assert r.status == 404
        b.session = None
        assert b.initialize() == 200
        _, r, s = b.call("slow", {"n": 1})
        b.events(r, s)
        # 4b. Through nginx's second log format: a session the server does not know (404),
        # then a new initialize. (No DELETE: its ledger row would need this log to match.)
        e = Client(alt_port, inbox, agent="e2e-client/3")
        assert e.initialize() == 200
        e.session = "0" * 32
        _, r, s = e.call("slow", {"n": 1})
        r.read()
        assert r.status == 404
        e.session = None
        assert e.initialize() == 200
        # 5. A bad Origin (403, through Caddy) and a bad Host (421, through nginx).
        assert Client(caddy_port, inbox).initialize(Origin="https://evil.example") == 403
        # As a DNS-rebinding page sends it: its own Origin with the foreign Host.
        rebind = {"Host": "evil.example", "Origin": "http://evil.example"}
        assert Client(nginx_port, inbox).initialize(**rebind) == 421
        # 6. Failure modes of public clients and servers (docs/field-guide.md).
        # 6a. A client that puts its cursor on a POST (and never resumes by GET).
        e = Client(caddy_port, inbox, agent="e2e-client/7")
        assert e.initialize() == 200
        _, r, s = e.call("slow", {"n": 1})
        last = e.events(r, s)[-1]["id"]
        rid = e._id()
        _, r = e.request(
            "POST",
            {
                "jsonrpc": "2.0",
                "id": rid,
                "method": "tools/call",
                "params": {"name": "slow", "arguments": {"n": 1}},
            },
            extra={"Last-Event-ID": last},
        )
        assert '"done 1"' in e.events(r, str(rid))[-1]["data"]
        # 6b. A stream cut mid-way, re-opened by a GET without Last-Event-ID: what the
        # tool sent in the gap is lost.
        f = Client(nginx_port, inbox, agent="e2e-client/8")
        assert f.initialize() == 200
        c, r, s = f.call("slow", {"n": 8})
        f.events(r, s, limit=3)
        _hang_up(c)
        time.sleep(1.2)
        c, r = f.request("GET")
        assert r.status == 200
        time.sleep(0.5)
        _hang_up(c)
        # 6c. A stream cut mid-way; a burst on another session fills the bounded replay
        # store before the client resumes, so its cursor has been evicted.
        g = Client(nginx_port, inbox, agent="e2e-client/9")
        assert g.initialize() == 200
        g_started = time.monotonic()
        c, r, s = g.call("slow", {"n": 8})
        cursor = g.events(r, s, limit=3)[-1]["id"]
        _hang_up(c)
        h = Client(nginx_port, inbox, agent="e2e-client/10")
        assert h.initialize() == 200
        _, r, s2 = h.call("burst", {"n": MAX_EVENTS + 16})
        assert '"burst' in h.events(r, s2)[-1]["data"]
        time.sleep(0.6)
        _, r = g.request("GET", extra={"Last-Event-ID": cursor})
        assert r.status == 200 and not [ev for ev in g.events(r, s) if ev.get("data")]
        # The tool runs on (8 steps of 0.3 s) and produces its answer, which no response
        # carries: wait for it, or a fast run would stop the server before it answers.
        time.sleep(max(0.0, g_started + 8 * 0.3 + 0.5 - time.monotonic()))
        # 7. The SDK's own high-level client, with its default revision (2026-07-28).
        from mcp import Client as SdkClient

        async def sdk():
            async with SdkClient(f"http://127.0.0.1:{caddy_port}/mcp") as client:
                res = await client.call_tool("slow", {"n": 1})
                return res

        sdk_result = asyncio.run(sdk())
        elapsed = time.time() - started
    finally:
        stop(procs)
        logs.close()
    # Keep real captured lines as adapter fixtures when asked (a maintainer's refresh).
    if os.environ.get("REPLAYGATE_CAPTURE_FIXTURES"):
        fx = Path(__file__).parent / "fixtures" / "proxy" / "captured"
        fx.mkdir(parents=True, exist_ok=True)
        for name in ("caddy-access.log", "nginx-access.log"):
            shutil.copy(d / "logs" / name, fx / name)
    return d, sdk_result, elapsed


@pytest.fixture(scope="module")
def analysed(traffic):
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    d, _, _ = traffic
    os.environ["REPLAYGATE_HMAC_KEY_E2E"] = KEY
    config = from_mapping(
        {
            "hmac_key_env": "REPLAYGATE_HMAC_KEY_E2E",
            "origin_allowlist": ["http://localhost:*"],
            "min_samples": {"cross_stream_acceptances": 1, "recovery_p99": 1},
        }
    )
    con = dbm.connect(str(d / "e2e.duckdb"))
    report = ingest(con, [d / "logs"], config)
    runner.analyse(con, config)
    return con, config, report


def test_the_run_is_quick(traffic):
    _, sdk_result, elapsed = traffic
    assert elapsed < 60
    assert "done 1" in str(sdk_result)


def test_everything_ingests(analysed):
    con, _, report = analysed
    assert report.quarantined == 0, report.quarantine_reasons
    rows = report.rows_by_type()
    assert rows["proxy"] >= 15 and rows["sessions"] >= 4 and rows["events"] >= 20
    assert rows["inbox"] >= 15 and rows["streams"] >= 10 and rows["rollout"] == 1


def test_findings_are_exactly_the_raw_ids_and_the_field_failures(analysed):
    con, _, _ = analysed
    found = con.execute(
        "SELECT detector, json_extract_string(detail, '$.file') FROM findings "
        "WHERE detector = 'raw_session_id_logged' ORDER BY 2"
    ).fetchall()
    # Both proxies log the Mcp-Session-Id header as it is.
    assert found == [
        ("raw_session_id_logged", "caddy-access.log"),
        ("raw_session_id_logged", "nginx-access.log"),
    ]
    # Besides, exactly the failure modes of step 6: one each.
    others = dict(
        con.execute(
            "SELECT detector, count(*) FROM findings "
            "WHERE detector <> 'raw_session_id_logged' GROUP BY 1"
        ).fetchall()
    )
    assert others == {
        "origin_refused_not_403": 1,  # the 421 to the rebinding probe (low, not gated)
        "cursor_on_post": 1,
        "resume_without_cursor": 1,
        "replay_buffer_exhausted": 1,
        "cursor_rejected": 1,
        # Both of those streams lose their answer: the tool finishes after the client's
        # cursor-less re-open (nothing replayed) or its rejected resume, and no response
        # carries the result.
        "undelivered_result": 2,
    }
    lost = con.execute(
        """SELECT f.detector FROM findings f JOIN findings u USING (session_hmac, stream_id)
           WHERE u.detector = 'undelivered_result' AND f.detector <> 'undelivered_result'
           ORDER BY 1"""
    ).fetchall()
    assert lost == [("cursor_rejected",), ("replay_buffer_exhausted",), ("resume_without_cursor",)]
    assert not any(
        KEY in str(v)
        for (v,) in con.execute(
            "SELECT session_hmac FROM proxy WHERE session_hmac IS NOT NULL"
        ).fetchall()
    )


def test_what_the_proxies_saw(analysed):
    con, _, _ = analysed
    statuses = dict(con.execute("SELECT status, count(*) FROM proxy GROUP BY 1").fetchall())
    assert statuses[403] == 1 and statuses[421] == 1 and statuses[404] == 1
    # Request start, not end: the long streams start before the requests that follow them.
    gets = con.execute(
        "SELECT count(*) FROM proxy WHERE method = 'GET' AND last_event_id "
        "IS NOT NULL AND status = 200"
    ).fetchone()[0]
    assert gets >= 2
    revs = {r for (r,) in con.execute("SELECT DISTINCT protocol_version FROM proxy").fetchall()}
    assert "2026-07-28" in revs


def test_ledger_recovery_and_gate_measures(analysed):
    from replaygate.queries import gates

    con, config, _ = analysed
    rec = con.execute(
        "SELECT count(*), max(secs) FROM a_recoveries WHERE reopen_ts IS NOT NULL"
    ).fetchone()
    assert rec[0] >= 2 and rec[1] < 5
    stage = gates.evaluate(con, config, STAGE)["stages"][0]
    g = {x["id"]: x for x in stage["gates"]}
    assert g["reinit_after_404"]["value"] == 1.0 and g["reinit_after_404"]["sample"] == 1
    assert g["invalid_origin_rejection"]["value"] == 1.0
    assert g["recovery_p99"]["sample"] >= 2 and g["recovery_p99"]["status"] == "pass"
    assert g["cross_stream_acceptances"]["status"] == "pass"
    assert g["silent_truncations"]["status"] == "pass"
    assert g["raw_session_ids"]["status"] == "fail"
    assert g["lost_responses"]["status"] == "fail" and g["lost_responses"]["value"] == 2
    # Neither proxy logs token subjects: no request's subject could be compared with its
    # session's, so auth_binding judged none (docs/detectors.md, "Left out of the sample").
    auth = g["auth_binding"]
    assert auth["status"] == "insufficient" and auth["sample"] == 0 and auth["cannot_tell"] > 0
    assert stage["decision"] == "ROLLBACK"
    assert stage["reasons"] == [
        next(x["reason"] for x in stage["gates"] if x["id"] == gate)
        for gate in ("raw_session_ids", "lost_responses", "auth_binding")
    ]


def test_a_differently_keyed_nginx_format_finds_no_missing_reinit(traffic):
    """The second nginx log_format names the answer's session header
    `resp_mcp_session_id`: the re-initialize after the 404 is seen, so no reinit_missing
    and no `cannot_tell` either."""
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import runner

    d, _, _ = traffic
    os.environ["REPLAYGATE_HMAC_KEY_E2E"] = KEY
    config = from_mapping({"hmac_key_env": "REPLAYGATE_HMAC_KEY_E2E"})
    con = dbm.connect(str(d / "alt.duckdb"))
    report = ingest(con, [d / "alt-logs" / "nginx-alt-access.log"], config)
    runner.analyse(con, config)
    assert report.quarantined == 0, report.quarantine_reasons
    assert "proxy.initialize" in report.files[0].facts["found"]
    statuses = dict(con.execute("SELECT status, count(*) FROM proxy GROUP BY 1").fetchall())
    assert statuses[404] == 1
    inits = con.execute("SELECT count(*) FROM proxy WHERE jsonrpc_method = 'initialize'").fetchone()
    assert inits[0] == 2
    found = {r[0] for r in con.execute("SELECT DISTINCT detector FROM findings").fetchall()}
    assert "reinit_missing" not in found
    assert "reinit_missing" not in runner.cannot_tell(con)
    con.close()


def test_the_field_failures_as_the_recorder_saw_them(analysed):
    con, _, _ = analysed
    post = con.execute(
        "SELECT detail->>'posts', detail->>'get_resumes' FROM findings "
        "WHERE detector = 'cursor_on_post'"
    ).fetchone()
    assert post == ("1", "0")
    lost = json.loads(
        con.execute(
            "SELECT detail FROM findings WHERE detector = 'resume_without_cursor'"
        ).fetchone()[0]
    )
    # The cursorless GET re-opened the broken stream: events sent in the gap were lost.
    assert lost["basis"] == "client" and lost["lost_seqs"] and min(lost["lost_seqs"]) >= 3
    ex = json.loads(
        con.execute(
            "SELECT detail FROM findings WHERE detector = 'replay_buffer_exhausted'"
        ).fetchone()[0]
    )
    # The recorder logged the store's eviction of the cursor, with how full it was.
    assert ex["buffer_depth"] == MAX_EVENTS and ex["evicted_at"] and ex["events_lost"] >= 1
    pair = con.execute(
        "SELECT list(s.state ORDER BY s.ts, s.pos), "
        "list(s.resume_from_event_id ORDER BY s.ts, s.pos) "
        "FROM streams s JOIN findings f USING (session_hmac, stream_id) "
        "WHERE f.detector = 'replay_buffer_exhausted' AND state IN "
        "('RESUME_PENDING', 'CURSOR_REJECTED')"
    ).fetchone()
    assert pair[0] == ["RESUME_PENDING", "CURSOR_REJECTED"]
    assert pair[1][0] == pair[1][1] == ex["cursor"]
    evicted = con.execute(
        "SELECT count(*), max(buffer_depth) FROM events WHERE disposition = 'evicted'"
    ).fetchone()
    assert evicted[0] >= 16 and evicted[1] == MAX_EVENTS
