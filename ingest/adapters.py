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
from typing import TYPE_CHECKING, Any

from replaygate.core.errors import ReplaygateError

if TYPE_CHECKING:
    from collections.abc import Callable

    import duckdb

    from replaygate.core.config import Config


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


# `replaygate probe` marks every request with this header and a User-Agent that starts with
# PROBE_AGENT (probe/wire.py); a request so marked whose log names no principal is read as
# the probe's, principal PROBE_PRINCIPAL, which `is_probe` (queries/sql/prep/00_macros.sql)
# knows. A principal the proxy logged (it authenticated the client) is never replaced: the
# marker is only a claim, so a client cannot pass for the probe where the proxy knows it.
PROBE_PRINCIPAL = "replaygate-probe"
PROBE_AGENT = PROBE_PRINCIPAL + "/"
PROBE_HEADER = "Replaygate-Probe"

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


_CADDY_FIELDS = {
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
    "probe_marker": _caddy_header(PROBE_HEADER),
    "retry_after_s": f"j->>'$.resp_headers.{_h('Retry-After')}[0]'",
    # `size`: the response body bytes Caddy wrote (its ResponseRecorder's Size(), headers
    # not counted: caddyserver/caddy modules/caddyhttp/server.go logs `zap.Int("size",
    # wrec.Size())`). A 200 event stream of 0 bytes is an answer that never reached the
    # client.
    "body_bytes_sent": "j->>'$.size'",
    "resp_content_type": f"j->>'$.resp_headers.{_h('Content-Type')}[0]'",
    # A client that hung up before the answer's headers is logged 499 (0 before Caddy 2.8:
    # caddyserver/caddy reverseproxy/client_disconnect_test.go, "the recorded status is 499
    # rather than 0"). After the headers went out its line keeps their status (200) and
    # the body bytes written, the same line as an answer lost on the way: Caddy's access
    # log cannot tell those apart (NULL).
    "client_closed": "CASE WHEN TRY_CAST(j->>'$.status' AS INT) IN (0, 499) THEN 'true' END",
    # Only a real id: `REDACTED` is written by the filter that also deletes the request's
    # Mcp-Session-Id, so whether the request carried one cannot be told (_infer_initialize).
    "new_session": f"({_nz(_CADDY_RESP, ('', REDACTED))}) IS NOT NULL",
}

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
    # The fact a key that fills no field by itself shows (read with other keys: `closed`).
    fact: str | None = None

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
    # The answer's Content-Type (`$sent_http_content_type`; never nginx's `$content_type`,
    # which is the request's).
    Spec("resp_content_type", "resp_content_type", "Content-Type", response=True),
    Spec("auth_subject", "auth_subject", aliases=("jwt_sub", "token_subject")),
    # The new session's id in the initialize answer: a raw id in the log.
    Spec("new_session_id", "", "Mcp-Session-Id", response=True),
    # A flag logged instead of that id ("1" when a new session was issued): no raw id.
    Spec("new_session", "", aliases=("mcp_new_session", "session_issued")),
    # `replaygate probe`'s marker, where a format logs it (the User-Agent marks it too).
    Spec("replaygate_probe", "", PROBE_HEADER),
)
NGINX_SPECS = (
    Spec("method", "method", aliases=("request_method",)),
    Spec("status", "status"),
    Spec("uri", "path", aliases=("request_uri",)),
    Spec("remote_user", "principal", aliases=("principal", "user")),
    Spec("remote_addr", "client_addr", aliases=("client_addr", "client_ip")),
    Spec("upstream", "upstream", aliases=("upstream_addr",)),
    # `$body_bytes_sent`: "number of bytes sent to a client, not counting the response
    # header" (nginx's ngx_http_core_module variables). Not `$bytes_sent`, which counts
    # the header and so is never 0.
    Spec("body_bytes_sent", "body_bytes_sent"),
    # `$request_completion`: "OK" if a request has completed, else empty (nginx's
    # ngx_http_core_module variables). A client that hung up is logged 499 before the
    # answer's headers went out; after them, with their status: only "OK" shows it did not.
    Spec("request_completion", "", fact="proxy.client_closed"),
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
    # `%BYTES_SENT%`: the body bytes sent (Envoy's access-log command operators).
    Spec("bytes_sent", "body_bytes_sent", aliases=("body_bytes_sent",)),
    # `%RESPONSE_FLAGS%`: `DC` is "downstream connection termination" (Envoy's access-log
    # command operators); "-" when no flag was set.
    Spec("response_flags", "", fact="proxy.client_closed"),
    *_COMMON,
)


