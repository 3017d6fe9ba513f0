"""The input contract (v1) as one declarative definition.

Readers, the DuckDB schema, validation SQL and docs/contract.md are all derived
from RECORD_TYPES; nothing else spells out the fields again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Logical field types and how they are stored.
SQL_TYPES = {
    "ts": "TIMESTAMPTZ",
    "text": "VARCHAR",
    "int": "BIGINT",
    "float": "DOUBLE",
    "bool": "BOOLEAN",
    "enum": "VARCHAR",
}


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    required: bool = False
    enum: tuple[str, ...] = ()
    doc: str = ""
    # A field whose raw value must never be stored (it is replaced on ingest).
    secret: bool = False
    # A number's allowed range (inclusive), a text's longest length.
    bounds: tuple[float, float] | None = None
    max_len: int | None = None
    # Characters a text must not hold (reserved by a key built from it).
    forbid: str = ""

    @property
    def sql_type(self) -> str:
        return SQL_TYPES[self.type]


@dataclass(frozen=True)
class RecordType:
    schema: str  # value of the `schema` field, e.g. mcpHttpSession.v1
    table: str  # DuckDB table, also the file-name prefix
    title: str
    fields: tuple[Field, ...] = field(default_factory=tuple)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def stored_fields(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if not f.secret)


def _f(
    name: str,
    type_: str,
    required: bool = False,
    enum: tuple[str, ...] | list[str] = (),
    doc: str = "",
    secret: bool = False,
    bounds: tuple[float, float] | None = None,
    max_len: int | None = None,
    forbid: str = "",
) -> Field:
    return Field(name, type_, required, tuple(enum), doc, secret, bounds, max_len, forbid)


# Stage and release names are shown in every output: bounded where records are checked.
NAME_MAX = 200

SESSION_STATES = (
    "SESSION_ACTIVE",
    "DELETE_REQUESTED",
    "TERMINATED",
    "SESSION_EXPIRED",
    "REINITIALIZE_REQUIRED",
)
STREAM_STATES = (
    "STREAM_OPEN",
    "DISCONNECTED",
    "RESUME_PENDING",
    "CURSOR_REJECTED",
    "SESSION_EXPIRED",
    "CLOSED",
)
TOOL_CLASSES = ("read", "write", "paid")
EVENT_KINDS = ("priming", "progress", "message", "result", "error", "heartbeat")

_TS = _f("ts", "ts", True, doc="when the record happened")
_SESSION = _f("session_hmac", "text", True, doc="HMAC-SHA256 of the raw Mcp-Session-Id")
_GEN = _f("generation", "int", True, doc="session generation, +1 on each re-initialize")

SESSIONS = RecordType(
    "mcpHttpSession.v1",
    "sessions",
    "session ledger (one row per state change)",
    (
        _f("ts", "ts", True, doc="when the session entered `state`"),
        _SESSION,
        _GEN,
        _f("state", "enum", True, SESSION_STATES),
        _f("prev_session_hmac", "text", doc="session this one re-initialized from"),
        _f("principal", "text", doc="client identity, stable across generations"),
        _f("auth_subject", "text", doc="subject of the token that opened the session"),
        _f("handshake_receipt", "text", doc="digest of the InitializeResult"),
        _f("protocol_version", "text", doc="negotiated revision, e.g. 2025-06-18"),
        _f("origin_policy", "text", doc="name of the Origin policy applied"),
        _f("created_at", "ts", doc="session created"),
        _f("expires_at", "ts", doc="session expires"),
        _f("server_instance", "text", doc="server node that owns the session"),
        _f("client_name", "text", doc="clientInfo.name"),
        _f("client_version", "text", doc="clientInfo.version"),
        _f(
            "rollout_stage",
            "text",
            doc="rollout stage of this session's cohort (when the log names no release)",
        ),
        _f(
            "release",
            "text",
            doc="release (version) of the server that served this session; with a rollout "
            "log that names releases, its cohort is the release's stage in whose window "
            "a record falls",
        ),
        _f("resumable", "bool", doc="resumable SSE enabled for this session"),
    ),
)

STREAMS = RecordType(
    "mcpSseStream.v1",
    "streams",
    "stream ledger (one row per stream state change)",
    (
        _TS,
        _SESSION,
        _GEN,
        _f("stream_id", "text", True, doc="unique within the session"),
        _f("state", "enum", True, STREAM_STATES),
        _f("method", "enum", enum=("POST", "GET"), doc="POST response stream or GET stream"),
        _f("request_id", "text", doc="JSON-RPC id of the POST that opened it"),
        _f(
            "payload_digest",
            "text",
            doc='SHA-256 of the canonical JSON {"name", "arguments"} of the call, keys sorted,'
            " no whitespace, without the JSON-RPC id",
        ),
        _f("tool_name", "text", doc="tool called, if tools/call"),
        _f("tool_class", "enum", enum=TOOL_CLASSES, doc="read, write or paid"),
        _f("last_sent_event_id", "text", doc="newest event id sent on it"),
        _f("last_acked_event_id", "text", doc="newest event id the client acknowledged"),
        _f("resume_from_event_id", "text", doc="Last-Event-ID presented (RESUME_PENDING)"),
        _f("retry_ms", "int", doc="SSE retry the server recommended"),
        _f(
            "close_reason",
            "text",
            doc="completed, client_disconnect, network, backpressure, server_error, "
            "cursor_rejected, session_expired, cancelled; server_close (the server ended "
            "the stream on purpose before its result, so that the client reconnects: "
            "SEP-1699 polling); also client_lost (the server learned of the break only "
            "from the client's reconnect)",
        ),
        _f("lossless", "bool", doc="server declares gapless retention"),
    ),
)

EVENTS = RecordType(
    "mcpSseEvent.v1",
    "events",
    "server event log (one row per event the server produced)",
    (
        _TS,
        _SESSION,
        _GEN,
        _f(
            "stream_id",
            "text",
            True,
            doc="stream that produced it; on a `replayed` row, the stream it was replayed on",
        ),
        _f("event_id", "text", True, doc="SSE id, unique within the session"),
        _f("seq", "int", True, doc="1, 2, 3 ... per stream; the priming event is 0"),
        _f("kind", "enum", True, EVENT_KINDS),
        _f(
            "disposition",
            "enum",
            True,
            ("sent", "dropped", "coalesced", "replayed", "evicted"),
        ),
        _f("cumulative", "bool", doc="carries part of the result"),
        _f("message_digest", "text", doc="SHA-256 of the event data"),
        _f("jsonrpc_id", "text", doc="request answered (result/error)"),
        _f(
            "buffer_depth",
            "int",
            doc="outbound queue depth when produced; on an `evicted` row (the event left "
            "the server's replay store), the events the store held then",
        ),
    ),
)

INBOX = RecordType(
    "mcpInboxReceipt.v1",
    "inbox",
    "client inbox (one row per event the client received)",
    (
        _TS,
        _SESSION,
        _GEN,
        _f("stream_id", "text", True, doc="stream the event arrived on"),
        _f("event_id", "text", True, doc="as received"),
        _f("verdict", "enum", True, ("accepted", "duplicate", "rejected")),
        _f(
            "reject_reason",
            "text",
            doc="session, protocol_header, auth_subject, wrong_stream, cursor, "
            "correlation, digest, expired",
        ),
        _f("origin_stream_id", "text", doc="stream the event id designates"),
        _f("seq", "int", doc="server sequence, if known"),
        _f("kind", "enum", enum=EVENT_KINDS),
        _f("delivery", "enum", enum=("live", "replay")),
        _f("message_digest", "text", doc="dedup key part"),
        _f("jsonrpc_id", "text", doc="correlation"),
        _f("dispatch_id", "text", doc="business dispatch written with this receipt"),
    ),
)

DISPATCHES = RecordType(
    "mcpDispatch.v1",
    "dispatches",
    "business dispatches and idempotency receipts (one row per execution attempt)",
    (
        _TS,
        _f("dispatch_id", "text", True, doc="unique per attempt"),
        _f(
            "outcome",
            "enum",
            True,
            ("executed", "idempotency_hit", "idempotency_conflict", "rejected"),
        ),
        _f("tool_name", "text", True),
        _f("tool_class", "enum", enum=TOOL_CLASSES),
        _f("session_hmac", "text", doc="null for sessionless revisions"),
        _f("generation", "int"),
        _f("principal", "text"),
        _f("request_id", "text", doc="JSON-RPC id (a retry has a new one)"),
        _f("idempotency_key", "text", doc="as sent by the client"),
        _f(
            "payload_digest",
            "text",
            doc='SHA-256 of the canonical JSON {"name", "arguments"} of the call, keys sorted,'
            " no whitespace, without the JSON-RPC id",
        ),
        _f("receipt_id", "text", doc="receipt returned; a hit returns the original's"),
        _f("job_id", "text", doc="job registered by the call"),
        _f("http_status", "int"),
    ),
)

PROXY = RecordType(
    "mcpProxyLog.v1",
    "proxy",
    "reverse-proxy access log (one row per HTTP request)",
    (
        _f("ts", "ts", True, doc="request start"),
        _f("method", "text", True, doc="POST, GET, DELETE, ..."),
        _f("status", "int", True, doc="HTTP status returned"),
        _f("path", "text"),
        _f("duration_ms", "float"),
        _f("session_hmac", "text", doc="HMAC of the Mcp-Session-Id header"),
        _f(
            "session_id",
            "text",
            doc="RAW header value: replaced by its HMAC on ingest, never stored",
            secret=True,
        ),
        _f("origin", "text", doc="Origin header"),
        _f("protocol_version", "text", doc="MCP-Protocol-Version header; absent = missing"),
        _f("last_event_id", "text", doc="Last-Event-ID header"),
        _f("jsonrpc_method", "text", doc="e.g. initialize, tools/call"),
        _f("request_id", "text", doc="JSON-RPC id"),
        _f("principal", "text"),
        _f("auth_subject", "text"),
        _f("client_addr", "text"),
        _f("user_agent", "text"),
        _f("upstream", "text"),
        _f("retry_after_s", "int", doc="Retry-After sent with a 429/503"),
        _f(
            "body_bytes_sent",
            "int",
            doc="response body bytes sent to the client, headers not counted (nginx "
            "`$body_bytes_sent`, Caddy `size`, Envoy `%BYTES_SENT%`)",
            bounds=(0, 2**62),
        ),
        _f(
            "resp_content_type",
            "text",
            doc="the response's Content-Type (Caddy `resp_headers`, nginx "
            "`$sent_http_content_type`)",
        ),
        _f(
            "client_closed",
            "bool",
            doc="true: the client ended the request (nginx 499, Envoy flag DC, Caddy 499 "
            "or 0); false: the log shows it did not (nginx `$request_completion` OK, "
            "Envoy flags without DC); absent: the log cannot tell",
        ),
    ),
)

ROLLOUT = RecordType(
    "mcpRollout.v1",
    "rollout",
    "rollout log (one row per rollout action)",
    (
        _TS,
        _f(
            "stage",
            "text",
            True,
            doc="e.g. shadow-1pct, resume-read-25pct (at most 200 characters, no `@`: a "
            "stage of a release is keyed `stage@release`)",
            max_len=NAME_MAX,
            forbid="@",
        ),
        _f(
            "release",
            "text",
            doc="release (version) being rolled out; stages are scoped by it, so two "
            "releases' stages of the same name stay apart (at most 200 characters)",
            max_len=NAME_MAX,
        ),
        _f("action", "enum", True, ("start", "hold", "proceed", "rollback", "complete")),
        _f("percent", "float", doc="share of sessions in the stage, 0 to 100", bounds=(0, 100)),
        _f("scope", "enum", enum=("shadow", "read", "write")),
        _f("actor", "text"),
        _f("note", "text"),
    ),
)

RECORD_TYPES: tuple[RecordType, ...] = (
    SESSIONS,
    STREAMS,
    EVENTS,
    INBOX,
    DISPATCHES,
    PROXY,
    ROLLOUT,
)
BY_SCHEMA = {rt.schema: rt for rt in RECORD_TYPES}
BY_TABLE = {rt.table: rt for rt in RECORD_TYPES}

# Columns every loaded row carries besides its contract fields.
# pos: the line in a JSON Lines file, the data row (1-based) in CSV and Parquet.
PROVENANCE = (("file_id", "BIGINT"), ("pos", "BIGINT"))
# Extra stored columns derived on ingest, per table.
DERIVED = {"proxy": (("raw_session_id", "BOOLEAN"),)}  # a raw id was present (and hashed)


def all_field_names() -> list[str]:
    """Union of every record type's field names, in first-seen order."""
    seen: dict[str, None] = {}
    for rt in RECORD_TYPES:
        for f in rt.fields:
            seen.setdefault(f.name, None)
    return list(seen)


def type_for_filename(name: str) -> RecordType | None:
    """The record type a file's name implies (its prefix), if any."""
    base = name.rsplit("/", 1)[-1].lower()
    for rt in RECORD_TYPES:
        if base.startswith(rt.table):
            return rt
    return None
