"""End to end against an implementation nobody here wrote: a server and clients on the
official TypeScript SDK (npm `@modelcontextprotocol/sdk`; tests/node/ts_server.mjs and
ts_client.mjs) behind real Caddy and nginx, each logging in the formats of
docs/sources.md, raw and redacting. The clients call, cut a stream and resume it, re-send
a write blindly, DELETE a session and reuse it, let the server expire one, send foreign
Origins to a server with DNS-rebinding protection on and to one with it off, and storm
the server with cursor-less re-opens. Every request they make is written to a ground
truth; replaygate reads each proxy log alone (no ledgers: a TypeScript shop has only its
proxies) and its reading is held against that truth."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from . import nodejs
from .procs import REAL_PROXIES, caddy, stop
from .procs import free_port as _port
from .procs import wait_port as _wait

pytestmark = [*REAL_PROXIES, nodejs.needs(nodejs.SDK)]
STAGE = "ts-e2e"
IDLE_MS = 3000
KEY = "typescript-e2e-key-not-secret"

# docs/sources.md's nginx format (raw ids), and its redacting variant without njs: no
# session id, a flag for "a new session was issued". Both log the answer's size and type and
# whether the request ended whole (`$request_completion`), as docs/sources.md's do.
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
    '"body_bytes_sent":"$body_bytes_sent",'
    '"resp_content_type":"$sent_http_content_type",'
    '"request_completion":"$request_completion",'
    '"new_session_id":"$upstream_http_mcp_session_id"'
  '}}';
  map $upstream_http_mcp_session_id $mcp_new_session {{ "" ""; default "1"; }}
  log_format mcp_redacted escape=json '{{'
    '"msec":"$msec","request_time":"$request_time",'
    '"method":"$request_method","uri":"$request_uri","status":"$status",'
    '"origin":"$http_origin",'
    '"mcp_protocol_version":"$http_mcp_protocol_version",'
    '"last_event_id":"$http_last_event_id","mcp_method":"$http_mcp_method",'
    '"user_agent":"$http_user_agent","remote_addr":"$remote_addr",'
    '"remote_user":"$remote_user","upstream":"$upstream_addr",'
    '"retry_after":"$sent_http_retry_after","body_bytes_sent":"$body_bytes_sent",'
    '"resp_content_type":"$sent_http_content_type",'
    '"request_completion":"$request_completion","new_session":"$mcp_new_session"'
  '}}';
  server {{
    listen 127.0.0.1:{on_port};
    access_log {d}/logs/nginx-raw/access.log mcp_json;
    access_log {d}/logs/nginx-redacted/access.log mcp_redacted;
    location /mcp {{
      proxy_pass http://127.0.0.1:{on};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
  server {{
    listen 127.0.0.1:{old_port};
    access_log {d}/logs/nginx-400-raw/access.log mcp_json;
    location /mcp {{
      proxy_pass http://127.0.0.1:{old};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
  server {{
    listen 127.0.0.1:{off_port};
    access_log {d}/logs/nginx-off-raw/access.log mcp_json;
    access_log {d}/logs/nginx-off-redacted/access.log mcp_redacted;
    location /mcp {{
      proxy_pass http://127.0.0.1:{off};
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 1h;
    }}
  }}
}}
"""

# docs/sources.md's Caddy site (raw ids), and its redacting filter; request bodies buffered
# (the note on tests/test_e2e_real.py's CADDYFILE).
CADDYFILE = """
{{
  admin off
  auto_https off
}}
http://:{raw_port} {{
  bind 127.0.0.1
  log {{
    output file {d}/logs/caddy-raw/access.log
    format json
  }}
  reverse_proxy 127.0.0.1:{on} {{
    flush_interval -1
    buffer_requests
  }}
}}
http://:{red_port} {{
  bind 127.0.0.1
  log {{
    output file {d}/logs/caddy-redacted/access.log
    format filter {{
      wrap json
      fields {{
        request>headers>Mcp-Session-Id delete
        resp_headers>Mcp-Session-Id replace REDACTED
      }}
    }}
  }}
  reverse_proxy 127.0.0.1:{on} {{
    flush_interval -1
    buffer_requests
  }}
}}
"""

