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
from typing import Any


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


# What docs/sources.md has Caddy's log filter write in place of the answer's session id:
# a new session was issued, and no id is in the log. (A `replace` filter turns the
# header's array into a string: either is read.)
REDACTED = "REDACTED"
_CADDY_RESP = (
    "coalesce(j->>'$.resp_headers.\"Mcp-Session-Id\"[0]', "
    "CASE WHEN json_type(j, '$.resp_headers.\"Mcp-Session-Id\"') = 'VARCHAR' "
    "THEN j->>'$.resp_headers.\"Mcp-Session-Id\"' END)"
)


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
        "new_session": f"({_CADDY_RESP}) IS NOT NULL",
    },
    response_session=_nz(_CADDY_RESP, ("", REDACTED)),
)

# nginx writes "" for an unset variable and "-" for some; Envoy "-" for a missing header.
_BLANK = ("", "-")


@dataclass(frozen=True)
class Key:
    """One way a proxy can log a value: a top-level key, or a header inside a Go-style
    header map (`{"resp_headers": {"Mcp-Session-Id": ["..."]}}`, value an array or not)."""

    path: str  # JSON path

    def expr(self) -> str:
        if self.path.count('"') > 2:  # a header map: the value may be a one-element array
            return f"coalesce(j->>'{self.path}[0]', j->>'{self.path}')"
        return f"j->>'{self.path}'"

    def exists(self) -> str:
        return f"json_exists(j, '{self.path}')"


def _flat(key: str) -> Key:
    return Key(f'$."{key}"')


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)


_REQ_PREFIXES = ("", "http_", "req_", "request_")
_RESP_PREFIXES = ("sent_http_", "upstream_http_", "resp_", "response_", "upstream_")
_REQ_MAPS = ("request_headers", "req_headers", "headers")
_RESP_MAPS = ("resp_headers", "response_headers", "sent_headers")


def header_spellings(header: str, response: bool) -> tuple[str, ...]:
    """The keys nginx/Envoy users commonly give a header in a JSON log_format:
    `$http_x` / `$sent_http_x` / `$upstream_http_x` names, `req_`/`resp_` prefixes,
    and their camelCase forms."""
    snake = header.lower().replace("-", "_")
    flat = [p + snake for p in (_RESP_PREFIXES if response else _REQ_PREFIXES)]
    return tuple(dict.fromkeys(flat + [_camel(k) for k in flat]))


def _header_keys(header: str, response: bool) -> tuple[Key, ...]:
    maps = _RESP_MAPS if response else _REQ_MAPS
    spelled = [_flat(k) for k in header_spellings(header, response)]
    mapped = [Key(f'$."{m}"."{h}"') for m in maps for h in (header, header.lower())]
    return tuple(spelled + mapped)


@dataclass(frozen=True)
class Spec:
    """A value an nginx or Envoy JSON log can carry, under the adapter's own key (the
    formats of docs/sources.md); `[sources.<proxy>.fields]` maps a user's key onto it."""

    key: str  # the adapter's key
    field: str  # the proxy record field it fills; "" for the new-session facts
    header: str | None = None  # HTTP header it comes from
    response: bool = False
    aliases: tuple[str, ...] = ()

    def keys(self, user_key: str | None = None) -> tuple[Key, ...]:
        names = [self.key, *self.aliases, *[_camel(a) for a in (self.key, *self.aliases)]]
        keys = [_flat(n) for n in dict.fromkeys(names)]
        if self.header:
            keys += [k for k in _header_keys(self.header, self.response) if k not in keys]
        if user_key:
            keys = [_flat(user_key), *[k for k in keys if k != _flat(user_key)]]
        return tuple(keys)


# Keys both nginx and Envoy formats use (the request-line keys differ, below).
_COMMON = (
    Spec("mcp_session_id", "session_id", "Mcp-Session-Id"),
    Spec("mcp_session_hmac", "session_hmac", aliases=("session_hmac",)),
    Spec("origin", "origin", "Origin"),
    Spec("mcp_protocol_version", "protocol_version", "Mcp-Protocol-Version"),
    Spec("last_event_id", "last_event_id", "Last-Event-Id"),
    Spec("mcp_method", "jsonrpc_method", "Mcp-Method"),
    Spec("user_agent", "user_agent", "User-Agent"),
    Spec("retry_after", "retry_after_s", "Retry-After", response=True),
    Spec("auth_subject", "auth_subject", aliases=("jwt_sub", "token_subject")),
    # The new session's id in the initialize answer: a raw id in the log.
    Spec("new_session_id", "", "Mcp-Session-Id", response=True),
    # A flag logged instead of that id ("1" when a new session was issued): no raw id.
    Spec("new_session", "", aliases=("mcp_new_session", "session_issued")),
)
NGINX_SPECS = (
    Spec("method", "method", aliases=("request_method",)),
    Spec("status", "status"),
    Spec("uri", "path", aliases=("request_uri",)),
    Spec("remote_user", "principal", aliases=("principal", "user")),
    Spec("remote_addr", "client_addr", aliases=("client_addr", "client_ip")),
    Spec("upstream", "upstream", aliases=("upstream_addr",)),
    *_COMMON,
)
ENVOY_SPECS = (
    Spec("method", "method", aliases=("request_method",)),
    Spec("response_code", "status"),
    Spec("path", "path"),
    Spec("duration", "duration_ms"),
    Spec("principal", "principal", aliases=("remote_user", "user")),
    Spec("downstream_remote_address", "client_addr", aliases=("client_addr", "remote_addr")),
    Spec("upstream_host", "upstream", aliases=("upstream",)),
    *_COMMON,
)
SPECS = {"nginx": NGINX_SPECS, "envoy": ENVOY_SPECS}
FIELD_KEYS = {name: tuple(s.key for s in specs) for name, specs in SPECS.items()}


