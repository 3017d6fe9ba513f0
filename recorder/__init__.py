"""Ledger recorder for MCP servers built on the official Python SDK (optional extra).

    from replaygate.recorder import instrument
    app, store = instrument(mcp_server, "/var/log/mcp", hmac_key=KEY,
                            event_store=your_store,  # optional: Redis, a database, ...
                            retry_interval=1000, transport_security=...)

writes the session ledger, the stream ledger, the server event log and a dispatch
record per tools/call in the input contract's format (rotated JSON Lines), with the
HMAC of the session id, never the raw id. The operator's event store is wrapped, not
replaced: what it stores and what it really replays on a resume is recorded, so a
lossy or crossed store shows in the event log. Without one, a bounded in-memory store
is used. Imports nothing from replaygate's dashboard; only the `mcp` SDK.
"""

from __future__ import annotations

import os

from .ledger import LedgerWriter, payload_digest
from .middleware import LedgerMiddleware
from .store import MemoryEventStore, RecordingEventStore

__all__ = [
    "LedgerMiddleware",
    "LedgerWriter",
    "MemoryEventStore",
    "RecordingEventStore",
    "instrument",
    "payload_digest",
    "tool_class_of",
]


def _hint(annotations, camel: str, snake: str):
    value = getattr(annotations, snake, None)
    return getattr(annotations, camel, None) if value is None else value


def tool_class_of(annotations) -> str:
    """A tool's class from its MCP annotations: `read` when it declares itself read-only
    (or idempotent and not destructive: re-sending it is harmless), else `write` (MCP's
    defaults: not read-only, destructive, not idempotent)."""
    if annotations is None:
        return "write"
    if _hint(annotations, "readOnlyHint", "read_only_hint"):
        return "read"
    idempotent = _hint(annotations, "idempotentHint", "idempotent_hint")
    if idempotent and _hint(annotations, "destructiveHint", "destructive_hint") is False:
        return "read"
    return "write"


def _classifier(server, tool_classes: dict[str, str] | None):
    """The server's own classes first, else the tool's annotations."""
    classes = dict(tool_classes or {})
    manager = getattr(server, "_tool_manager", None)

    def classify(name: str) -> str | None:
        if name in classes:
            return classes[name]
        tool = manager.get_tool(name) if manager is not None else None
        if tool is None:
            return None
        return tool_class_of(getattr(tool, "annotations", None))

    return classify


def instrument(
    server,
    out_dir,
    *,
    hmac_key: bytes,
    server_instance: str = "mcp-0",
    release: str | None = None,
    rollout_stage: str | None = None,
    event_store=None,
    tool_classes: dict[str, str] | None = None,
    **app_kwargs,
):
    """The server's Streamable HTTP app with the operator's event store (or a bounded
    in-memory one) wrapped by the recorder, and the ledger middleware around it;
    returns (asgi_app, recording_store). `tool_classes` maps tool names to `read`,
    `write` or `paid` where the annotations do not say enough. `release` (default
    $REPLAYGATE_RELEASE) is stamped on every session: the rollout log's stages of that
    release are its cohort. `rollout_stage` is for rollout logs without releases only."""
    writer = LedgerWriter(out_dir, hmac_key)
    store = RecordingEventStore(writer, event_store)
    app = server.streamable_http_app(event_store=store, **app_kwargs)
    return LedgerMiddleware(
        app,
        writer,
        store,
        server_instance=server_instance,
        retry_ms=app_kwargs.get("retry_interval"),
        release=release if release is not None else os.environ.get("REPLAYGATE_RELEASE"),
        rollout_stage=rollout_stage,
        tool_class=_classifier(server, tool_classes),
    ), store