# log folder -> (the truth it is held against, protection on the server behind it)
LOGS = {
    "caddy-raw": ("caddy-raw", True),
    "caddy-redacted": ("caddy-redacted", True),
    "nginx-raw": ("nginx", True),
    "nginx-redacted": ("nginx", True),
    "nginx-off-raw": ("nginx-off", False),
    "nginx-off-redacted": ("nginx-off", False),
    "nginx-400-raw": ("nginx-400", True),
}
# What each client run does (ts_client.mjs --steps); the server behind nginx-400 answers
# an unknown session 400, as the SDK's examples did up to 1.24.
STEPS = {"nginx-off": "origins", "nginx-400": "delete_reuse,never_reinit,expiry"}


def _node(script: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [nodejs.node(), str(nodejs.NODE_DIR / script), *args], cwd=nodejs.NODE_DIR, **kw
    )


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    d = tmp_path_factory.mktemp("typescript")
    for sub in ("nb", "np", "nf", "nu", "ns", "truth"):
        (d / sub).mkdir()
    for name in LOGS:
        (d / "logs" / name).mkdir(parents=True)
    on, off, old = _port(), _port(), _port()
    fronts = ("caddy-raw", "caddy-redacted", "nginx", "nginx-off", "nginx-400")
    ports = {name: _port() for name in fronts}
    procs: list = []
    logs = contextlib.ExitStack()

    def err(name: str):
        return logs.enter_context(open(d / f"{name}.log", "w"))  # noqa: SIM115

    try:
        for port, protect, dead in ((on, "on", "404"), (off, "off", "404"), (old, "on", "400")):
            procs.append(
                _node(
                    "ts_server.mjs",
                    *("--port", str(port), "--protect", protect, "--idle-ms", str(IDLE_MS)),
                    *("--dead-status", dead),
                    stdout=subprocess.DEVNULL,
                    stderr=err(f"server-{port}"),
                )
            )
        procs.append(
            caddy(
                d,
                CADDYFILE.format(
                    d=d, on=on, raw_port=ports["caddy-raw"], red_port=ports["caddy-redacted"]
                ),
                logs,
            )
        )
        (d / "nginx.conf").write_text(
            NGINX_CONF.format(
                d=d,
                on=on,
                off=off,
                old=old,
                on_port=ports["nginx"],
                off_port=ports["nginx-off"],
                old_port=ports["nginx-400"],
            )
        )
        procs.append(
            subprocess.Popen(
                ["nginx", "-c", str(d / "nginx.conf"), "-p", str(d)],
                stdout=subprocess.DEVNULL,
                stderr=err("nginx"),
            )
        )
        for p in (on, off, old, *ports.values()):
            _wait(p)
        started = time.time()
        clients = {
            front: _node(
                "ts_client.mjs",
                *("--url", f"http://127.0.0.1:{port}/mcp", "--idle-ms", str(IDLE_MS)),
                *("--truth", str(d / "truth" / f"{front}.jsonl")),
                *("--steps", STEPS.get(front, "all")),
                stdout=subprocess.DEVNULL,
                stderr=err(f"client-{front}"),
            )
            for front, port in ports.items()
        }
        for front, c in clients.items():
            assert c.wait(timeout=120) == 0, (d / f"client-{front}.log").read_text()
        elapsed = time.time() - started
        time.sleep(0.5)  # the proxies log the last cut streams
    finally:
        stop(procs)
        logs.close()
    truth = {
        front: [json.loads(line) for line in (d / "truth" / f"{front}.jsonl").open()]
        for front in ports
    }
    (d / "logs" / "rollout.jsonl").write_text(
        json.dumps(
            {
                "ts": min(r["t0"] for rows in truth.values() for r in rows) - 60_000,
                "stage": STAGE,
                "action": "start",
                "scope": "write",
            }
        )
        + "\n"
    )
    return d, truth, elapsed


def _analyse(d: Path, name: str, config: dict):
    from replaygate.core import db as dbm
    from replaygate.core.config import from_mapping
    from replaygate.ingest.load import ingest
    from replaygate.queries import gates, runner

    os.environ["REPLAYGATE_HMAC_KEY_TS"] = KEY
    cfg = from_mapping({"hmac_key_env": "REPLAYGATE_HMAC_KEY_TS", **config})
    tag = "configured" if config else "bare"
    con = dbm.connect(str(d / f"{name}-{tag}.duckdb"))
    report = ingest(con, [d / "logs" / name / "access.log", d / "logs" / "rollout.jsonl"], cfg)
    runner.analyse(con, cfg)
    stage = gates.evaluate(con, cfg, STAGE)["stages"][0]
    return con, report, stage