def _pick(keys: tuple[Key, ...], present: set[str] | None) -> str | None:
    """SQL for the first of `keys` a line has (only those present in the file, when known)."""
    use = [k for k in keys if present is None or k.path in present]
    if not use:
        return None
    parts = [_nz(k.expr(), _BLANK) for k in use]
    return parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"


def _keyed(
    name: str, detect: str, fixed: dict[str, str], present: set[str] | None, user: dict[str, Any]
) -> Adapter:
    fields = dict(fixed)
    values = {}
    for spec in SPECS[name]:
        expr = _pick(spec.keys(user.get(spec.key)), present)
        values[spec.key] = expr
        if spec.field and expr is not None:
            fields[spec.field] = expr
    issued = values["new_session"]
    flag = f"(({issued}) IS NOT NULL AND lower({issued}) <> 'false')" if issued else None
    raw = values["new_session_id"]
    fields["new_session"] = (
        " OR ".join(x for x in (flag, f"({raw}) IS NOT NULL" if raw else None) if x) or "false"
    )
    fields.setdefault("jsonrpc_method", "NULL")
    fields.setdefault("session_id", "NULL")
    return Adapter(name, detect, fields, raw)


def nginx(present: set[str] | None = None, user: dict[str, Any] | None = None) -> Adapter:
    return _keyed(
        "nginx",
        "json_exists(j, '$.msec') AND json_exists(j, '$.request_time')",
        {
            "ts": _start_ms("j->>'$.msec'", "j->>'$.request_time'"),
            "duration_ms": "(TRY_CAST(j->>'$.request_time' AS DOUBLE) * 1000)::VARCHAR",
        },
        present,
        user or {},
    )


def envoy(present: set[str] | None = None, user: dict[str, Any] | None = None) -> Adapter:
    # START_TIME is already the request start.
    return _keyed(
        "envoy",
        "json_exists(j, '$.start_time') AND json_exists(j, '$.response_code')",
        {"ts": "CAST(round(TRY_CAST(j->>'$.start_time' AS DOUBLE) * 1000) AS BIGINT)::VARCHAR"},
        present,
        user or {},
    )


def candidate_keys(user_fields: dict[str, Any] | None = None) -> tuple[Key, ...]:
    """Every key the nginx and Envoy adapters could read (for the per-file key scan)."""
    user_fields = user_fields or {}
    out: dict[str, Key] = {}
    for name, specs in SPECS.items():
        for spec in specs:
            for k in spec.keys(user_fields.get(name, {}).get(spec.key)):
                out.setdefault(k.path, k)
    return tuple(out.values())


def _infer_initialize(adapter: Adapter) -> Adapter:
    """A proxy does not see the JSON-RPC method in the body. A request without a
    session whose answer carries a new Mcp-Session-Id (or the flag logged in its
    place) is an initialize; otherwise the Mcp-Method header (2026-07-28 clients) names
    the method."""
    fields = dict(adapter.fields)
    issued = fields.pop("new_session", None) or f"({adapter.response_session}) IS NOT NULL"
    without = f"({fields['session_id']}) IS NULL"
    if "session_hmac" in fields:
        without += f" AND ({fields['session_hmac']}) IS NULL"
    fields["jsonrpc_method"] = (
        f"coalesce({fields['jsonrpc_method']}, CASE WHEN {without} AND ({issued}) "
        "THEN 'initialize' END)"
    )
    return Adapter(adapter.name, adapter.detect, fields, adapter.response_session)


def build(
    present: set[str] | None = None, user_fields: dict[str, Any] | None = None
) -> dict[str, Adapter]:
    """The adapters for one file: nginx and Envoy read only the keys `present` in it
    (all known spellings when None), with the user's own keys first."""
    user_fields = user_fields or {}
    made = (
        CADDY,
        nginx(present, user_fields.get("nginx")),
        envoy(present, user_fields.get("envoy")),
    )
    return {a.name: _infer_initialize(a) for a in made}


ADAPTERS = build()
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


def sniff_lines(lines: list[str]) -> str:
    """The shape of a file from its first lines: the first line that is a JSON object
    decides (a cut first line or a byte-order mark must not pick the wrong reader)."""
    import json

    for line in lines:
        try:
            rec = json.loads(line.lstrip("\ufeff"))
        except ValueError:
            continue
        if isinstance(rec, dict):
            return sniff(json.dumps(rec))
    return "contract"
