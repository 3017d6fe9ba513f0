"""nginx and Envoy logs in the user's own JSON format: recognised spellings,
`[sources.*.fields]` maps, the facts ingest reports per proxy log, and no false
`reinit_missing` on a log whose keys the built-in format does not use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replaygate.core import db as dbm
from replaygate.core.config import Config, from_mapping
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import adapters
from replaygate.ingest.load import ingest
from replaygate.queries import runner

T0 = 1_795_938_300.0
NEW = "0f3c8a1e2b9d4c5f8a7e6d5c4b3a2918"


def _nginx(t, status, sid="", new="", *, new_key="resp_mcp_session_id", **extra):
    line = {
        "msec": f"{t:.3f}",
        "request_time": "0.010",
        "request_method": "POST",
        "request_uri": "/mcp",
        "status": str(status),
        "http_mcp_session_id": sid,
        new_key: new,
        "http_user_agent": "python-httpx",
        "remote_addr": "10.0.0.7",
        "http_mcp_protocol_version": "2025-11-25",
    }
    line.update(extra)
    return line


def _a_404_then_reinit(new_key="resp_mcp_session_id"):
    """A client whose session is gone (404) and who re-initializes a second later."""
    return [
        _nginx(T0, 200, sid="old-session", new_key=new_key),
        _nginx(T0 + 1, 404, sid="old-session", new_key=new_key),
        _nginx(T0 + 2, 200, new=NEW, new_key=new_key),
    ]


def _run(tmp_path, lines, config: Config | None = None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "mcp-access.log"
    log.write_text("".join(json.dumps(x) + "\n" for x in lines))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    report = ingest(con, [log], config or Config())
    runner.analyse(con, config or Config())
    found = dict(con.execute("SELECT detector, count(*) FROM findings GROUP BY ALL").fetchall())
    methods = [r[0] for r in con.execute("SELECT jsonrpc_method FROM proxy ORDER BY ts").fetchall()]
    blind = runner.cannot_tell(con)
    con.close()
    return report, found, methods, blind


@pytest.mark.parametrize(
    "key",
    [
        "resp_mcp_session_id",
        "sent_http_mcp_session_id",
        "upstream_http_mcp_session_id",
        "respMcpSessionId",
        "new_session_id",
    ],
)
def test_recognised_spellings_of_the_new_session_header(tmp_path, key):
    report, found, methods, _ = _run(tmp_path, _a_404_then_reinit(key))
    assert methods == [None, None, "initialize"]
    assert "reinit_missing" not in found
    facts = report.files[0].facts
    assert "proxy.initialize" in facts["found"]


def test_go_style_header_maps(tmp_path):
    lines = [
        {
            "msec": f"{T0 + i:.3f}",
            "request_time": "0.010",
            "method": "POST",
            "status": status,
            "request_headers": {"Mcp-Session-Id": [sid]} if sid else {},
            "resp_headers": {"Mcp-Session-Id": [new]} if new else {},
            "remote_addr": "10.0.0.7",
        }
        for i, (status, sid, new) in enumerate([(200, "s1", ""), (404, "s1", ""), (200, "", NEW)])
    ]
    _, found, methods, _ = _run(tmp_path, lines)
    assert methods == [None, None, "initialize"]
    assert "reinit_missing" not in found


def test_a_key_only_the_configuration_names(tmp_path):
    lines = _a_404_then_reinit("x_sid_issued")
    _, found, _, blind = _run(tmp_path / "a", lines)
    # Unconfigured, the log cannot show an initialize: the 404 is `cannot_tell`, not a finding.
    assert "reinit_missing" not in found
    assert blind["reinit_missing"][0]["missing"] == "proxy.initialize"
    assert blind["reinit_missing"][0]["units"] == 1
    config = from_mapping({"sources": {"nginx": {"fields": {"new_session_id": "x_sid_issued"}}}})
    _, found, methods, blind = _run(tmp_path / "b", lines, config)
    assert methods == [None, None, "initialize"]
    assert "reinit_missing" not in found and "reinit_missing" not in blind
    # And a real missing re-initialize is still found with that map.
    _, found, _, _ = _run(tmp_path / "c", lines[:2], config)
    assert found.get("reinit_missing") == 1


def test_a_new_session_flag_instead_of_the_raw_id(tmp_path):
    lines = _a_404_then_reinit("new_session")
    lines[2]["new_session"] = "1"
    report, found, methods, _ = _run(tmp_path, lines)
    assert methods == [None, None, "initialize"]
    assert "reinit_missing" not in found
    # The raw session id of the request side is still logged here, the new one is not.
    assert report.files[0].facts["found"]


def test_ingest_reports_the_facts_of_each_proxy_log(tmp_path):
    lines = [_nginx(T0, 200, sid="s")]
    for line in lines:
        line.pop("http_mcp_protocol_version")
    report, _, _, _ = _run(tmp_path, lines)
    facts = report.files[0].facts
    assert "proxy.session_hmac" in facts["found"]
    assert "proxy.initialize" in facts["found"]  # the key is there, empty on this line
    assert "proxy.protocol_version" in facts["missing"]
    assert "proxy.principal" in facts["missing"]


def test_envoy_spellings(tmp_path):
    lines = [
        {
            "start_time": f"{T0 + i:.3f}",
            "method": "POST",
            "response_code": status,
            "req_mcp_session_id": sid,
            "resp_mcp_session_id": new,
            "downstream_remote_address": "10.0.0.7",
            "user_agent": "ua",
        }
        for i, (status, sid, new) in enumerate(
            [(200, "s1", "-"), (404, "s1", "-"), (200, "-", NEW)]
        )
    ]
    _, found, methods, _ = _run(tmp_path, lines)
    assert methods == [None, None, "initialize"]
    assert "reinit_missing" not in found


@pytest.mark.parametrize(
    "sources, message",
    [
        ({"haproxy": {"fields": {}}}, "unknown source 'haproxy'"),
        ({"nginx": {"fields": {"nope": "x"}}}, "unknown nginx field 'nope'"),
        ({"nginx": {"fields": {"origin": "a'b"}}}, "must be a log key"),
        ({"nginx": {"fields": {"origin": 3}}}, "must be str"),
        ({"nginx": {"other": {}}}, "unknown key 'other'"),
    ],
)
def test_field_maps_are_validated(sources, message):
    # the form by the configuration, the names by the adapters, as a command loads it
    with pytest.raises(ReplaygateError, match=message):
        adapters.check_sources(from_mapping({"sources": sources}))


def test_a_field_map_naming_no_adapter_stops_a_command_and_an_ingest(tmp_path):
    from replaygate import api

    conf = tmp_path / "replaygate.toml"
    conf.write_text('[sources.haproxy.fields]\norigin = "o"\n')
    with pytest.raises(ReplaygateError, match="unknown source 'haproxy'"):
        api.load_config(conf)
    # a configuration made otherwise (a test, a library caller) is checked by the ingest
    unchecked = from_mapping({"sources": {"nginx": {"fields": {"nope": "x"}}}})
    con = dbm.connect(str(tmp_path / "x.duckdb"))
    with pytest.raises(ReplaygateError, match="unknown nginx field 'nope'"):
        ingest(con, [tmp_path], unchecked)
    con.close()


def test_every_spelling_is_a_plain_json_key():
    for key in adapters.candidate_keys():
        assert "'" not in key.path


def _caddy(t, status, sid=None, resp=None):
    line = {
        "level": "info",
        "ts": t,
        "logger": "http.log.access",
        "msg": "handled request",
        "request": {
            "remote_ip": "10.0.0.7",
            "client_ip": "10.0.0.7",
            "method": "POST",
            "uri": "/mcp",
            "headers": {"User-Agent": ["ua"], **({"Mcp-Session-Id": [sid]} if sid else {})},
        },
        "duration": 0.01,
        "status": status,
        "resp_headers": {"Content-Type": ["text/event-stream"]},
    }
    if resp is not None:
        line["resp_headers"]["Mcp-Session-Id"] = resp
    return line


def test_caddy_with_the_redacting_filter_logs_no_raw_id_and_shows_no_initialize(tmp_path):
    # `request>headers>Mcp-Session-Id delete`, `resp_headers>Mcp-Session-Id replace REDACTED`:
    # whether a request carried a session cannot be told, so an answer setting one is no
    # initialize (the TypeScript SDK sets it on every SSE answer), and the file shows
    # neither the session id nor an initialize (read from its rows, not its format).
    lines = [_caddy(T0, 200, resp="REDACTED"), _caddy(T0 + 1, 200), _caddy(T0 + 2, 404)]
    report, found, methods, blind = _run(tmp_path, lines)
    assert methods == [None, None, None]
    assert "raw_session_id_logged" not in found
    facts = report.files[0].facts
    assert {"proxy.session_hmac", "proxy.initialize"} <= set(facts["missing"])
    # Its 404, whose session the filter took, cannot be judged.
    assert "reinit_missing" not in found
    assert [(e["missing"], e["units"]) for e in blind["reinit_missing"]] == [
        ("proxy.session_hmac", 1)
    ]


def test_caddy_raw_response_id_still_counts_as_raw(tmp_path):
    _, found, methods, _ = _run(tmp_path, [_caddy(T0, 200, resp=[NEW])])
    assert methods == ["initialize"]
    assert found.get("raw_session_id_logged") == 1


def test_envoy_one_character_flag(tmp_path):
    lines = [
        {
            "start_time": f"{T0 + i:.3f}",
            "method": "POST",
            "response_code": 200,
            "new_session": flag,
            "downstream_remote_address": "10.0.0.7",
        }
        for i, flag in enumerate(["0", "-"])  # an id starting with 0; none
    ]
    for line in lines:  # the request's session, as an HMAC from a filter of one's own
        line["mcp_session_hmac"] = "-"
    _, found, methods, _ = _run(tmp_path, lines)
    assert methods == ["initialize", None]
    assert "raw_session_id_logged" not in found
    # Without a key for the request's session, the flag says nothing of an initialize.
    for line in lines:
        del line["mcp_session_hmac"]
    _, _, methods, _ = _run(tmp_path / "no-session", lines)
    assert methods == [None, None]


def test_a_caddy_log_of_thousands_of_lines_loads_under_the_load_memory_limit(tmp_path, monkeypatch):
    # The key scan (which keys a proxy log carries) asked about every candidate key in one
    # query: DuckDB parsed each of a vector's 2,048 lines once per key and held it all, some
    # 1.3 GB for lines like these (the simulator's), beyond the load's limit, so a Caddy log
    # of more than about 1,800 lines (the 100M-event fleet's) was "unreadable file
    # (OutOfMemoryException)".
    monkeypatch.delenv("REPLAYGATE_MEMORY_LIMIT", raising=False)
    n = 4096
    lines = []
    for i in range(n):
        line = _caddy(T0 + i, 200, sid=f"s{i % 97}", resp="REDACTED")
        line["request"].update(proto="HTTP/1.1", host="mcp.example.com", remote_port="49179")
        line["request"]["headers"].update(
            Accept=["application/json, text/event-stream"],
            **{"Content-Type": ["application/json"], "Content-Length": ["180"]},
            **{"Mcp-Protocol-Version": ["2025-11-25"]},
        )
        line["resp_headers"].update(
            Server=["Caddy", "uvicorn"], **{"Cache-Control": ["no-cache, no-transform"]}
        )
        line.update(user_id="", size=707)
        lines.append(json.dumps(line) + "\n")
    log = tmp_path / "proxy-caddy.jsonl"
    log.write_text("".join(lines))
    con = dbm.connect(str(tmp_path / "t.duckdb"))
    report = ingest(con, [log], Config())
    assert [(f.status, f.rows) for f in report.files] == [("loaded", {"proxy": n})]
    con.close()


def test_the_key_scan_parses_a_line_once_and_finds_the_keys_one_scan_per_key_found(tmp_path):
    # readers.proxy_keys_sql asks for every candidate key in one `json_exists` of a list of
    # paths, each line parsed once; it replaced one `bool_or(json_exists(...))` per key
    # (readers.proxy_keys_columns, which the Spark ingest still runs), asked 25 keys at a
    # time. Held equal to that on every proxy log fixture and on a log whose keys the
    # user names, with lines that are not JSON, blank or not objects among them.
    import duckdb

    from replaygate.ingest import readers

    user = {"nginx": {"mcp_session_id": "sess", "origin": "req_origin"}}
    mine = tmp_path / "mine.log"
    lines = [json.dumps(_nginx(T0, 200, sid="a", req_origin="https://x", sess="b")), "", "{bad"]
    mine.write_text("\n".join([*lines, "[1, 2]", json.dumps({"request": {"headers": {}}})]) + "\n")
    fixtures = Path(__file__).parent / "fixtures" / "proxy"
    logs = [*sorted(fixtures.rglob("*.log")), mine]
    con = duckdb.connect()
    for fields in ({}, user):
        keys = adapters.candidate_keys(fields)
        for log in logs:
            params = {"path": str(log), "compression": "none"}
            readers.clear_rejects(con)
            before = con.execute(
                f"""SELECT {readers.proxy_keys_columns(keys)} FROM (
                    SELECT try(json(raw)) AS j FROM {readers._raw_lines()}
                    WHERE raw IS NOT NULL LIMIT {readers.KEY_SCAN_LINES}) WHERE j IS NOT NULL""",
                params,
            ).fetchone()
            readers.clear_rejects(con)
            found = con.execute(
                readers.proxy_keys_sql(),
                {**params, "paths": [k.path for k in keys], "n": len(keys)},
            ).fetchall()
            now = {keys[i - 1].path for i, yes in found if yes}
            assert now == {k.path for k, yes in zip(keys, before, strict=True) if yes}, log.name
            assert now or log is not mine
