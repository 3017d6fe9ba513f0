"""The audit-trail commands: `ack`, `override` (operator actions, append-only) and
`history` (when each decision changed, and what was in force at any time)."""

from __future__ import annotations

import json
from typing import Any

import click

from replaygate.api import Decision, ReplaygateError

from .options import (
    CONTEXT,
    F,
    config_option,
    db_option,
    emit_json,
    json_option,
    load_config,
    say_config,
)

DECISION = click.Choice([d.value for d in Decision], case_sensitive=False)


def _action(
    action: str,
    *,
    db: str,
    config_path: str | None,
    as_json: bool,
    stage: str,
    decision: str | None,
    reason: str | None,
    by: str,
    release: str | None,
) -> None:
    from replaygate import api
    from replaygate.api import decisionlog

    conf = load_config(config_path, db)
    # The history keeps a stage of a release under its key (`name@release`, as gates
    # shows it); `--stage NAME --release R` names the same stage.
    release = None if release == "-" else release
    if release is not None and not stage.endswith(f"@{release}"):
        stage = f"{stage}@{release}"
    row = decisionlog.record_action(
        decisionlog.file_for_db(db),
        action,
        stage,
        by=by,
        decision=decision.upper() if decision else None,
        reason=reason,
        release=release,
    )
    # Findings that read the history (proceeded_while_rollback) name this action.
    api.refresh_history_findings(db, conf)
    if as_json:
        emit_json(row)
    else:
        from replaygate.api import terminal as show

        verb = "acknowledged" if action == "ack" else "overrode"
        click.echo(
            f"{row['recorded_at']} {show(row['actor'])} {verb} {show(row['stage'])}: "
            f"{row['in_force']}" + (f" -> {row['decision']}" if action == "override" else "")
        )


def _action_options(f: F) -> F:
    """The options of an operator action, which `_action` takes (the command adds its
    `--decision`)."""
    f = click.option("--release", metavar="ID", help="Release the stage belongs to.")(f)
    f = click.option("--by", required=True, metavar="NAME", help="Who acts.")(f)
    f = click.option("--reason", metavar="TEXT", help="Why (required for override).")(f)
    f = click.option("--stage", required=True, metavar="NAME", help="The rollout stage.")(f)
    return json_option(config_option(db_option(f)))


@click.command(context_settings=CONTEXT)
@_action_options
@click.option("--decision", type=DECISION, help="The decision seen (must be the one in force).")
def ack(**options: Any) -> None:
    """Record that an operator saw the decision in force for a stage.

    \b
    Appended to the decision history; fails if the stage has no recorded decision
    or if --decision is not the one in force.

    \b
    Examples:
      replaygate ack --stage write-10pct --decision ROLLBACK --by alice
      replaygate ack --stage write-10pct --by alice --reason "paging the owner"
    """
    _action("ack", **options)


@click.command(context_settings=CONTEXT)
@_action_options
@click.option("--decision", type=DECISION, required=True, help="The operator's decision.")
def override(**options: Any) -> None:
    """Record that an operator decides otherwise than the decision in force.

    \b
    Appended to the decision history with who and why; the recorded evaluation is
    not changed. A rollout that proceeds while the evaluation said ROLLBACK is still
    a proceeded_while_rollback finding, naming the override.

    \b
    Example:
      replaygate override --stage write-10pct --decision PROCEED \\
          --reason "duplicate is a test tenant, INC-231" --by alice
    """
    if not options["reason"]:
        raise click.UsageError("an override needs --reason")
    _action("override", **options)