@pytest.fixture(scope="module")
def analysed(traffic):
    """Each proxy log read alone, with the allow-list of the clients' own origin."""
    d, _, _ = traffic
    out = {}
    for name in LOGS:
        out[name] = _analyse(d, name, {"origin_allowlist": ["http://localhost:*"]})
    yield out
    for con, _, _ in out.values():
        con.close()


def _served(row: dict) -> bool:
    return 200 <= row["status"] < 400


def test_the_clients_did_what_the_truth_says(traffic):
    _, truth, elapsed = traffic
    assert elapsed < 60
    for front, rows in truth.items():
        assert not [r for r in rows if "error" in r], front
        if front in STEPS:
            continue
        steps = {r["step"] for r in rows}
        assert {"cut_resume", "blind_resend", "storm", "expiry", "origins"} <= steps
        # The SDK resumed the cut stream with its cursor (after 409s while the server
        # still held the cut connection); the write went out twice.
        resumes = [r["status"] for r in rows if r["step"] == "cut_resume" and r["last_event_id"]]
        assert resumes[-1] == 200 and set(resumes[:-1]) <= {409}, resumes
        sends = [r for r in rows if r["step"] == "blind_resend" and r["rpc_method"] == "tools/call"]
        assert [r["status"] for r in sends] == [200, 200]
        # Protection on: the transport answers 403, the session routing 404/400 first.
        evil = [r["status"] for r in rows if r["origin"] == "https://evil.example"]
        assert sorted(evil) == [200, 400, 403, 403, 404], evil  # 200: Express's OPTIONS
        storm = [r for r in rows if r["step"] == "storm" and r["method"] == "GET"]
        # 80 re-opens after the SDK's own standalone GET, none with a cursor.
        assert len(storm) == 81 and not any(r["last_event_id"] for r in storm)
    off = [r for r in truth["nginx-off"] if r["origin"] == "https://evil.example"]
    assert sorted(r["status"] for r in off) == [200, 200, 200, 400, 404]
    # The older routing: a deleted or expired session is answered 400.
    dead = [r for r in truth["nginx-400"] if r["session"] and 400 <= r["status"] < 500]
    assert dead and {r["status"] for r in dead} == {400}


def test_every_request_is_in_each_log_once(traffic, analysed):
    """Each log has exactly the requests its clients made: by method and status, and
    by Origin."""
    _, truth, _ = traffic
    for name, (front, _) in LOGS.items():
        con, report, _ = analysed[name]
        assert report.quarantined == 0, (name, report.quarantine_reasons)
        logged = Counter(
            con.execute("SELECT method, status, coalesce(origin, '') FROM proxy").fetchall()
        )
        made = Counter((r["method"], r["status"], r["origin"] or "") for r in truth[front])
        assert logged == made, (name, logged - made, made - logged)


def test_raw_ids_are_reported_and_redacted_logs_keep_them_out(traffic, analysed):
    _, truth, _ = traffic
    for name, (front, _) in LOGS.items():
        con, _, stage = analysed[name]
        raw = {r["session"] for r in truth[front] if r["session"]}
        raw |= {r["issued_session"] for r in truth[front] if r["issued_session"]}
        tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()]
        for t in tables:
            cur = con.execute(f"SELECT string_agg(CAST(COLUMNS(*) AS VARCHAR), '|') FROM \"{t}\"")
            blob = "|".join(str(v) for v in cur.fetchone() or () if v)
            assert not [s for s in raw if s in blob], (name, t)
        g = {x["id"]: x for x in stage["gates"]}
        found = con.execute(
            "SELECT count(*) FROM findings WHERE detector = 'raw_session_id_logged'"
        ).fetchone()[0]
        if name.endswith("-raw"):
            assert found == 1 and g["raw_session_ids"]["status"] == "fail", name
        else:
            assert found == 0 and g["raw_session_ids"]["status"] == "pass", name


