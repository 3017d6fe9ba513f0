"""Ledger recorder for MCP servers built on the official Python SDK (optional extra).

    from replaygate.recorder import instrument
    app, store = instrument(mcp_server, "/var/log/mcp", hmac_key=KEY,
                            retry_interval=1000, transport_security=...)

writes the session ledger, the stream ledger and the server event log in the input
contract's format (rotated JSON Lines), with the HMAC of the session id, never the
raw id. Imports nothing from replaygate's dashboard; only the `mcp` SDK.
"""

from __future__ import annotations

from .ledger import LedgerWriter
from .middleware import LedgerMiddleware
from .store import RecordingEventStore

__all__ = ["LedgerMiddleware", "LedgerWriter", "RecordingEventStore", "instrument"]


def instrument(
    server,
    out_dir,
    *,
    hmac_key: bytes,
    server_instance: str = "mcp-0",
    rollout_stage: str | None = None,
    **app_kwargs,
):
    """The server's Streamable HTTP app with a recording event store and the ledger
    middleware around it; returns (asgi_app, store)."""
    writer = LedgerWriter(out_dir, hmac_key)
    store = RecordingEventStore(writer)
    app = server.streamable_http_app(event_store=store, **app_kwargs)
    return LedgerMiddleware(
        app,
        writer,
        store,
        server_instance=server_instance,
        retry_ms=app_kwargs.get("retry_interval"),
        rollout_stage=rollout_stage,
    ), store
