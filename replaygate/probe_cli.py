"""`replaygate probe URL --out DIR`: run the synthetic client's scenarios against a live
endpoint and write client evidence for `ingest` (the work is in `replaygate.probe`, which
needs the `probe` extra and is imported only here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from replaygate.api import ReplaygateError

from .duration import Duration
from .options import CONTEXT, config_option, emit_json, json_option

_SCENARIOS = ("resume", "cursors", "dead_session", "origin", "resend", "evicted")


def _json_object(text: str | None, option: str) -> dict[str, Any]:
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ReplaygateError(f"{option}: not JSON ({exc})") from exc
    if not isinstance(doc, dict):
        raise ReplaygateError(f"{option}: must be a JSON object")
    return doc


def _scenarios(text: str) -> tuple[str, ...]:
    names = tuple(n.strip().replace("-", "_") for n in text.split(",") if n.strip())
    unknown = [n for n in names if n not in _SCENARIOS]
    if unknown or not names:
        raise ReplaygateError(
            f"--scenarios: unknown {', '.join(unknown) or '(none)'}; choose from "
            + ", ".join(_SCENARIOS)
        )
    return names


@click.command(context_settings=CONTEXT)
@click.argument("url")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option(
    "--scenarios",
    "scenario_list",
    default="resume,cursors,dead_session,origin",
    show_default=True,
    help="Comma-separated: resume, cursors, dead_session, origin, resend, evicted.",
)
@click.option(
    "--evict-calls",
    default=20,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="evicted: further calls of the tool before the first cursor is shown again.",
)
@click.option(
    "--count",
    default=1,
    show_default=True,
    type=click.IntRange(1, 1000),
    help="Rounds of the scenarios.",
)
@click.option("--every", type=Duration(), help="Start a round this often (e.g. 1m).")
@click.option("--release", metavar="R", help="Release stamped on the probe's sessions.")
@click.option("--stage", metavar="S", help="Rollout stage stamped on the probe's sessions.")
@click.option("--origin", metavar="O", help="An allowed Origin (default: the URL's own).")
@click.option("--tool", metavar="NAME", help="A read-only tool that streams several events.")
@click.option("--arguments", metavar="JSON", help="Arguments of --tool, a JSON object.")
@click.option(
    "--cut-after",
    default=2,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Cut the stream after this many events that carry data.",
)
@click.option(
    "--resume-after",
    default=1.0,
    show_default=True,
    type=Duration(),
    help="Stay away at least this long before resuming (and the server's retry).",
)
@click.option(
    "--write-tool",
    metavar="NAME",
    help="A tool with side effects that is safe to call twice (resend scenario).",
)
@click.option("--write-arguments", metavar="JSON", help="Arguments of --write-tool.")
@click.option(
    "--idempotency-key-arg",
    metavar="ARG",
    help="The --write-tool argument that carries the idempotency key.",
)
@click.option(
    "--protocol-version",
    default="2025-11-25",
    show_default=True,
    help="Revision for the session scenarios (resumption needs one before 2026-07-28).",
)
@click.option(
    "--dead-status",
    "dead_statuses",
    multiple=True,
    type=int,
    help="What the server answers for a deleted session (default 404; repeatable).",
)
@click.option(
    "--max-requests",
    default=200,
    show_default=True,
    type=click.IntRange(1),
    help="Stop after this many HTTP requests in all.",
)
@click.option(
    "--rate",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0.1, 100),
    help="At most this many requests per second.",
)
@click.option(
    "--timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(1),
    help="Seconds to wait for any one answer.",
)
@click.option(
    "--deadline",
    type=Duration(),
    help="The whole run ends by then, whatever the endpoint does "
    "(default: 2m a round; with --every, the rounds' span plus 2m).",
)
@click.option(
    "--receipts-only",
    is_flag=True,
    help="Write no session or stream ledger rows (where the server's recorder writes them).",
)
@config_option
@json_option
def probe(
    url: str,
    out: str,
    scenario_list: str,
    evict_calls: int,
    count: int,
    every: float | None,
    release: str | None,
    stage: str | None,
    origin: str | None,
    tool: str | None,
    arguments: str | None,
    cut_after: int,
    resume_after: float,
    write_tool: str | None,
    write_arguments: str | None,
    idempotency_key_arg: str | None,
    protocol_version: str,
    dead_statuses: tuple[int, ...],
    max_requests: int,
    rate: float,
    timeout: float,
    deadline: float | None,
    receipts_only: bool,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Probe a live MCP endpoint with a synthetic client; write client evidence.

    \b
    Scenarios: resume (a streaming call cut after --cut-after events and resumed with
    Last-Event-ID, beside an uncut reference call), cursors (another session's cursor and
    one the server does not hold: expect a rejection), dead_session (DELETE, reuse,
    re-initialize), origin (foreign Origin and Host refused, the allowed Origin served),
    resend (2026-07-28: a cut call re-sent with its idempotency key; only with
    --write-tool), evicted (on request: a call's first cursor shown again after
    --evict-calls further calls, when a bounded store has evicted it: expect nothing
    replayed). Read-only unless --write-tool names a tool that is safe to call twice.
    Every request carries `Replaygate-Probe: <run>` and the User-Agent
    `replaygate-probe/...`; its sessions' principal is `replaygate-probe`.

    \b
    Writes under --out: inbox-probe-<run>.jsonl (receipts), sessions-probe-<run>.jsonl
    and streams-probe-<run>.jsonl (the client's facts), probe-<run>.json (summary).
    Session ids are HMACed with the configured key ($REPLAYGATE_HMAC_KEY), as `ingest`
    does. Exit 0 every scenario passed, 2 some could not tell, 3 some failed.

    \b
    Examples:
      replaygate probe https://mcp.example.com/mcp --out probes/ --stage canary-5pct
      replaygate probe http://127.0.0.1:8080/mcp --out probes/ --tool count \\
          --arguments '{"n": 6}' --count 10 --every 1m
    """
    try:
        # The SDK is imported here, before the run's deadline starts: loading it takes
        # seconds on a busy machine, and the deadline is for time spent on the endpoint.
        import mcp  # noqa: F401

        from replaygate import probe as p
    except ImportError as exc:
        raise ReplaygateError(
            f"probe needs the probe extra: pip install 'replaygate[probe]' ({exc})"
        ) from exc
    from replaygate.api import load_config, outputs

    conf = load_config(config_path)
    key = conf.hmac_key()
    if key is None:
        raise ReplaygateError(
            f"probe: set ${conf.hmac_key_env} (the key your servers and ingest HMAC "
            "session ids with)"
        )
    names = _scenarios(scenario_list)
    if "resend" in names and write_tool and not idempotency_key_arg:
        raise ReplaygateError("--write-tool needs --idempotency-key-arg")
    configured = getattr(conf, "dead_session_statuses", None)
    dead = tuple(dead_statuses) or tuple(configured or (404,))
    settings = p.Settings(
        url=url,
        out=Path(out),
        run_id=p.new_run_id(),
        key=key,
        version=protocol_version,
        origin=origin,
        tool=tool,
        arguments=_json_object(arguments, "--arguments"),
        cut_after=cut_after,
        resume_after=resume_after,
        write_tool=write_tool,
        write_arguments=_json_object(write_arguments, "--write-arguments"),
        key_arg=idempotency_key_arg,
        evict_calls=evict_calls,
        dead_statuses=dead,
        timeout=timeout,
        stage=stage,
        release=release,
        ledger=not receipts_only,
        max_requests=max_requests,
        rate=rate,
        scenarios=names,
        # Never through a link, never the configuration; the summary written whole.
        sink=outputs.for_database(None, config_source=conf.source),
    )
    doc = p.run(
        settings,
        count=count,
        every=every,
        deadline=deadline,
        echo=(lambda _line: None) if as_json else (lambda line: click.echo(line)),
    )
    if as_json:
        emit_json(doc)
    else:
        click.echo(f"{doc['requests']} requests; summary {doc['summary']}", err=True)
    sys.exit(p.EXIT_CODES[doc["verdict"]])
