"""Proxy access-log adapters: Caddy, nginx, Envoy lines mapped onto the proxy record
type (request start, headers, hashed session ids), and lines that fit no format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.ingest.load import ingest
from replaygate.ingest.redact import hmac_hex

FIXTURES = Path(__file__).parent / "fixtures" / "proxy"
KEY = b"test-key-not-secret"
RAW = "0f3c8a1e2b9d4c5f8a7e6d5c4b3a2918"


def _load(tmp_path, *files, source="auto"):
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    report = ingest(con, list(files), Config(), source=source)
    rows = con.execute(
        """SELECT epoch_ms(ts), method, status, session_hmac, origin, protocol_version,
                  last_event_id, jsonrpc_method, client_addr, raw_session_id, duration_ms
           FROM proxy ORDER BY ts"""
    ).fetchall()
    q = con.execute("SELECT line, reason FROM quarantine").fetchall()
    texts = " ".join(
        str(v)
        for t in ("proxy", "quarantine", "files")
        for row in con.execute(f"SELECT * FROM {t}").fetchall()
        for v in row
    )
    con.close()
    return report, rows, q, texts


def test_caddy_default_json_log(tmp_path):
    report, rows, q, texts = _load(tmp_path, FIXTURES / "caddy-access.log")
    assert RAW not in texts and "aaaa1111" not in texts
    first = rows[0]
    assert first[0] == 1795938301500 - 250  # logged at the end: start = ts - duration
    assert first[1:3] == ("POST", 200)
    assert first[3] == hmac_hex(KEY, RAW)
    assert first[4:7] == ("http://localhost:6274", "2025-11-25", None)
    assert first[9] is True
    init = rows[1]
    assert init[3] is None and init[9] is True  # new session id only in the response
    refused = rows[2]
    assert refused[2] == 403 and refused[4] == "https://evil.example" and refused[9] is False
    assert rows[3][7] == "tools/call"  # Mcp-Method of a 2026-07-28 client
    assert q == [(5, "fits no proxy log format (Caddy, nginx, Envoy or contract)")]


def test_nginx_documented_format(tmp_path):
    _, rows, q, texts = _load(tmp_path, FIXTURES / "nginx-access.log")
    assert RAW not in texts
    get = rows[0]
    assert get[0] == 1795938305250 - 250
    assert get[1:3] == ("GET", 200)
    assert get[3] == hmac_hex(KEY, RAW)
    assert get[4] is None  # "" means absent
    assert get[6] == "1_123_abcd"
    assert q == []


def test_envoy_documented_format(tmp_path):
    _, rows, q, _ = _load(tmp_path, FIXTURES / "envoy-access.log")
    assert rows[0][0] == 1795938306000  # START_TIME is the start already
    assert rows[0][1:3] == ("POST", 429)
    assert rows[0][4] is None  # "-" means absent
    assert rows[0][3] == hmac_hex(KEY, RAW)


def test_forced_source_reads_any_name_and_rejects_other_shapes(tmp_path):
    odd = tmp_path / "edge.txt"
    odd.write_text(
        (FIXTURES / "nginx-access.log").read_text()
        + (FIXTURES / "caddy-access.log").read_text().splitlines()[0]
        + "\n"
    )
    report, rows, q, _ = _load(tmp_path, odd, source="nginx")
    assert len(rows) == 1
    assert q == [(2, "fits no proxy log format (nginx)")]


def test_contract_proxy_files_are_untouched_by_adapters(tmp_path):
    p = tmp_path / "proxy.jsonl"
    p.write_text(json.dumps({"ts": "2026-11-29T07:45:01Z", "method": "GET", "status": 200}) + "\n")
    _, rows, q, _ = _load(tmp_path, p)
    assert len(rows) == 1 and q == []


@pytest.mark.parametrize("bad", ["{not json", "[1,2]", '{"level":"info","msg":"x"}'])
def test_malformed_proxy_lines(tmp_path, bad):
    p = tmp_path / "access.log"
    p.write_text((FIXTURES / "caddy-access.log").read_text().splitlines()[0] + "\n" + bad + "\n")
    _, rows, q, _ = _load(tmp_path, p)
    assert len(rows) == 1 and len(q) == 1 and q[0][0] == 2


CAPTURED = FIXTURES / "captured"


@pytest.mark.parametrize("name", ["caddy-access.log", "nginx-access.log"])
def test_real_captured_logs(tmp_path, name):
    """Lines written by real Caddy 2.6 and nginx 1.22 in front of the SDK server (captured
    from the end-to-end run)."""
    report, rows, q, texts = _load(tmp_path, CAPTURED / name)
    assert q == [] and report.quarantined == 0
    raw = {
        json.loads(line).get("mcp_session_id")
        or (json.loads(line).get("request", {}).get("headers", {}).get("Mcp-Session-Id", [None])[0])
        for line in (CAPTURED / name).read_text().splitlines()
    } - {None, ""}
    assert raw and not any(r in texts for r in raw)
    statuses = {r[2] for r in rows}
    assert 200 in statuses
    # Initialize is inferred from a new session id in the answer (proxies see no body).
    assert sum(1 for r in rows if r[7] == "initialize") >= 1
    starts = [r[0] for r in rows]
    assert all(isinstance(s, int) for s in starts)


def _principals(tmp_path, path, config=None):
    con = dbm.connect(str(tmp_path / f"{path.stem}.duckdb"))
    ingest(con, [path], config or Config())
    rows = con.execute("SELECT principal, user_agent FROM proxy ORDER BY ts").fetchall()
    (file_id,) = con.execute("SELECT file_id FROM files").fetchone()
    from replaygate.ingest import capabilities

    shown = capabilities.shown(con, file_id)
    con.close()
    return rows, shown


@pytest.mark.parametrize("name", ["caddy-probe.log", "nginx-probe.log"])
def test_the_probes_requests_are_its_principal_in_real_proxy_logs(tmp_path, name):
    """`replaygate probe`'s requests as real Caddy and nginx logged them: its User-Agent
    (and, where the format logs it, its header) make each row the probe's principal, so the
    proxy's rows are known as synthetic like its session rows."""
    rows, shown = _principals(tmp_path, CAPTURED / name)
    assert len(rows) == 11
    assert {p for p, _ in rows} == {"replaygate-probe"}
    assert all(a.startswith("replaygate-probe/") for _, a in rows)
    # The marker does not make a log show principals of its own clients.
    if name.startswith("caddy"):
        assert "proxy.principal" not in shown


