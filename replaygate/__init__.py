"""replaygate: audit MCP Streamable HTTP replay, resumption and idempotency; gate rollouts."""

__version__ = "0.1.0"
