"""A small MCP server on the official Python SDK with the ledger recorder, used by the
end-to-end test and as a starting point:

    python -m replaygate.recorder.example_server --port 8000 --ledger /var/log/mcp \
        --stage read-25pct [--event-store mypackage.stores:RedisStore | --max-events N]

The HMAC key comes from $REPLAYGATE_HMAC_KEY (required). `--event-store` names the
operator's own EventStore class (module:attribute, constructed without arguments),
which the recorder wraps instead of its in-memory store.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import itertools
import os

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations

from . import MemoryEventStore, instrument

mcp = MCPServer("replaygate-example")
READ_ONLY = ToolAnnotations(read_only_hint=True)
# A proxy keeps idle connections to its upstream pooled (Caddy for 2 minutes, nginx's
# `keepalive_timeout` 60 s) and reuses them; a server that closes one first (uvicorn's
# default: after 5 s) races that reuse, and the proxy then answers 502 or a 200 with no
# body. Idle connections therefore stay open longer than the proxies' own timeouts.
KEEP_ALIVE_S = 300
_tickets = itertools.count(1)
_filed: dict[str, str] = {}


@mcp.tool(annotations=READ_ONLY)
async def slow(n: int, ctx: Context) -> str:
    """Report progress n times, then answer."""
    for i in range(n):
        await ctx.report_progress(i, n)
        await asyncio.sleep(0.3)
    return f"done {n}"


async def _log_numbers(n: int, ctx: Context, pause: float) -> None:
    """Log each number from 1 to n as a message, `pause` seconds apart."""
    for i in range(1, n + 1):
        await ctx.info(f"{i}")
        if pause:
            await asyncio.sleep(pause)


@mcp.tool(annotations=READ_ONLY)
async def count(n: int, ctx: Context) -> str:
    """Log each number up to n (the client builds its answer from them), then answer."""
    await _log_numbers(n, ctx, 0.3)
    return f"counted to {n}"


@mcp.tool(annotations=READ_ONLY)
async def burst(n: int, ctx: Context) -> str:
    """Log n messages at once (fills a bounded replay store), then answer."""
    await _log_numbers(n, ctx, 0)
    return f"burst {n}"


@mcp.tool()
async def create_ticket(title: str, ctx: Context, idempotency_key: str | None = None) -> str:
    """A write: report progress, create a ticket, answer with its number. It takes an
    idempotency key and ignores it: a re-send creates another ticket (what
    `replaygate probe --write-tool create_ticket` shows)."""
    for i in range(3):
        await ctx.report_progress(i, 3)
        await asyncio.sleep(0.2)
    return f"ticket {next(_tickets)}: {title}"


@mcp.tool()
async def file_ticket(title: str, idempotency_key: str, ctx: Context) -> str:
    """The same write honouring its idempotency key: a key seen before gets the original
    ticket, and nothing is created again (one execution per key)."""
    if idempotency_key in _filed:
        return _filed[idempotency_key]
    for i in range(3):
        await ctx.report_progress(i, 3)
        await asyncio.sleep(0.2)
    # A re-send may arrive while the first is still running: the first to get here files.
    return _filed.setdefault(idempotency_key, f"ticket {next(_tickets)}: {title}")


@mcp.tool(annotations=READ_ONLY)
async def nudge(ctx: Context) -> str:
    """Close the SSE stream mid-way (the client reconnects after `retry`), then answer."""
    await ctx.report_progress(0, 2)
    await asyncio.sleep(0.2)
    await ctx.close_sse_stream()
    await asyncio.sleep(2.0)
    await ctx.report_progress(1, 2)
    return "nudged"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--ledger", required=True)
    ap.add_argument(
        "--release",
        default=os.environ.get("REPLAYGATE_RELEASE"),
        help="release (version) of this server, stamped on its sessions",
    )
    ap.add_argument("--stage", default=None, help="rollout stage, for logs without releases")
    ap.add_argument("--retry-ms", type=int, default=500)
    ap.add_argument(
        "--keep-alive-s",
        type=int,
        default=KEEP_ALIVE_S,
        help="seconds an idle connection stays open (keep it above your proxy's upstream "
        "idle timeout)",
    )
    ap.add_argument("--event-store", default=None, help="module:Class of your EventStore")
    ap.add_argument(
        "--max-events",
        type=int,
        default=100_000,
        help="bound of the in-memory replay store (without --event-store)",
    )
    args = ap.parse_args()
    key = os.environ["REPLAYGATE_HMAC_KEY"].encode()
    store = MemoryEventStore(args.max_events)
    if args.event_store:
        module, _, attr = args.event_store.partition(":")
        store = getattr(importlib.import_module(module), attr)()
    app, _ = instrument(
        mcp,
        args.ledger,
        hmac_key=key,
        event_store=store,
        release=args.release,
        rollout_stage=args.stage,
        retry_interval=args.retry_ms,
        json_response=False,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*"],
            allowed_origins=["http://localhost:*", "http://127.0.0.1:*"],
        ),
    )
    uvicorn.run(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        timeout_keep_alive=args.keep_alive_s,
    )


if __name__ == "__main__":
    main()