def _edited(tmp_path, src: Path, edit) -> Path:
    lines = [json.loads(line) for line in src.read_text().splitlines()]
    out = tmp_path / src.name
    out.write_text("".join(json.dumps(edit(j)) + "\n" for j in lines))
    return out


def test_an_unmarked_request_or_a_logged_principal_is_not_the_probe(tmp_path):
    def caddy_unmarked(j):
        h = j["request"]["headers"]
        h.pop("Replaygate-Probe")
        h["User-Agent"] = ["python-httpx/0.28.1 replaygate-probe/0.1.0"]
        return j

    def caddy_header_only(j):
        j["request"]["headers"]["User-Agent"] = ["node"]
        return j

    def caddy_authenticated(j):
        j["user_id"] = "alice"
        return j

    def nginx_other_agent(j):
        j["user_agent"] = "node"
        return j

    def nginx_authenticated(j):
        j["remote_user"] = "alice"
        return j

    cases = [
        ("caddy-probe.log", caddy_unmarked, {None}),
        ("caddy-probe.log", caddy_header_only, {"replaygate-probe"}),
        ("caddy-probe.log", caddy_authenticated, {"alice"}),
        ("nginx-probe.log", nginx_other_agent, {None}),
        ("nginx-probe.log", nginx_authenticated, {"alice"}),
    ]
    for i, (name, edit, want) in enumerate(cases):
        d = tmp_path / str(i)
        d.mkdir()
        rows, _ = _principals(d, _edited(d, CAPTURED / name, edit))
        assert {p for p, _ in rows} == want, edit.__name__


def test_the_probes_header_in_a_users_own_nginx_key(tmp_path):
    from replaygate.core.config import from_mapping

    def keyed(j):
        j["user_agent"] = "node"
        j["synthetic_run"] = "20261202T050001Z-963d86"
        return j

    path = _edited(tmp_path, CAPTURED / "nginx-probe.log", keyed)
    config = from_mapping({"sources": {"nginx": {"fields": {"replaygate_probe": "synthetic_run"}}}})
    (tmp_path / "mapped").mkdir()
    rows, _ = _principals(tmp_path / "mapped", path, config)
    assert {p for p, _ in rows} == {"replaygate-probe"}
    (tmp_path / "unmapped").mkdir()
    rows, _ = _principals(tmp_path / "unmapped", path)
    assert {p for p, _ in rows} == {None}