def test_served_foreign_origins_are_found_where_protection_is_off(traffic, analysed):
    """The server without protection served the foreign Origin's initialize, ping and
    GET: a real violation, critical, and the Origin gate fails."""
    _, truth, _ = traffic
    served = [
        r
        for r in truth["nginx-off"]
        if r["origin"] == "https://evil.example" and _served(r) and r["method"] != "OPTIONS"
    ]
    assert len(served) == 2
    for name in ("nginx-off-raw", "nginx-off-redacted"):
        con, _, stage = analysed[name]
        g = {x["id"]: x for x in stage["gates"]}
        assert g["invalid_origin_rejection"]["status"] == "fail", name
        sev = {
            s
            for (s,) in con.execute(
                "SELECT severity FROM findings WHERE detector = 'invalid_origin_accepted'"
            ).fetchall()
        }
        assert sev == {"critical"}, name


def test_initializes_are_requests_without_a_session_that_got_one(traffic, analysed):
    """The TypeScript server sets Mcp-Session-Id on every SSE answer; in a log that
    keeps the request's session id, only the requests without one that got one are
    initializes, exactly the clients' initializes."""
    _, truth, _ = traffic
    for name, (front, _) in LOGS.items():
        if not name.endswith("-raw"):
            continue
        con, _, _ = analysed[name]
        made = [
            r
            for r in truth[front]
            if r["method"] == "POST" and not r["session"] and r["issued_session"]
        ]
        assert made and all(r["rpc_method"] == "initialize" for r in made)
        answers = [r for r in truth[front] if r["session"] and r["issued_session"]]
        assert len(answers) > len(made)  # the header on answers that are no initialize
        got = con.execute("SELECT count(*) FROM proxy WHERE jsonrpc_method = 'initialize'")
        assert got.fetchone()[0] == len(made), name


def _hmac(session: str) -> str:
    from replaygate.ingest.redact import hmac_hex

    return hmac_hex(KEY.encode(), session)


def _gates(stage: dict) -> dict:
    return {x["id"]: x for x in stage["gates"]}


def _count(con, detector: str) -> int:
    return con.execute(
        "SELECT count(*) FROM findings WHERE detector = $d", {"d": detector}
    ).fetchone()[0]


def test_refused_foreign_origins_never_count_as_served(traffic, analysed):
    """Protection on: every foreign-Origin request was refused (403 by the transport,
    404/400 by the session routing) or was Express's preflight: no finding of a served
    one, the Origin gate passes, and the refusals that are not 403 are low findings."""
    _, truth, _ = traffic
    for name, (front, protected) in LOGS.items():
        con, _, stage = analysed[name]
        evil = [r for r in truth[front] if r["origin"] == "https://evil.example"]
        served = [r for r in evil if _served(r) and r["method"] != "OPTIONS"]
        not_403 = [r for r in evil if 400 <= r["status"] < 500 and r["status"] != 403]
        assert _count(con, "invalid_origin_accepted") == len(served), name
        assert _count(con, "origin_refused_not_403") == len(not_403), name
        assert _count(con, "allowed_origin_refused") == 0, name
        g = _gates(stage)
        assert g["invalid_origin_rejection"]["status"] == ("pass" if protected else "fail"), name
        assert g["allowed_origin_refusals"]["status"] == "pass", name


def test_unconfigured_foreign_origins_are_never_critical(traffic):
    """With no allow-list configured, a foreign Origin is no critical finding and no
    ROLLBACK: the Origin gate says it cannot judge."""
    d, _, _ = traffic
    for name in ("nginx-redacted", "caddy-redacted", "nginx-off-redacted"):
        con, _, stage = _analyse(d, name, {})
        crit = con.execute(
            "SELECT count(*) FROM findings WHERE severity = 'critical' AND detector LIKE '%origin%'"
        ).fetchone()[0]
        assert crit == 0, name
        assert _gates(stage)["invalid_origin_rejection"]["status"] == "insufficient", name
        con.close()