def _nginx_closed(values: dict[str, str | None], shown: dict[str, str | None]) -> str | None:
    """nginx: 499 (NGX_HTTP_CLIENT_CLOSED_REQUEST) the client hung up; a request
    `$request_completion` calls complete was not ended by it; else it cannot be told."""
    whens = []
    if values["status"]:
        whens.append(f"WHEN TRY_CAST({values['status']} AS INT) = 499 THEN 'true'")
    if values["request_completion"]:
        whens.append(f"WHEN ({values['request_completion']}) = 'OK' THEN 'false'")
    return f"CASE {' '.join(whens)} END" if whens else None


def _envoy_closed(values: dict[str, str | None], shown: dict[str, str | None]) -> str | None:
    """Envoy: flag `DC` (or response code 0, "the server never sent the beginning of a
    response ... the (downstream) client disconnected") the client hung up; flags logged
    without it, it did not; no flags logged, it cannot be told."""
    whens = []
    if values["response_code"]:
        whens.append(f"WHEN TRY_CAST({values['response_code']} AS INT) = 0 THEN 'true'")
    flags, logged = values["response_flags"], shown["response_flags"]
    if logged:
        whens.append(
            f"WHEN list_has_any(string_split(coalesce({flags}, ''), ','), "
            "['DC', 'DownstreamConnectionTermination']) THEN 'true'"
        )
        whens.append(f"WHEN {logged} THEN 'false'")
    return f"CASE {' '.join(whens)} END" if whens else None


def _pick(keys: tuple[Key, ...], present: set[str] | None) -> str | None:
    """SQL for the first of `keys` a line has (only those present in the file, when known)."""
    use = [k for k in keys if present is None or k.path in present]
    if not use:
        return None
    parts = [_nz(k.expr(), _BLANK) for k in use]
    return parts[0] if len(parts) == 1 else f"coalesce({', '.join(parts)})"


def _logged(keys: tuple[Key, ...], present: set[str] | None) -> str | None:
    """SQL over `j`: the line carries one of `keys` (a placeholder value too)."""
    use = [k for k in keys if present is None or k.path in present]
    return " OR ".join(f"({k.exists()})" for k in use) or None


def _infer_initialize(adapter: Adapter) -> Adapter:
    """A proxy does not see the JSON-RPC method in the body. A request without a
    session whose answer carries a new Mcp-Session-Id (or the flag logged in its
    place) is an initialize; otherwise the Mcp-Method header (2026-07-28 clients) names
    the method. The answer's header alone is not (the TypeScript SDK sets it on every SSE
    answer): where the log cannot show the request's session id (no key for it, or
    Caddy's redacting filter), no initialize is read from the answer."""
    fields = dict(adapter.fields)
    response = adapter.response_session
    issued = fields.pop("new_session", None) or (
        f"({response}) IS NOT NULL" if response else "false"
    )
    shown = [fields[f] for f in ("session_id", "session_hmac") if fields.get(f, "NULL") != "NULL"]
    if not shown:
        issued = "false"
    without = " AND ".join(f"({x}) IS NULL" for x in shown) or "true"
    fields["jsonrpc_method"] = (
        f"coalesce({fields['jsonrpc_method']}, CASE WHEN {without} AND ({issued}) "
        "THEN 'initialize' END)"
    )
    return Adapter(adapter.name, adapter.detect, fields, adapter.response_session)


def _probe_principal(adapter: Adapter) -> Adapter:
    """A request `replaygate probe` marked (its header, or its User-Agent) is the probe's
    where the log names no principal: its proxy rows are then known as synthetic, like
    its session rows (principal PROBE_PRINCIPAL)."""
    fields = dict(adapter.fields)
    marker = fields.pop("probe_marker", "NULL")
    agent = fields.get("user_agent", "NULL")
    marked = f"(({marker}) IS NOT NULL OR starts_with({agent}, '{PROBE_AGENT}'))"
    fields["principal"] = (
        f"coalesce({fields.get('principal', 'NULL')}, "
        f"CASE WHEN coalesce({marked}, false) THEN '{PROBE_PRINCIPAL}' END)"
    )
    return Adapter(adapter.name, adapter.detect, fields, adapter.response_session)


