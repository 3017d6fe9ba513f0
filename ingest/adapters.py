"""Reverse-proxy access logs as they are written (Caddy, nginx, Envoy), mapped onto
the proxy record type in SQL, one line at a time by its shape.

Every adapter turns the proxy's end-of-request timestamp into the request start
(`ts - duration`), reads the MCP headers, and hands the raw Mcp-Session-Id to the
same HMAC as the contract's `session_id` (so it is hashed in the reading pass and
never stored). A new session id seen only in a response header (the initialize
answer) counts as a raw id in the log, and is not kept at all.

nginx and Envoy have no fixed JSON format: docs/sources.md gives the formats these
adapters read, ready to paste.
"""

from __future__ import annotations

from dataclasses import dataclass


def _h(path: str) -> str:
    """A JSON path segment for a header name (quoted: header names contain '-')."""
    return f'"{path}"'


@dataclass(frozen=True)
class Adapter:
    name: str
    detect: str  # SQL over `j` (the line as JSON) that is true for this shape
    fields: dict[str, str]  # proxy field -> SQL text expression over `j`
    response_session: str | None = None  # raw session id in a response header


def _nz(expr: str, blank: tuple[str, ...] = ("",)) -> str:
    """NULL for the placeholders a proxy writes for a missing value."""
    values = ", ".join(f"'{b}'" for b in blank)
    return f"CASE WHEN ({expr}) IN ({values}) THEN NULL ELSE ({expr}) END"


def _start_ms(end_s: str, duration_s: str) -> str:
    return (
        f"CAST(round((TRY_CAST({end_s} AS DOUBLE) - coalesce(TRY_CAST({duration_s} "
        "AS DOUBLE), 0)) * 1000) AS BIGINT)::VARCHAR"
    )


_CADDY_H = "j->>'$.request.headers.{}[0]'"


def _caddy_header(name: str) -> str:
    return _CADDY_H.format(_h(name))


CADDY = Adapter(
    "caddy",
    detect="json_exists(j, '$.request.headers') AND json_exists(j, '$.status')",
    fields={
        "ts": _start_ms("j->>'$.ts'", "j->>'$.duration'"),
        "method": "j->>'$.request.method'",
        "status": "j->>'$.status'",
        "path": "j->>'$.request.uri'",
        "duration_ms": "(TRY_CAST(j->>'$.duration' AS DOUBLE) * 1000)::VARCHAR",
        "session_id": _caddy_header("Mcp-Session-Id"),
        "origin": _caddy_header("Origin"),
        "protocol_version": _caddy_header("Mcp-Protocol-Version"),
        "last_event_id": _caddy_header("Last-Event-Id"),
        "jsonrpc_method": _caddy_header("Mcp-Method"),
        "principal": _nz("j->>'$.user_id'"),
        "client_addr": "coalesce(j->>'$.request.client_ip', j->>'$.request.remote_ip')",
        "user_agent": _caddy_header("User-Agent"),
        "retry_after_s": f"j->>'$.resp_headers.{_h('Retry-After')}[0]'",
    },
    response_session=f"j->>'$.resp_headers.{_h('Mcp-Session-Id')}[0]'",
)

# nginx writes "" for an unset variable and "-" for some; both mean absent.
_NG = ("", "-")
NGINX = Adapter(
    "nginx",
    detect="json_exists(j, '$.msec') AND json_exists(j, '$.request_time')",
    fields={
        "ts": _start_ms("j->>'$.msec'", "j->>'$.request_time'"),
        "method": "j->>'$.method'",
        "status": "j->>'$.status'",
        "path": _nz("j->>'$.uri'", _NG),
        "duration_ms": "(TRY_CAST(j->>'$.request_time' AS DOUBLE) * 1000)::VARCHAR",
        "session_id": _nz("j->>'$.mcp_session_id'", _NG),
        "origin": _nz("j->>'$.origin'", _NG),
        "protocol_version": _nz("j->>'$.mcp_protocol_version'", _NG),
        "last_event_id": _nz("j->>'$.last_event_id'", _NG),
        "jsonrpc_method": _nz("j->>'$.mcp_method'", _NG),
        "principal": _nz("j->>'$.remote_user'", _NG),
        "client_addr": _nz("j->>'$.remote_addr'", _NG),
        "user_agent": _nz("j->>'$.user_agent'", _NG),
        "upstream": _nz("j->>'$.upstream'", _NG),
        "retry_after_s": _nz("j->>'$.retry_after'", _NG),
    },
    response_session=_nz("j->>'$.new_session_id'", _NG),
)

# Envoy writes "-" for a missing header; START_TIME is already the request start.
_EN = ("", "-")
ENVOY = Adapter(
    "envoy",
    detect="json_exists(j, '$.start_time') AND json_exists(j, '$.response_code')",
    fields={
        "ts": "CAST(round(TRY_CAST(j->>'$.start_time' AS DOUBLE) * 1000) AS BIGINT)::VARCHAR",
        "method": "j->>'$.method'",
        "status": "j->>'$.response_code'",
        "path": _nz("j->>'$.path'", _EN),
        "duration_ms": _nz("j->>'$.duration'", _EN),
        "session_id": _nz("j->>'$.mcp_session_id'", _EN),
        "origin": _nz("j->>'$.origin'", _EN),
        "protocol_version": _nz("j->>'$.mcp_protocol_version'", _EN),
        "last_event_id": _nz("j->>'$.last_event_id'", _EN),
        "jsonrpc_method": _nz("j->>'$.mcp_method'", _EN),
        "client_addr": _nz("j->>'$.downstream_remote_address'", _EN),
        "user_agent": _nz("j->>'$.user_agent'", _EN),
        "upstream": _nz("j->>'$.upstream_host'", _EN),
        "retry_after_s": _nz("j->>'$.retry_after'", _EN),
    },
    response_session=_nz("j->>'$.new_session_id'", _EN),
)


def _infer_initialize(adapter: Adapter) -> Adapter:
    """A proxy does not see the JSON-RPC method in the body. A request without a
    session whose answer carries a new Mcp-Session-Id is an initialize; otherwise the
    Mcp-Method header (2026-07-28 clients) names the method."""
    fields = dict(adapter.fields)
    fields["jsonrpc_method"] = (
        f"coalesce({adapter.fields['jsonrpc_method']}, CASE WHEN "
        f"({adapter.fields['session_id']}) IS NULL AND ({adapter.response_session}) IS NOT NULL "
        "THEN 'initialize' END)"
    )
    return Adapter(adapter.name, adapter.detect, fields, adapter.response_session)


CADDY, NGINX, ENVOY = (_infer_initialize(a) for a in (CADDY, NGINX, ENVOY))
ADAPTERS = {a.name: a for a in (CADDY, NGINX, ENVOY)}
SOURCES = ("auto", "contract", *ADAPTERS)


def sniff(first_line: str) -> str:
    """Which shape a file's first record has: contract, or an adapter's name."""
    import json

    try:
        rec = json.loads(first_line)
    except ValueError:
        return "contract"
    if not isinstance(rec, dict):
        return "contract"
    if isinstance(rec.get("request"), dict) and "headers" in rec["request"]:
        return "caddy"
    if "msec" in rec and "request_time" in rec:
        return "nginx"
    if "start_time" in rec and "response_code" in rec:
        return "envoy"
    return "contract"
