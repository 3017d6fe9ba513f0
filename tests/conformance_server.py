"""The server the official MCP conformance suite drives in tests/test_e2e_conformance.py:
every tool, resource and prompt its server scenarios call, on the official Python SDK,
with the ledger recorder and DNS-rebinding protection on (as a localhost server should
run):

    python -m tests.conformance_server --port 8000 --ledger DIR --stage STAGE

The suite says what each scenario needs (`conformance list --server`, the scenarios'
descriptions); the answers here are this project's own. HMAC key from
$REPLAYGATE_HMAC_KEY. One extra tool, `lost_answer`, is not called by the suite: the test
calls it through a proxy that drops its answer."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os

import uvicorn
from mcp.server import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    AudioContent,
    Completion,
    EmbeddedResource,
    EmptyResult,
    ImageContent,
    SamplingMessage,
    SetLevelRequestParams,
    SubscribeRequestParams,
    TextContent,
    TextResourceContents,
    ToolAnnotations,
    UnsubscribeRequestParams,
)
from pydantic import BaseModel, Field

from replaygate.recorder import MemoryEventStore, instrument

# A 1x1 PNG and a WAV header with two samples: content of the kinds the suite checks.
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4"
        "890000000d49444154789c63f8cfc0f01f0005050200a45f1cd20000000049454e44ae426082"
    )
).decode()
WAV = base64.b64encode(
    b"RIFF&\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00@\x1f\x00\x00"
    b"\x80>\x00\x00\x02\x00\x10\x00data\x02\x00\x00\x00\x00\x00"
).decode()

mcp = MCPServer("replaygate-conformance", version="1.0.0")
# The suite's tools change nothing: said so, they are reads (MCP's default is a write).
READ = ToolAnnotations(read_only_hint=True)
subscribed: set[str] = set()


def _text(uri: str, text: str, mime: str = "text/plain") -> EmbeddedResource:
    return EmbeddedResource(
        type="resource", resource=TextResourceContents(uri=uri, mime_type=mime, text=text)
    )


@mcp.tool(annotations=READ)
def test_simple_text() -> str:
    """Answers with one text block."""
    return "A plain text answer from the replaygate conformance server."


@mcp.tool(annotations=READ)
def test_image_content() -> list[ImageContent]:
    """Answers with an image."""
    return [ImageContent(type="image", data=PNG, mime_type="image/png")]


@mcp.tool(annotations=READ)
def test_audio_content() -> list[AudioContent]:
    """Answers with audio."""
    return [AudioContent(type="audio", data=WAV, mime_type="audio/wav")]


@mcp.tool(annotations=READ)
def test_embedded_resource() -> list[EmbeddedResource]:
    """Answers with an embedded resource."""
    return [_text("test://embedded-resource", "Embedded text.")]


@mcp.tool(annotations=READ)
def test_multiple_content_types() -> list[TextContent | ImageContent | EmbeddedResource]:
    """Answers with text, an image and a resource."""
    return [
        TextContent(type="text", text="Three kinds of content follow."),
        ImageContent(type="image", data=PNG, mime_type="image/png"),
        _text("test://mixed-content-resource", '{"kind": "mixed"}', "application/json"),
    ]


@mcp.tool(annotations=READ)
async def test_tool_with_logging(ctx: Context) -> str:
    """Logs three messages while it runs."""
    for step in ("started", "working", "finished"):
        await ctx.info(f"logging tool {step}")
        await asyncio.sleep(0.03)
    return "logged three messages"


@mcp.tool(annotations=READ)
async def test_tool_with_progress(ctx: Context) -> str:
    """Reports progress 0, 50 and 100 of 100, then answers with its progress token."""
    for done in (0, 50, 100):
        await ctx.report_progress(progress=done, total=100, message=f"{done} of 100")
        await asyncio.sleep(0.03)
    meta = ctx.request_context.meta if ctx.request_context else None
    return str((meta or {}).get("progress_token", 0))


@mcp.tool(annotations=READ)
async def test_sampling(prompt: str, ctx: Context) -> str:
    """Asks the client's model (sampling/createMessage) and answers with its reply."""
    reply = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=100,
        related_request_id=ctx.request_id,
    )
    text = reply.content.text if reply.content.type == "text" else "(no text)"
    return f"LLM response: {text}"


class Contact(BaseModel):
    username: str = Field(description="User's response")
    email: str = Field(description="User's email address")


class Defaults(BaseModel):
    name: str = Field(default="John Doe", description="User name")
    age: int = Field(default=30, description="User age")
    score: float = Field(default=95.5, description="User score")
    status: str = Field(
        default="active",
        description="User status",
        json_schema_extra={"enum": ["active", "inactive", "pending"]},
    )
    verified: bool = Field(default=True, description="Verification status")


class Enums(BaseModel):
    untitledSingle: str = Field(  # noqa: N815 (the suite's field names)
        description="single choice", json_schema_extra={"enum": ["option1", "option2"]}
    )
    titledSingle: str = Field(  # noqa: N815
        description="single choice with titles",
        json_schema_extra={
            "oneOf": [{"const": "value1", "title": "First"}, {"const": "value2", "title": "Second"}]
        },
    )
    legacyEnum: str = Field(  # noqa: N815
        description="single choice, legacy titles",
        json_schema_extra={"enum": ["opt1", "opt2"], "enumNames": ["One", "Two"]},
    )
    untitledMulti: list[str] = Field(  # noqa: N815
        description="several choices",
        json_schema_extra={"items": {"type": "string", "enum": ["option1", "option2"]}},
    )
    titledMulti: list[str] = Field(  # noqa: N815
        description="several choices with titles",
        json_schema_extra={
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First"},
                    {"const": "value2", "title": "Second"},
                ]
            }
        },
    )