@dataclass(frozen=True)
class Proxy:
    """A reverse proxy's JSON access log, declared once: `--source` choices, the shape
    detection (in SQL, for every line and for sniffing a file), the reading, the facts a
    log shows, `[sources.<name>.fields]` and the docs all take it from here."""

    name: str  # the `--source` value and the shape's name
    title: str
    detect: str  # SQL over `j` (the line as JSON): true for this proxy's lines
    fixed: dict[str, str]  # proxy field -> SQL text expression over `j`, whatever the keys
    # Values logged under keys each user names (nginx, Envoy): read by the keys present.
    specs: tuple[Spec, ...] = ()
    response_session: str | None = None  # raw session id in a response header (fixed)
    shows: tuple[str, ...] = ()  # facts every log of this proxy shows, by its format
    doc: str = ""
    # `client_closed` from the values of its specs (and whether each key is logged): the
    # conventions by which the proxy logs a client that hung up.
    closed: Callable[[dict[str, str | None], dict[str, str | None]], str | None] | None = None

    def adapter(
        self, present: set[str] | None = None, user: dict[str, Any] | None = None
    ) -> Adapter:
        """The adapter for one file: only the keys `present` in it (all known spellings
        when None), with the user's own keys first."""
        fields = dict(self.fixed)
        if not self.specs:
            fields.setdefault("jsonrpc_method", "NULL")
            fields.setdefault("session_id", "NULL")
            return Adapter(self.name, self.detect, fields, self.response_session)
        user = user or {}
        values: dict[str, str | None] = {}
        shown: dict[str, str | None] = {}
        for spec in self.specs:
            keys = spec.keys(user.get(spec.key))
            expr = _pick(keys, present)
            values[spec.key] = expr
            shown[spec.key] = _logged(keys, present)
            if spec.field and expr is not None:
                fields[spec.field] = expr
        closed = self.closed(values, shown) if self.closed else None
        if closed is not None:
            fields["client_closed"] = closed
        issued = values["new_session"]
        flag = f"(({issued}) IS NOT NULL AND lower({issued}) <> 'false')" if issued else None
        raw = values["new_session_id"]
        fields["new_session"] = (
            " OR ".join(x for x in (flag, f"({raw}) IS NOT NULL" if raw else None) if x) or "false"
        )
        fields.setdefault("jsonrpc_method", "NULL")
        fields.setdefault("session_id", "NULL")
        fields["probe_marker"] = values["replaygate_probe"] or "NULL"
        return Adapter(self.name, self.detect, fields, raw)


PROXIES: dict[str, Proxy] = {}


def register(proxy: Proxy) -> Proxy:
    """Add a proxy adapter; a name already taken is refused (the second would silently
    change how the first's logs are read, and its `--source` value)."""
    if proxy.name in PROXIES:
        raise ValueError(f"proxy adapter {proxy.name!r} is registered already")
    PROXIES[proxy.name] = proxy
    return proxy


def build(
    present: set[str] | None = None, user_fields: dict[str, Any] | None = None
) -> dict[str, Adapter]:
    """The adapters for one file, by name: nginx and Envoy read only the keys `present`
    in it (all known spellings when None), with the user's own keys first."""
    user_fields = user_fields or {}
    return {
        p.name: _probe_principal(_infer_initialize(p.adapter(present, user_fields.get(p.name))))
        for p in PROXIES.values()
    }


def sources() -> tuple[str, ...]:
    """The `--source` choices: by shape, contract records only, or one proxy."""
    return ("auto", "contract", *PROXIES)


def titles() -> str:
    return ", ".join(p.title for p in PROXIES.values())


def field_keys() -> dict[str, tuple[str, ...]]:
    """{proxy: the adapter keys `[sources.<proxy>.fields]` may map a user's key onto}."""
    return {p.name: tuple(s.key for s in p.specs) for p in PROXIES.values() if p.specs}


