"""What the probe learns through the official MCP Python SDK client: which protocol
revision the endpoint negotiates (the SDK's own discovery: `server/discover` at 2026-07-28,
else the `initialize` handshake), its tools and their annotations, and — for the
2026-07-28 re-send scenario — a tool call cut by the client and sent again with the same
idempotency key. Imported only by `replaygate probe`: the `mcp` package is an optional
extra (`replaygate[probe]`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import anyio
import httpx2

from .wire import PROBE_HEADER

T = TypeVar("T")


@dataclass
class Tool:
    name: str
    read_only: bool
    destructive: bool | None
    idempotent: bool | None
    required: list[str] = field(default_factory=list)


@dataclass
class Discovery:
    protocol_version: str | None
    server_name: str | None
    tools: list[Tool]
    modern: bool  # the endpoint speaks 2026-07-28 or later (no sessions, no resumption)
    error: str | None = None


def _headers(run_id: str, agent: str, origin: str | None) -> dict[str, str]:
    h = {"User-Agent": agent, PROBE_HEADER: run_id}
    if origin:
        h["Origin"] = origin
    return h


def within(seconds: float, fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a thread of its own, given at most `seconds`: the SDK client's own
    timeouts bound its requests, but not its teardown (a DELETE on the way out, a task
    group waiting on a stream), so the probe does not wait on it past its deadline. A
    call still running then is abandoned (TimeoutError)."""
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = exc

    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(max(0.0, seconds))
    if t.is_alive():
        raise TimeoutError(f"no answer within {seconds:.1f} s")
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


def discover(
    url: str,
    *,
    run_id: str,
    agent: str,
    origin: str | None,
    timeout: float,
    limit: float | None = None,
) -> Discovery:
    """Connect with the SDK client (mode `auto`), list the tools, disconnect (the SDK
    deletes its session on the way out); all of it within `limit` seconds."""
    limit = timeout if limit is None else limit
    try:
        # The SDK's own timeout a little shorter: its error names what it waited for.
        inner = min(timeout, max(0.1, limit - 1.0))
        return within(limit, anyio.run, _discover, url, run_id, agent, origin, inner)
    except TimeoutError as exc:
        return Discovery(None, None, [], False, error=f"discovery stopped: {exc}")


async def _discover(
    url: str, run_id: str, agent: str, origin: str | None, timeout: float
) -> Discovery:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(
        headers=_headers(run_id, agent, origin), timeout=httpx2.Timeout(timeout)
    )
    try:
        async with http:
            transport = streamable_http_client(url, http_client=http)
            with anyio.fail_after(timeout):
                async with Client(transport, mode="auto") as client:
                    listing = await client.list_tools()
                    version = client.protocol_version
                    info = client.server_info
        tools = []
        for t in listing.tools:
            ann = t.annotations
            schema = t.input_schema or {}
            tools.append(
                Tool(
                    t.name,
                    bool(ann and ann.read_only_hint),
                    None if ann is None else ann.destructive_hint,
                    None if ann is None else ann.idempotent_hint,
                    [str(r) for r in schema.get("required", [])],
                )
            )
        return Discovery(version, info.name if info else None, tools, _modern(version))
    except Exception as exc:  # noqa: BLE001 - any failure is the probe's verdict, not a crash
        while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            inner = exc.exceptions[0]
            if not isinstance(inner, Exception):
                break
            exc = inner
        why = str(exc) or (
            f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else ""
        )
        return Discovery(None, None, [], False, error=f"{type(exc).__name__}: {why}")


def _modern(version: str | None) -> bool:
    return bool(version) and str(version) >= "2026-07-28"


def resend(
    url: str,
    *,
    run_id: str,
    agent: str,
    origin: str | None,
    timeout: float,
    tool: str,
    arguments: dict[str, Any],
    key_arg: str,
    key: str,
    limit: float | None = None,
) -> dict[str, Any]:
    """The 2026-07-28 re-send: a call cut by the client after its first progress event (a
    broken stream is a cancelled request in that revision), then sent again twice with the
    same idempotency key. One execution answers both re-sends with the original receipt;
    differing answers mean each re-send executed. All of it within `limit` seconds
    (TimeoutError past it)."""
    if limit is None:
        return anyio.run(
            _resend, url, run_id, agent, origin, timeout, tool, arguments, key_arg, key
        )
    inner = min(timeout, max(0.1, limit - 1.0))
    return within(
        limit, anyio.run, _resend, url, run_id, agent, origin, inner, tool, arguments, key_arg,
        key,
    )  # fmt: skip


async def _resend(
    url: str,
    run_id: str,
    agent: str,
    origin: str | None,
    timeout: float,
    tool: str,
    arguments: dict[str, Any],
    key_arg: str,
    key: str,
) -> dict[str, Any]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    args = {**arguments, key_arg: key}
    headers = {**_headers(run_id, agent, origin), "Idempotency-Key": key}
    answers: list[str | None] = []
    cut = {"done": False}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(timeout))
    async with http, Client(streamable_http_client(url, http_client=http), mode="auto") as client:
        if not _modern(client.protocol_version):
            return {"skipped": f"the endpoint negotiated {client.protocol_version}"}
        meta: Any = {"idempotencyKey": key}
        with anyio.move_on_after(timeout) as scope:

            async def on_progress(
                progress: float, total: float | None, message: str | None
            ) -> None:
                cut["done"] = True
                scope.cancel()

            await client.call_tool(tool, args, progress_callback=on_progress, meta=meta)
        if not cut["done"]:
            answers.append(None)  # the call finished before any progress: not cut
        errors = 0
        for _ in range(2):
            with anyio.fail_after(timeout):
                res = await client.call_tool(tool, args, meta=meta)
            errors += bool(res.is_error)
            answers.append(_digest(res.model_dump(mode="json", by_alias=True)))
    resent = [a for a in answers if a is not None]
    return {
        "cut": cut["done"],
        "answers": resent,
        # Two equal errors are no receipt: they say nothing of how many times it ran.
        "errors": errors,
        "same_receipt": len(set(resent)) == 1 and len(resent) == 2,
    }


def _digest(doc: Any) -> str:
    with contextlib.suppress(TypeError):
        return hashlib.sha256(
            json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
    return ""