@click.command(context_settings=CONTEXT)
@db_option
@config_option
@json_option
@click.option("--stage", metavar="NAME", help="Only this stage.")
@click.option(
    "--at",
    "at",
    metavar="TIME",
    help="The decision as of this time of the data (ISO 8601, UTC unless it says).",
)
@click.option(
    "--recorded-at",
    "recorded_at",
    metavar="TIME",
    help="The decision in force at this wall-clock time (newest recorded by then).",
)
def history(
    db: str,
    config_path: str | None,
    as_json: bool,
    stage: str | None,
    at: str | None,
    recorded_at: str | None,
) -> None:
    """Show the decision history: each change of a stage's decision and every operator
    action; --at: the decision as of a time of the data (the newest evaluation made on
    data up to then); --recorded-at: the decision in force at a wall-clock time.

    \b
    Decisions are recorded by `gates --record` (and by watch and serve); the
    history is never recomputed, so it shows what replaygate said then, on the data
    and configuration it had then (data version and configuration digest). A decision
    made with another configuration than the current one (--config, else the one the
    database was last analysed with) says so.

    \b
    Examples:
      replaygate history --stage write-10pct
      replaygate history --stage write-10pct --at 2026-11-28T04:30:00Z --json
    """
    from replaygate.api import decisionlog as hist
    from replaygate.api import effective_settings
    from replaygate.api import terminal as show

    conf = load_config(config_path, db)
    # The digest the history records (every setting in force, defaults included).
    current = str(effective_settings(conf)["sha256"])
    configuration = {"source": conf.source, "sha256": current}

    def config_of(digest: str) -> str:
        short = show(digest)[:12]
        return f"configuration {short}" + ("" if digest == current else " (not the current one)")

    path = hist.file_for_db(db)
    rows = hist.checked_for_db(db)  # a broken history is an error, not a warning
    if at and recorded_at:
        raise click.UsageError("give --at (data time) or --recorded-at (wall clock), not both")
    if at or recorded_at:
        when = hist.parse_time(at or recorded_at or "")
        stages = [stage] if stage else sorted({str(r["stage"]) for r in rows if r.get("stage")})
        if at:
            found = {s: hist.as_of_data(path, s, when) for s in stages}
        else:
            found = {s: hist.in_force(path, s, at=when) for s in stages}
        by = "data" if at else "recorded"
        if as_json:
            emit_json(
                {"at": hist.iso(when), "by": by, "in_force": found, "configuration": configuration}
            )
            say_config()
            return
        if not any(found.values()):
            raise ReplaygateError(
                f"no decision recorded on data up to {hist.iso(when)} or later"
                if at
                else f"no decision recorded at or before {hist.iso(when)}"
            )
        for s, row in found.items():
            if row is None:
                click.echo(f"{show(s)}: nothing recorded " + ("for it" if at else "by then"))
                continue
            seen = ""
            if at:
                seen = f"on data up to {row['data_end']}, " + (
                    "the first evaluation that saw this time, " if row["evaluated_later"] else ""
                )
            click.echo(
                f"{show(s)}: {row['decision']} ({seen}recorded {row['recorded_at']} by "
                f"{show(row['source'])}, data version {show(row['data_version'])}, "
                f"{config_of(row['config_sha256'])})"
            )
            for r in row["reasons"] or []:
                click.echo(f"  - {show(r)}")
        say_config()
        return
    entries = hist.timeline(path, stage)
    if as_json:
        emit_json({"timeline": entries, "chain": "intact", "configuration": configuration})
        say_config()
        return
    if not entries:
        click.echo("no decision recorded (replaygate gates --record records one)")
        say_config()
        return
    for e in entries:
        if e["kind"] == "evaluation":
            change = f"{show(e['previous'])} -> " if e["previous"] else ""
            click.echo(
                f"{show(e['recorded_at'])}  {show(e['stage'])}: {change}{show(e['decision'])}  "
                f"({show(e['source'])}, data version {show(e['data_version'])}, "
                f"{e['evaluations']} evaluation{'s' if e['evaluations'] != 1 else ''}"
                + ("" if e.get("config_sha256") in (None, current) else ", another configuration")
                + ")"
            )
        else:
            click.echo(
                f"{show(e['recorded_at'])}  {show(e['stage'])}: {show(e['kind'])} by "
                f"{show(e['actor'])} of {show(e['in_force'])}"
                + (f" -> {show(e['decision'])}" if e["kind"] == "override" else "")
                + (f": {show(json.dumps(e['note']))}" if e["note"] else "")
            )


COMMANDS = (ack, override, history)