def test_the_answers_size_and_type_from_each_proxy(tmp_path):
    """Caddy's `size` and `resp_headers` Content-Type, nginx's `$body_bytes_sent` and
    `$sent_http_content_type`, Envoy's `%BYTES_SENT%` and `%RESP(CONTENT-TYPE)%` (the keys
    of docs/sources.md's formats) land in body_bytes_sent and resp_content_type; nginx's
    `$content_type` (the request's) is not read as the answer's, and a log without them
    shows neither fact."""
    sse = "text/event-stream"
    caddy = {
        "ts": 1795938301.5,
        "request": {"method": "POST", "uri": "/mcp", "headers": {}},
        "duration": 0.25,
        "size": 0,
        "status": 200,
        "resp_headers": {"Content-Type": [sse]},
    }
    nginx = {
        "msec": "1795938302.000",
        "request_time": "0.010",
        "method": "POST",
        "status": "200",
        "body_bytes_sent": "412",
        "resp_content_type": sse,
        "content_type": "application/json",
    }
    plain = {"msec": "1795938303.000", "request_time": "0.010", "method": "POST",
             "status": "200", "content_type": "application/json"}  # fmt: skip
    envoy = {
        "start_time": "1795938304.000",
        "method": "POST",
        "response_code": "200",
        "bytes_sent": "0",
        "resp_content_type": sse,
    }
    files = {"caddy": caddy, "nginx": nginx, "plain": plain, "envoy": envoy}
    for name, line in files.items():
        (tmp_path / f"{name}.log").write_text(json.dumps(line) + "\n")
    con = dbm.connect(str(tmp_path / "a.duckdb"))
    ingest(con, [tmp_path / f"{n}.log" for n in files], Config())
    got = con.execute("SELECT body_bytes_sent, resp_content_type FROM proxy ORDER BY ts").fetchall()
    facts = dict(
        con.execute(
            """SELECT regexp_extract(f.path, '(\\w+)\\.log$', 1),
                      list(ff.fact ORDER BY ff.fact) FILTER (
                          WHERE ff.fact IN ('proxy.body_bytes_sent', 'proxy.resp_content_type'))
               FROM files f LEFT JOIN file_facts ff USING (file_id) GROUP BY 1"""
        ).fetchall()
    )
    con.close()
    assert got == [(0, sse), (412, sse), (None, None), (0, sse)]
    both = ["proxy.body_bytes_sent", "proxy.resp_content_type"]
    assert facts == {"caddy": both, "nginx": both, "plain": None, "envoy": both}


def test_a_files_facts_are_stored_in_one_statement_each_once(tmp_path):
    """capabilities.record stores a file's facts, by its keys and by its rows' values, in
    one statement, each fact once (by its keys when both show it), and a fact the file
    already has is not stored again (a grown file)."""
    from replaygate.ingest import capabilities

    con = dbm.connect(str(tmp_path / "facts.duckdb"))
    try:
        con.execute(
            "INSERT INTO proxy (file_id, pos, principal, origin) VALUES (7, 1, 'alice', 'x')"
        )
        sent: list[str] = []

        class Counted:
            def execute(self, sql, params=None):
                sent.append(" ".join(sql.split()[:3]))
                return con.execute(sql, params or {})

        capabilities.record(Counted(), 7, ["proxy"], {"proxy.principal", "proxy.client_addr"})
        assert sent.count("INSERT INTO file_facts") == 1
        rows = con.execute("SELECT fact, how FROM file_facts ORDER BY fact").fetchall()
        assert rows == [
            ("proxy.client_addr", "keys"),
            ("proxy.origin", "values"),
            ("proxy.principal", "keys"),
        ]
        capabilities.record(con, 7, ["proxy"], {"proxy.principal"}, grown=True)
        assert con.execute("SELECT count(*) FROM file_facts").fetchone() == (3,)
    finally:
        con.close()
