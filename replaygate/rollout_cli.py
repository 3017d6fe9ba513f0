"""`replaygate rollout ...`: write the rollout log from a deploy step, or from what Argo
Rollouts and Flagger report."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import click

from replaygate.api import ReplaygateError, parse_iso

if TYPE_CHECKING:
    from replaygate.api import Config

from .options import CONTEXT, F, config_option, db_option, say


@click.group(context_settings=CONTEXT)
def rollout() -> None:
    """Write the rollout log (mcpRollout.v1): one record per rollout action.

    \b
    Each record carries the release, the stage, the actor ($REPLAYGATE_ACTOR, else the
    login name) and the time, and is checked against the input contract first. Records
    go into the database (--db), or are appended to a JSON Lines file (--to) that
    `ingest` or `watch` reads. Stages are scoped by release: two releases' stages of
    the same name stay apart.

    \b
    Examples:
      replaygate rollout start --release v2.4.0 --stage canary-5pct --percent 5 --scope read
      replaygate rollout hold --release v2.4.0 --stage canary-5pct --note "waiting for sample"
      replaygate rollout proceed --release v2.4.0 --stage canary-5pct
      replaygate rollout rollback --release v2.4.0 --stage canary-5pct --to logs/rollout.jsonl
      replaygate rollout finish --release v2.4.0 --stage full
      replaygate rollout import rollout.json analysisruns.json --db fleet.duckdb
    """


NO_RELEASE = "-"


def _destination(f: F) -> F:
    f = click.option(
        "--to",
        "to_file",
        metavar="FILE",
        type=click.Path(dir_okay=False),
        help="Append to this JSON Lines rollout log instead of the database.",
    )(f)
    return config_option(db_option(f))


def _release(value: str | None) -> str | None:
    """`-` is "no release" (a rollout log that names none), as for `gates` and `serve`."""
    return None if value == NO_RELEASE else value


def _write(
    records: list[dict[str, Any]],
    db: str,
    to_file: str | None,
    dedupe: bool = False,
    config_path: str | None = None,
    must_have_started: tuple[str | None, str] | None = None,
) -> int:
    conf, note = _config(config_path, db)
    n = _append(records, db, to_file, conf, dedupe, must_have_started)
    say(note, err=True)
    return n


def _append(
    records: list[dict[str, Any]],
    db: str,
    to_file: str | None,
    conf: Config,
    dedupe: bool,
    must_have_started: tuple[str | None, str] | None,
) -> int:
    from replaygate.api import rolloutlog

    if to_file:
        from replaygate.api import outputs

        # An append, not a replacement: judged by the guard (never the database, its
        # history or the configuration, never through a link), then appended through it
        # (a link planted after the check is refused at the open).
        guard = outputs.for_database(db, config_source=conf.source)
        guard.check(to_file)
        if must_have_started:
            _started(rolloutlog.started_in_file(to_file, *must_have_started), must_have_started)
        return rolloutlog.append_file(
            to_file, records, dedupe=dedupe, config=conf, append=guard.append_bytes
        )
    from replaygate.api import db as dbm

    con = dbm.connect(db, role="rollout")
    try:
        if must_have_started:
            _started(rolloutlog.started_in_db(con, *must_have_started), must_have_started)
        return rolloutlog.insert_db(con, records, dedupe=dedupe, config=conf)
    finally:
        dbm.close(con)


def _config(config_path: str | None, db: str) -> tuple[Config, str]:
    """--config, else the configuration the database was last analysed with (as every
    reader), else ./replaygate.toml; and the line that names it (said once the command
    has succeeded, so that an error stays one line)."""
    from replaygate.api import resolve_config

    resolved = resolve_config(db, config_path)
    return resolved.config, f"configuration: {resolved.note}"


def _started(ok: bool, what: tuple[str | None, str]) -> None:
    release, stage = what
    if not ok:
        of = "without a release" if release is None else f"of release {release!r}"
        raise ReplaygateError(
            f"stage {stage!r} {of} never started in this rollout log: "
            "record its start first (replaygate rollout start)"
        )


def _ts(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parse_iso(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an RFC 3339 time", param_hint="--at") from None
    return value


def _action_command(verb: str, action: str, summary: str) -> click.Command:
    @click.option(
        "--release",
        required=True,
        metavar="R",
        help="Release being rolled out (`-`: none, for a log that names no release).",
    )
    @click.option("--stage", required=True, metavar="S", help="Stage name, e.g. canary-5pct.")
    @click.option("--percent", type=click.FloatRange(0, 100), help="Share of sessions (0-100).")
    @click.option(
        "--scope", type=click.Choice(["shadow", "read", "write"]), help="What the stage enables."
    )
    @click.option("--note", help="Why (free text).")
    @click.option("--actor", help="Who acts (default: $REPLAYGATE_ACTOR, else the login name).")
    @click.option("--at", "at", metavar="TIME", help="When (RFC 3339; default: now).")
    @click.option("--json", "as_json", is_flag=True, help="Print the record written as JSON.")
    @_destination
    def command(
        release: str | None,
        stage: str,
        percent: float | None,
        scope: str | None,
        note: str | None,
        actor: str | None,
        at: str | None,
        as_json: bool,
        db: str,
        config_path: str | None,
        to_file: str | None,
    ) -> None:
        from replaygate.api import rolloutlog

        release = _release(release)
        rec = rolloutlog.record(
            action,
            release=release,
            stage=stage,
            ts=_ts(at),
            percent=percent,
            scope=scope,
            actor=actor or rolloutlog.default_actor(),
            note=note,
        )
        # Going on from, or finishing, a stage that never started is a typo or a lost
        # start: refused, so the log never holds an action no window can take.
        started = (release, stage) if action in ("proceed", "complete") else None
        _write([rec], db, to_file, config_path=config_path, must_have_started=started)
        if as_json:
            click.echo(json.dumps(rec))
        where = to_file or db
        say(
            f"rollout: {action} {stage} of {release or NO_RELEASE} by {rec['actor']} "
            f"at {rec['ts']} -> {where}",
            err=True,
        )

    command.__doc__ = f"""{summary}

    \b
    Example:
      replaygate rollout {verb} --release v2.4.0 --stage canary-5pct"""
    return rollout.command(verb, context_settings=CONTEXT)(command)


_action_command("start", "start", "Record that a stage of a release starts (its window opens).")
_action_command("proceed", "proceed", "Record the decision to go on from a stage.")
_action_command("hold", "hold", "Record that a stage is held (it stays open).")
_action_command("rollback", "rollback", "Record that a stage was rolled back (its window ends).")
_action_command("finish", "complete", "Record that a stage completed (its window ends).")


@rollout.command("import", context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--release", metavar="R", help="Release id for every record (default: see below).")
@click.option(
    "--scope",
    type=click.Choice(["shadow", "read", "write"]),
    help="Scope written on the stages' start records.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the records instead of writing them.")
@_destination
def import_(
    paths: tuple[str, ...],
    release: str | None,
    scope: str | None,
    as_json: bool,
    db: str,
    config_path: str | None,
    to_file: str | None,
) -> None:
    """Turn Argo Rollouts and Flagger history into rollout records.

    \b
    Reads `kubectl get -o json` or `-o yaml` output (a List, single objects, several
    YAML documents): Argo Rollouts `Rollout`, `AnalysisRun` and `Experiment` objects,
    Flagger `Canary` objects and the Kubernetes events about them (core/v1 or
    events.k8s.io/v1). Records already in the log are not written again, so the same
    objects can be imported on every run. A file that yields no record is an error
    (exit 1) that says why.

    \b
    The release id is --release when given, else the Rollout's
    `replaygate.io/release` annotation, else Argo's pod template hash
    (`rollouts-pod-template-hash`) or Flagger's `lastAppliedSpec`. Stage names are
    `canary-<weight>pct`, `preview` (blue-green) and `ab-test` (Flagger A/B). Have the
    recorder stamp the same release id.

    \b
    Examples:
      kubectl get rollout,analysisrun,experiment -n shop -o yaml > argo.yaml
      replaygate rollout import argo.yaml --db fleet.duckdb
      kubectl get canary podinfo -n test -o json > canary.json
      kubectl get events -n test --field-selector involvedObject.kind=Canary -o json > ev.json
      replaygate rollout import canary.json ev.json --release 6.1.0 --to logs/rollout.jsonl
    """
    from replaygate.api import cdobjects

    files = [(p, _documents(p)) for p in paths]
    docs = [d for _, docs in files for d in docs]
    known = _known_starts(db, to_file)
    reading = cdobjects.read(docs, release=_release(release), scope=scope, known=known)
    for why in reading.skipped:
        say(f"rollout import: skipped {why}", err=True)
    empty = [p for p, docs in files if not any(map(reading.used, cdobjects.flatten(docs)))]
    if empty:
        # An import that yields nothing for a file is a CD step that reads the wrong thing:
        # say so and fail, rather than "0 records" and success.
        why = "; ".join(reading.skipped) or "no Argo Rollout or Flagger Canary in it"
        raise ReplaygateError(f"{', '.join(map(str, empty))}: no rollout record ({why})")
    records = reading.records
    if as_json:
        from replaygate.api import rolloutlog

        conf, note = _config(config_path, db)
        rolloutlog.check(records, conf)
        for r in records:
            click.echo(json.dumps(r))
        say(note, err=True)
        return
    n = _write(records, db, to_file, dedupe=True, config_path=config_path)
    click.echo(f"rollout import: {len(records)} records read, {n} new -> {to_file or db}", err=True)


def _known_starts(db: str, to_file: str | None) -> list[dict[str, Any]]:
    """The starts the destination's rollout log already holds: an earlier import saw
    stages that the objects no longer show (a failed Flagger canary's weight)."""
    from pathlib import Path

    from replaygate.api import rolloutlog

    if to_file:
        return rolloutlog.starts_in_file(to_file)
    if not Path(db).exists():
        return []
    import duckdb

    from replaygate.api import db as dbm

    try:
        con = dbm.connect(db, read_only=True)
    except (ReplaygateError, duckdb.Error):
        return []  # busy or unreadable: the write below says so
    try:
        return rolloutlog.starts_in_db(con)
    finally:
        con.close()


def _documents(path: str) -> list[Any]:
    """The documents of a `kubectl get -o json` or `-o yaml` file (YAML: several
    documents, safe loading; JSON is YAML, but read as JSON first for its messages)."""
    import yaml

    try:
        with open(path, "rb") as fh:
            raw = fh.read()
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReplaygateError(
            f"{path}: not a JSON or YAML document ({type(exc).__name__})"
        ) from None
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise ReplaygateError(f"{path}: not a JSON or YAML document{where}") from None


@click.command(context_settings=CONTEXT)
@db_option
@config_option
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default; 0.0.0.0 inside a pod).",
)
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
def serve(db: str, config_path: str | None, host: str, port: int) -> None:
    """Answer gate decisions over HTTP (read-only), for Argo Rollouts and Flagger.

    \b
    GET /gates/{release}/{stage} -> {"decision", "stage", "release", "reasons", ...,
    "stages": [the full evaluation]}, with status 200 PROCEED, 409 HOLD, 412 ROLLBACK
    (404 a stage not in the rollout log, 503 before the first analysis is read). `-` as
    release means no release (as everywhere), `_` as stage the release's newest stage.
    ?ok=any answers 200 whatever the decision, and 200 HOLD ("stage not in the rollout
    log") for an unknown stage (Argo Rollouts `web` metrics: judge $.decision);
    ?ok=rollback answers 200 only on ROLLBACK (a Flagger rollback webhook). POST is
    answered like GET (Flagger webhooks POST).

    \b
    Answers come from the last completed analysis, which a background thread refreshes
    when the data changes (an import or an analysis in progress never delays an
    answer); the evaluations answered are appended to the decision history.

    \b
    Examples:
      replaygate serve --db fleet.duckdb
      curl -s localhost:8765/gates/v2.4.0/canary-5pct
      replaygate serve --db /data/fleet.duckdb --host 0.0.0.0 --port 8765
    """
    from replaygate.api import resolve_config

    from .serve import make_server

    # Without --config: the configuration the database was last analysed with.
    resolved = resolve_config(db, config_path)
    server = make_server(db, resolved.config, host, port)
    h, p = server.listening
    click.echo(f"replaygate serve on http://{h}:{p}/gates/{{release}}/{{stage}}", err=True)
    click.echo(f"configuration: {resolved.note}", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