def check_sources(config: Config) -> None:
    """A configuration's `[sources.<proxy>.fields]` names adapters and keys they have
    (the configuration checks the form of the maps, and sits below the adapters): one
    line naming the key otherwise."""
    keys = field_keys()
    for proxy, table in config.sources.items():
        if proxy not in keys:
            raise ReplaygateError(
                f"config: unknown source {proxy!r} in [sources] ({', '.join(keys)})"
            )
        for ours in table.get("fields", {}):
            if ours not in keys[proxy]:
                raise ReplaygateError(
                    f"config: unknown {proxy} field {ours!r} in [sources.{proxy}.fields] "
                    f"({', '.join(keys[proxy])})"
                )


def candidate_keys(user_fields: dict[str, dict[str, str]] | None = None) -> tuple[Key, ...]:
    """Every key the adapters could read (for the per-file key scan)."""
    user_fields = user_fields or {}
    out: dict[str, Key] = {}
    for p in PROXIES.values():
        for spec in p.specs:
            for k in spec.keys(user_fields.get(p.name, {}).get(spec.key)):
                out.setdefault(k.path, k)
    return tuple(out.values())


def shape_case(adapters: list[Adapter], contract: bool) -> str:
    """SQL over `j`: the name of the first adapter whose shape a line has, 'contract' for
    a contract record (when `contract`), else NULL."""
    whens = " ".join(f"WHEN {a.detect} THEN '{a.name}'" for a in adapters)
    tail = " WHEN json_exists(j, '$.ts') AND json_exists(j, '$.method') THEN 'contract'"
    return f"CASE WHEN j IS NULL THEN NULL {whens}{tail if contract else ''} END"


def sniff(con: duckdb.DuckDBPyConnection, lines: list[str]) -> str:
    """The shape of a file from its first lines: the first line that is a JSON object
    decides (a cut first line or a byte-order mark must not pick the wrong reader), by
    the same SQL that reads each line; "contract" unless it is a proxy's."""
    shape = shape_case(list(build().values()), contract=False)
    sql = f"""SELECT {shape}, json_type(j) = 'OBJECT'
              FROM (SELECT try(json(ltrim($line, chr(65279)))) AS j)"""
    for line in lines:
        row = con.execute(sql, {"line": line}).fetchone()
        if row and row[1]:
            return row[0] or "contract"
    return "contract"


# -- the proxies: each declared once -------------------------------------------------------
register(
    Proxy(
        "caddy",
        "Caddy",
        detect="json_exists(j, '$.request.headers') AND json_exists(j, '$.status')",
        fixed=_CADDY_FIELDS,
        response_session=_nz(_CADDY_RESP, ("", REDACTED)),
        # Caddy logs every request header; the session id and the initialize are read
        # from the rows (its log filter may delete or replace them).
        shows=(
            "proxy.origin",
            "proxy.protocol_version",
            "proxy.last_event_id",
            "proxy.jsonrpc_method",
            "proxy.user_agent",
            "proxy.client_addr",
            "proxy.path",
            "proxy.duration_ms",
        ),
        doc="its default JSON access log (`log { format json }`)",
    )
)
register(
    Proxy(
        "nginx",
        "nginx",
        detect="json_exists(j, '$.msec') AND json_exists(j, '$.request_time')",
        fixed={
            "ts": _start_ms("j->>'$.msec'", "j->>'$.request_time'"),
            "duration_ms": "(TRY_CAST(j->>'$.request_time' AS DOUBLE) * 1000)::VARCHAR",
        },
        specs=NGINX_SPECS,
        closed=_nginx_closed,
        doc="a JSON `log_format` with `msec` and `request_time`",
    )
)
register(
    Proxy(
        "envoy",
        "Envoy",
        detect="json_exists(j, '$.start_time') AND json_exists(j, '$.response_code')",
        # START_TIME is already the request start.
        fixed={
            "ts": "CAST(round(TRY_CAST(j->>'$.start_time' AS DOUBLE) * 1000) AS BIGINT)::VARCHAR"
        },
        specs=ENVOY_SPECS,
        closed=_envoy_closed,
        doc="a JSON access log with `start_time` and `response_code`",
    )
)