async def _elicit(ctx: Context, message: str, schema: type[BaseModel]) -> str:
    answer = await ctx.elicit(message=message, schema=schema)
    content = answer.data.model_dump_json() if answer.action == "accept" else "{}"
    return f"User response: action={answer.action}, content={content}"


@mcp.tool(annotations=READ)
async def test_elicitation(message: str, ctx: Context) -> str:
    """Asks the user (elicitation/create) for a name and an e-mail address."""
    return await _elicit(ctx, message, Contact)


@mcp.tool(annotations=READ)
async def test_elicitation_sep1034_defaults(ctx: Context) -> str:
    """Asks the user for fields that all have defaults (SEP-1034)."""
    return await _elicit(ctx, "Accept the defaults", Defaults)


@mcp.tool(annotations=READ)
async def test_elicitation_sep1330_enums(ctx: Context) -> str:
    """Asks the user to choose from each kind of enum (SEP-1330)."""
    return await _elicit(ctx, "Choose", Enums)


@mcp.tool(annotations=READ)
def test_error_handling() -> str:
    """Fails (an isError result)."""
    raise RuntimeError("this tool always fails")


@mcp.tool(annotations=READ)
async def test_reconnection(ctx: Context) -> str:
    """Closes its SSE stream mid-call (SEP-1699 polling); the client resumes."""
    await ctx.info("before the close")
    await ctx.close_sse_stream()
    await asyncio.sleep(0.3)
    await ctx.info("after the close")
    return "reconnected"


@mcp.tool(name="json_schema_2020_12_tool", annotations=READ)
def json_schema_2020_12_tool() -> str:
    """Has an input schema with JSON Schema 2020-12 keywords."""
    return "ok"


# The SDK derives input schemas from signatures; this one is the suite's, kept as given.
mcp._tool_manager._tools["json_schema_2020_12_tool"].parameters = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


@mcp.tool()
async def lost_answer(ctx: Context) -> str:
    """A write (sent with an Idempotency-Key): reports progress five times, then
    answers; the test loses the answer on its way to the client. (A server learns that
    its client is gone only when a write after the cut fails: hence several.)"""
    for step in range(5):
        await ctx.report_progress(step, 5)
        await asyncio.sleep(0.15)
    return "an answer nobody receives"


@mcp.resource("test://static-text")
def static_text() -> str:
    """A text resource."""
    return "Static text of the replaygate conformance server."


@mcp.resource("test://static-binary")
def static_binary() -> bytes:
    """A binary resource (a PNG)."""
    return base64.b64decode(PNG)


@mcp.resource("test://template/{id}/data")
def templated(id: str) -> str:  # noqa: A002 (the template's parameter)
    """A resource template."""
    return json.dumps({"id": id, "templateTest": True})


@mcp.resource("test://watched-resource")
def watched() -> str:
    """A resource clients subscribe to."""
    return "watched"


@mcp.prompt()
def test_simple_prompt() -> list[UserMessage]:
    """A prompt without arguments."""
    return [UserMessage(role="user", content=TextContent(type="text", text="A simple prompt."))]


@mcp.prompt()
def test_prompt_with_arguments(arg1: str, arg2: str) -> list[UserMessage]:
    """A prompt with two arguments."""
    text = f"arg1={arg1}, arg2={arg2}"
    return [UserMessage(role="user", content=TextContent(type="text", text=text))]


@mcp.prompt()
def test_prompt_with_embedded_resource(resourceUri: str) -> list[UserMessage]:  # noqa: N803
    """A prompt that embeds a resource."""
    return [
        UserMessage(role="user", content=_text(resourceUri, "Embedded in a prompt.")),
        UserMessage(role="user", content=TextContent(type="text", text="Read the above.")),
    ]


@mcp.prompt()
def test_prompt_with_image() -> list[UserMessage]:
    """A prompt with an image."""
    return [
        UserMessage(
            role="user", content=ImageContent(type="image", data=PNG, mime_type="image/png")
        ),
        UserMessage(role="user", content=TextContent(type="text", text="Describe the image.")),
    ]


@mcp.completion()
async def complete(ref, argument, context) -> Completion:
    return Completion(values=[], total=0, has_more=False)


async def _set_level(ctx: ServerRequestContext, params: SetLevelRequestParams) -> EmptyResult:
    return EmptyResult()


async def _subscribe(ctx: ServerRequestContext, params: SubscribeRequestParams) -> EmptyResult:
    subscribed.add(str(params.uri))
    return EmptyResult()


async def _unsubscribe(ctx: ServerRequestContext, params: UnsubscribeRequestParams) -> EmptyResult:
    subscribed.discard(str(params.uri))
    return EmptyResult()


# MCPServer has no public hook for these three methods yet.
mcp._lowlevel_server.add_request_handler("logging/setLevel", SetLevelRequestParams, _set_level)
mcp._lowlevel_server.add_request_handler("resources/subscribe", SubscribeRequestParams, _subscribe)
mcp._lowlevel_server.add_request_handler(
    "resources/unsubscribe", UnsubscribeRequestParams, _unsubscribe
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--ledger", required=True)
    ap.add_argument("--stage", default=None)
    ap.add_argument("--retry-ms", type=int, default=200)
    args = ap.parse_args()
    app, _ = instrument(
        mcp,
        args.ledger,
        hmac_key=os.environ["REPLAYGATE_HMAC_KEY"].encode(),
        event_store=MemoryEventStore(),
        rollout_stage=args.stage,
        retry_interval=args.retry_ms,
        json_response=False,
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