def test_dead_sessions_answered_400_count_once_configured(traffic, analysed):
    """The server behind nginx-400 answers a deleted or expired session 400: by default
    that is no dead session (nothing to judge); with `dead_session_statuses = [400]` the
    client that never initialized again fails the gate."""
    d, truth, _ = traffic
    con, _, stage = analysed["nginx-400-raw"]
    assert _count(con, "reinit_missing") == 0
    assert _gates(stage)["reinit_after_404"]["sample"] == 0
    con, _, stage = _analyse(
        d,
        "nginx-400-raw",
        {"origin_allowlist": ["http://localhost:*"], "dead_session_statuses": [400]},
    )
    dead = [r for r in truth["nginx-400"] if r["session"] and r["status"] == 400]
    g = _gates(stage)["reinit_after_404"]
    assert g["status"] == "fail" and dead, g
    never = con.execute(
        "SELECT count(*) FROM findings WHERE detector = 'reinit_missing' "
        "AND NOT CAST(detail->>'reinitialized' AS BOOLEAN)"
    ).fetchone()[0]
    assert never == 1  # the client that stopped after its DELETE
    con.close()


def test_a_cursorless_reopen_storm_fails_the_reconnect_gate(traffic, analysed):
    """80 re-opens of a session's GET stream without Last-Event-ID in about a second
    (Express answering some 409: the previous one not yet closed) exceed the reconnect
    budget in every log that shows the session."""
    _, truth, _ = traffic
    for name, (front, protected) in LOGS.items():
        if not protected or not name.endswith("-raw") or front in STEPS:
            continue
        storm = [r for r in truth[front] if r["step"] == "storm" and r["method"] == "GET"]
        assert (
            len(storm) > 50 and max(r["t0"] for r in storm) - min(r["t0"] for r in storm) < 10_000
        )
        _, _, stage = analysed[name]
        g = _gates(stage)["reconnect_qps"]
        assert g["status"] == "fail" and g["sample"] >= 50, (name, g)


def test_reinit_after_404_against_the_truth(traffic, analysed):
    """Raw logs: the client that never initialized again fails the gate, by reason; the
    404 of one of three clients sharing `User-Agent: node` (the others' sessions live) is
    `cannot_tell`, not re-initialized by another's initialize. Redacted logs hide the
    session of every 404: the gate cannot judge (insufficient), never passes."""
    _, truth, _ = traffic
    for name, (front, protected) in LOGS.items():
        if not protected or front in STEPS:  # nginx-400: its dead sessions get 400
            continue
        con, _, stage = analysed[name]
        g = _gates(stage)["reinit_after_404"]
        gone = [
            r
            for r in truth[front]
            if r["session"] and r["status"] == 404 and r["method"] != "DELETE"
        ]
        blind = {
            e["missing"]: e["units"]
            for e in stage["cannot_tell"]
            if e["detector"] == "reinit_missing"
        }
        if name.endswith("-raw"):
            assert g["status"] == "fail", (name, g)
            shared = [r for r in gone if r["step"] == "shared_agent"]
            assert len(shared) == 1 and blind == {"client identity": 1}, (name, blind)
            found = {
                s: json.loads(d)["reason"]
                for s, d in con.execute(
                    "SELECT session_hmac, detail FROM findings WHERE detector = 'reinit_missing'"
                ).fetchall()
            }
            (never,) = [r for r in gone if r["step"] == "never_reinit"]
            assert found.get(_hmac(never["session"])) == "not re-initialized", (name, found)
            assert _hmac(shared[0]["session"]) not in found, (name, found)
            assert g["sample"] == len(gone) - 1 and g["cannot_tell"] == 1, (name, g)
        else:
            assert g["status"] == "insufficient", (name, g)
            assert blind == {"proxy.session_hmac": len(gone)}, (name, blind, len(gone))


def test_every_log_judges_lost_responses(traffic, analysed):
    """Every proxy log of this traffic shows the answers' sizes and types (Caddy's default
    JSON; nginx with `$body_bytes_sent`, `$sent_http_content_type`), so `lost_responses`
    judges each stage on the event-stream answers that carried bytes: none of them lost an
    answer, and none is insufficient. An empty event stream a client ended, or one whose row
    cannot tell who ended it (Caddy), is never a finding."""
    for name in LOGS:
        con, _, stage = analysed[name]
        g = _gates(stage)["lost_responses"]
        sized = con.execute(
            """SELECT count(*) FROM proxy
               WHERE judged_event_stream(method, status, body_bytes_sent, resp_content_type,
                                         client_closed)"""
        ).fetchone()[0]
        found = con.execute(
            "SELECT count(*) FROM findings WHERE detector = 'undelivered_result'"
        ).fetchone()[0]
        assert sized > 0 and g["sample"] == sized, (name, g, sized)
        assert found == 0 and g["status"] == "pass", (name, g)
