"""The `replaygate` command: a thin layer over the ingest / queries / dashboard APIs.

Errors are one line on standard error with exit code 1; `--debug` shows the
traceback. `--json` puts exactly one JSON document on standard output.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import click

from replaygate.api import ReplaygateError, Severity, formats_help
from replaygate.api import db as dbm

from .api import __version__
from .duration import Duration
from .options import (
    CONTEXT,
    LateChoice,
    config_option,
    db_option,
    emit_json,
    engine_options,
    json_option,
    load_config,
    progress_note,
    say,
    say_config,
    source_option,
)

if TYPE_CHECKING:
    from pathlib import Path

    import duckdb

    from replaygate.api import Config


@click.group(context_settings=CONTEXT)
# Read from argv by main() (errors raised before click parses must honour it too).
@click.option("--debug", is_flag=True, expose_value=False, help="Show tracebacks on errors.")
@click.version_option(__version__, prog_name="replaygate")
def cli() -> None:
    """Audit MCP Streamable HTTP replay, resumption and idempotency; gate rollouts.

    \b
    Typical use:
      replaygate ingest logs/ --db fleet.duckdb
      replaygate findings --db fleet.duckdb --severity critical
      replaygate gates --db fleet.duckdb --json      # exit 0 PROCEED, 2 HOLD, 3 ROLLBACK
      replaygate dashboard --db fleet.duckdb

    {memory}
    """


# The memory rule in words is core/db.py's (`memory_help`), as the rule itself.
cli.help = (cli.help or "").replace("{memory}", dbm.memory_help())


@cli.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@db_option
@config_option
@json_option
@click.option("--strict", is_flag=True, help="Exit 1 if any row was quarantined.")
@click.option(
    "--no-analyse",
    "no_analyse",
    is_flag=True,
    help="Only load; run the detectors later (findings, gates, dashboard do).",
)
@source_option("How to read proxy access logs (auto: by each line's shape).")
@engine_options
def ingest(
    paths: tuple[str, ...],
    db: str,
    config_path: str | None,
    as_json: bool,
    strict: bool,
    no_analyse: bool,
    source: str,
    engine: str,
    lake: str | None,
    spark_master: str | None,
) -> None:
    """Load ledgers and logs (files or folders) into the database.

    \b
    {formats}.
    Re-ingesting the same content adds nothing; a changed file replaces its rows.
    Malformed rows go to the quarantine table with file, line and reason.

    \b
    Examples:
      replaygate ingest sample_data/
      replaygate ingest /var/log/mcp/*.jsonl.gz proxy.csv --db fleet.duckdb --strict
      replaygate ingest /var/log/caddy/access.log --source caddy
      replaygate ingest logs/ --engine spark --lake s3a://lake/mcp
    """
    if engine == "spark":
        _ingest_spark(paths, config_path, as_json, strict, source, lake, spark_master)
        return
    from replaygate.api import ingest as run_ingest

    from .progress import RichProgress

    con = None
    if config_path is None and os.path.exists(db):
        # The configuration its last analysis stored is read from the connection the
        # load uses, not from one opened for it alone (each open costs about 0.03 CPU s,
        # paid by every batch of a load in batches). A configuration that fails to load
        # still fails before a new database is made.
        con = dbm.connect(db, role="ingest")
    try:
        conf = load_config(config_path, db, con)
    except BaseException:
        if con is not None:
            dbm.close(con)
        raise
    if con is None:
        con = dbm.connect(db, role="ingest")
    report = run_ingest(con, list(paths), conf, progress=RichProgress(), source=source)
    analysed = None if no_analyse else _analyse(con, conf)
    dbm.close(con)
    if as_json:
        emit_json({**report.as_dict(), "findings": analysed})
    else:
        # rich (the tables) only for the text summary.
        from .render import ingest_summary

        ingest_summary(report, analysed)
    for w in report.warnings:
        say(f"warning: {w}", err=True)
    if strict and report.quarantined:
        raise ReplaygateError(f"{report.quarantined} rows quarantined (--strict)")
    unreadable = [f for f in report.files if f.status == "unreadable"]
    if unreadable:
        # The other files are loaded; the exit code still says a file was lost.
        raise ReplaygateError(
            f"{len(unreadable)} of {len(report.files)} files could not be read "
            f"(first: {unreadable[0].path}: {unreadable[0].note or 'unreadable'})"
        )
    # Said only when the ingest succeeded, so that an error stays one line.
    _allowlist_note(conf)


def _ingest_spark(
    paths: tuple[str, ...],
    config_path: str | None,
    as_json: bool,
    strict: bool,
    source: str,
    lake: str | None,
    spark_master: str | None,
) -> None:
    """`ingest --engine spark`: the files validated on Spark into the lake (no database:
    `findings --engine spark --lake DIR --db FILE` analyses the lake)."""
    if lake is None:
        raise ReplaygateError("--engine spark needs --lake DIR (where the lake is written)")
    if source not in ("auto", "contract"):
        raise ReplaygateError(
            f"--engine spark reads contract records only, not --source {source} "
            "(docs/spark.md): ingest such logs with --engine duckdb"
        )
    # Only here is Spark (and pyspark) loaded: the default engine never needs it.
    from replaygate.spark import lakeload as spark_ingest
    from replaygate.spark import runtime

    conf = load_config(config_path)
    summary = spark_ingest.ingest(runtime.get(spark_master), list(paths), lake, conf)
    if as_json:
        emit_json(summary)
    else:
        rows = ", ".join(f"{n:,} {t}" for t, n in summary["rows"].items()) or "no rows"
        say(f"{summary['files']} files into {lake}: {rows}; {summary['quarantined']:,} quarantined")
        for f in summary["unreadable"]:
            say(f"unreadable: {f['path']}: {f['note']}")
    for w in summary["warnings"]:
        say(f"warning: {w}", err=True)
    if strict and summary["quarantined"]:
        raise ReplaygateError(f"{summary['quarantined']} rows quarantined (--strict)")
    if summary["unreadable"]:
        first = summary["unreadable"][0]
        raise ReplaygateError(
            f"{len(summary['unreadable'])} files could not be read "
            f"(first: {first['path']}: {first['note']})"
        )


# The formats the help names are the registered ones (ingest/readers.py).
ingest.help = (ingest.help or "").replace("{formats}", formats_help())


def _allowlist_note(conf: Config) -> None:
    from replaygate.api import allowlist_note

    note = allowlist_note(conf)
    if note:
        say(f"note: {note}", err=True)


def _analyse(con: duckdb.DuckDBPyConnection, conf: Config) -> Mapping[str, Any]:
    """Refresh findings after an ingest."""
    from replaygate import api

    return api.analyse(con, conf, note=progress_note)


@cli.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, type=click.Path())
@db_option
@config_option
@click.option(
    "--every",
    type=Duration(),
    default="15s",
    show_default=True,
    help="Time between cycles (15s, 1m, ...).",
)
@click.option(
    "--notify",
    "notify",
    multiple=True,
    metavar="URL",
    help="POST decision changes here as JSON (Slack-compatible); http(s) only; repeatable.",
)
@click.option(
    "--dashboard-url",
    default="http://127.0.0.1:8501",
    show_default=True,
    help="Where the dashboard runs, for the links in notifications.",
)
@source_option("How to read proxy access logs.")
@click.option("--cycles", type=click.IntRange(1), help="Stop after this many cycles.")
@click.option(
    "--probe",
    "probe_url",
    metavar="URL",
    help="Also run `replaygate probe URL` (the probe extra) every --probe-every, and ingest "
    "what it writes.",
)
@click.option(
    "--probe-every",
    type=Duration(),
    default="1m",
    show_default=True,
    help="How often to start a probe run (one at a time).",
)
@click.option(
    "--probe-out",
    type=click.Path(file_okay=False),
    help="Where the probe writes (default: a folder `NAME.probes` beside the database).",
)
@click.option(
    "--probe-args",
    metavar="ARGS",
    default="",
    help="The probe's other options, as on its command line "
    '(e.g. "--tool count --arguments \'{"n": 6}\' --stage canary-5pct").',
)
@click.option(
    "--check",
    is_flag=True,
    help="Say whether a watch is running on --db and keeping up (exit 0) or not (exit 1).",
)
def watch(
    paths: tuple[str, ...],
    db: str,
    config_path: str | None,
    every: float,
    notify: tuple[str, ...],
    dashboard_url: str,
    source: str,
    cycles: int | None,
    probe_url: str | None,
    probe_every: float,
    probe_out: str | None,
    probe_args: str,
    check: bool,
) -> None:
    """Ingest what is new, analyse and gate, again and again: one line per cycle.

    \b
    Grown files are read from where the last cycle stopped; rotated and compressed
    logs are recognised by content. Each cycle prints new rows per type, findings
    added and resolved, the decision of each open stage and the data lag; decision
    changes are printed and, with --notify, POSTed. Readers (dashboard, gates) see a
    copy published after every cycle that changed something. Stop with Ctrl-C or
    SIGTERM: a cycle in progress is abandoned at once (nothing of it is published);
    queued notifications are delivered within 10 s, or each is logged.

    \b
    --probe URL runs the synthetic client (`replaygate probe`) against the endpoint every
    --probe-every, in a process of its own that never holds up a cycle, and ingests its
    evidence with the rest; one line per finished probe run.

    \b
    --check is for supervisors: it exits 0 while a watch holds the database and its
    heartbeat (NAME.watch.json) is fresh, and 1 with the reason otherwise (killed,
    stopped, hung, or its last cycle failed).

    \b
    Examples:
      replaygate watch /var/log/mcp/ /var/log/caddy/ --db fleet.duckdb
      replaygate watch logs/ --every 1m --notify https://hooks.slack.com/services/...
      replaygate watch --check --db fleet.duckdb || restart-watch
    """
    from replaygate.api import terminal

    from . import watch as w

    if check:
        if paths or notify or cycles:
            raise click.UsageError("--check takes only --db")
        alive, line = w.check(db)
        click.echo(terminal(line))
        sys.exit(0 if alive else 1)
    if not paths:
        raise click.UsageError("give the files or folders to watch (or --check)")
    probe = None
    if probe_url:
        import shlex

        try:
            extra = shlex.split(probe_args)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--probe-args") from None
        taken = sorted({a.split("=")[0] for a in extra} & {"--out", "--json", "--config"})
        if taken:
            raise click.BadParameter(
                f"{', '.join(taken)} is set by watch", param_hint="--probe-args"
            )
        from pathlib import Path

        out = Path(probe_out) if probe_out else Path(db).with_name(Path(db).name + ".probes")
        probe = w.ProbeSpec(probe_url, out, probe_every, extra, config_path)
    elif probe_out or probe_args:
        raise click.UsageError("--probe-out and --probe-args go with --probe URL")
    w.main(paths, db, config_path, every, notify, dashboard_url, source, cycles, probe)


@cli.command(context_settings=CONTEXT)
@db_option
@config_option
@json_option
def status(db: str, config_path: str | None, as_json: bool) -> None:
    """Show what the database holds: rows and time span per record type,
    rollout stages, quarantine summary.

    \b
    Example:
      replaygate status --db fleet.duckdb --json
    """
    from replaygate import api
    from replaygate.api import data_status as get_status

    from .render import status_table

    # Resolved before the connection below is opened: the stored configuration is read
    # on a connection of its own, which a second one in this process can refuse.
    conf = load_config(config_path, db)
    con = dbm.connect(db, read_only=True)
    doc = get_status(con)
    # Whether the stored findings are those of this data and this configuration.
    doc["configuration"] = {
        "source": conf.source,
        "sha256": conf.digest(),
        "findings_current": api.is_current(con, conf),
    }
    if as_json:
        emit_json(doc)
    else:
        status_table(doc)
        if not doc["configuration"]["findings_current"]:
            click.echo(
                "findings are not current for this data and configuration "
                "(`replaygate findings` or `gates` brings them up to date)",
                err=True,
            )
    say_config()


def _sim_formats() -> tuple[str, ...]:
    """The simulator's output formats (sim/writers.py), for `simulate --format`."""
    from replaygate.sim.writers import LAYOUTS

    return tuple(LAYOUTS)


@cli.command(context_settings=CONTEXT)
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--sessions", type=click.IntRange(1), help="Number of sessions (default 400).")
@click.option("--events", type=click.IntRange(1), help="Aim for about this many events.")
@click.option(
    "--faults",
    default="all",
    show_default=True,
    help="all, none, or fault ids separated by commas.",
)
@click.option(
    "--format",
    "fmt",
    default="mixed",
    show_default=True,
    type=LateChoice(_sim_formats),
)
@click.option("--list-faults", is_flag=True, help="List the fault catalogue and exit.")
@click.option(
    "--server-only",
    is_flag=True,
    help="Only what an operator of servers and proxies has: no client inbox.",
)
@click.option(
    "--engine",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "python", "vector"]),
    help="vector: ordinary traffic written column-wise (auto: vector for large fleets).",
)
@config_option
@json_option
def simulate(
    out: str,
    seed: int,
    sessions: int | None,
    events: int | None,
    faults: str,
    fmt: str,
    list_faults: bool,
    server_only: bool,
    engine: str,
    config_path: str | None,
    as_json: bool,
) -> None:
    """Write a synthetic MCP fleet's ledgers and logs plus truth.json.

    \b
    The same seed gives byte-identical files. truth.json lists every injected
    fault, the findings it must produce and the decision expected per stage.
    The HMAC key comes from the configured env var (default REPLAYGATE_HMAC_KEY),
    else the demo key "replaygate-demo-key".

    \b
    Examples:
      replaygate simulate --out fleet/ --seed 3
      replaygate simulate --out big/ --events 1000000 --faults none --format jsonl
      replaygate simulate --out servers/ --server-only
      replaygate simulate --out huge/ --events 100000000 --format parquet
    """
    from replaygate.sim import simulate as run
    from replaygate.sim.faults import CATALOGUE

    if list_faults:
        for fid, fl in CATALOGUE.items():
            click.echo(f"{fid:32} seed {fl.seed}  {fl.description}")
        return
    if sessions and events:
        raise click.UsageError("give --sessions or --events, not both")
    summary = run(
        out,
        seed=seed,
        sessions=sessions,
        events=events,
        faults=faults,
        fmt=fmt,
        config=load_config(config_path),
        server_only=server_only,
        engine=engine,
    )
    if as_json:
        emit_json(summary)
    else:
        click.echo(
            f"wrote {summary['events']:,} events from {summary['sessions']:,} sessions "
            f"with {summary['faults']} faults to {summary['out']} (truth.json)"
        )


@cli.command(context_settings=CONTEXT)
@db_option
@config_option
@json_option
@click.option(
    "--detector", "detectors", multiple=True, metavar="ID", help="Only this detector (repeatable)."
)
@click.option("--stage", metavar="NAME", help="Only findings of this rollout stage.")
@click.option(
    "--severity",
    type=click.Choice([str(s) for s in Severity]),
    help="This severity or worse.",
)
@click.option(
    "--limit",
    type=click.IntRange(1),
    default=None,
    help="At most this many rows in the table (not with --json).",
)
@engine_options
def findings(
    db: str,
    config_path: str | None,
    as_json: bool,
    detectors: tuple[str, ...],
    stage: str | None,
    severity: str | None,
    limit: int | None,
    engine: str,
    lake: str | None,
    spark_master: str | None,
) -> None:
    """Run the detectors and list what silently went wrong.

    \b
    Examples:
      replaygate findings --severity critical
      replaygate findings --detector replay_gap --detector silent_truncation --json
      replaygate findings --stage resume-read-25pct
      replaygate findings --engine spark --lake s3a://lake/mcp --db fleet.duckdb
    """
    from replaygate import api

    from .render import findings_table

    unknown = [d for d in detectors if d not in api.detector_names()]
    if unknown:
        raise ReplaygateError(f"unknown detector {unknown[0]!r} (see docs/detectors.md)")
    conf = load_config(config_path, db)
    if engine == "spark":
        if lake is None:
            raise ReplaygateError("--engine spark needs --lake DIR (the lake to analyse)")
        # Only here is Spark (and pyspark) loaded: the default engine never needs it.
        from replaygate.spark import analyse, runtime

        analyse.analyse(runtime.get(spark_master), lake, db, conf)
    con = api.open_analysed(db, conf, note=progress_note)
    if as_json:
        emit_json(api.findings_doc(con, detectors=detectors, stage=stage, severity=severity))
    else:
        rows = api.list_findings(con, detectors=detectors, stage=stage, severity=severity)
        findings_table(rows, limit or 50, api.coverage_doc(con))
    say_config()


@cli.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, type=click.Path())
@db_option
@config_option
@json_option
@click.option("--stage", metavar="NAME", help="Gate this stage (default: the newest).")
@click.option("--release", metavar="R", help="The stage of this release (default: any).")
@click.option("--all-stages", is_flag=True, help="Gate every stage; exit with the worst.")
@click.option(
    "--wait",
    "wait_for",
    type=Duration(),
    metavar="DURATION",
    help="Evaluate again until PROCEED or ROLLBACK, at most this long (then HOLD).",
)
@click.option(
    "--every",
    type=Duration(),
    default="30s",
    show_default=True,
    metavar="DURATION",
    help="Time between evaluations with --wait.",
)
@click.option(
    "--junit",
    "junit_file",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Also write the evaluation as JUnit XML.",
)
@source_option("How to read proxy access logs among PATHS.")
@click.option(
    "--record",
    is_flag=True,
    help="Append the decisions to the decision history (see `replaygate history`).",
)
def gates(
    paths: tuple[str, ...],
    db: str,
    config_path: str | None,
    as_json: bool,
    stage: str | None,
    release: str | None,
    all_stages: bool,
    wait_for: float | None,
    every: float,
    junit_file: str | None,
    source: str,
    record: bool,
) -> None:
    """Evaluate the release gates and decide PROCEED, HOLD or ROLLBACK.

    \b
    Exit codes: 0 PROCEED, 2 HOLD, 3 ROLLBACK (with --all-stages: the worst), 1 error.
    With PATHS, what is new in them is ingested before each evaluation. With --wait,
    the stage is evaluated every --every until it is PROCEED or ROLLBACK; when the time
    is up it is HOLD (exit 2).

    \b
    Examples:
      replaygate gates                      # the newest stage
      replaygate gates --stage write-10pct --json
      replaygate gates --release v2.4.0 --stage canary-5pct --junit gates.xml
      replaygate gates /var/log/mcp/ --release v2.4.0 --stage canary-5pct --wait 30m --every 1m
      replaygate gates --all-stages || echo "not safe to proceed"
      replaygate gates --stage write-10pct --record   # kept for the audit trail
    """
    from replaygate import api
    from replaygate.api import Decision

    from . import gatewait
    from .render import gates_report

    if (stage or release) and all_stages:
        raise click.UsageError("give --stage/--release or --all-stages, not both")
    if wait_for and all_stages:
        raise click.UsageError("--wait gates one stage: give --stage (and --release)")
    conf = load_config(config_path, db)
    if wait_for:
        doc = gatewait.wait(db, conf, stage, release, list(paths), wait_for, every, source)
    else:
        if paths:
            gatewait.ingest_paths(db, list(paths), conf, source)
        con = api.open_analysed(db, conf, note=progress_note)
        key = api.resolve_stage(con, stage, release)
        doc = api.gates_doc(con, conf, stage=key, all_stages=all_stages)
    if not doc["stages"]:
        # Nothing to gate is a setup problem, not a HOLD a pipeline would wait on.
        raise ReplaygateError(
            "no rollout log in the database, so no stage to gate: record stages with "
            "`replaygate rollout start --release R --stage S --db DB` or ingest a rollout "
            'log (docs/ci-integration.md, "Writing the rollout log")'
        )
    # Said once the gates are evaluated, so that an error stays one line.
    _allowlist_note(conf)
    if junit_file:
        from replaygate.api import outputs

        from .junit import render

        # The connection that evaluated, else (after --wait) one to read the inputs.
        known = con if not wait_for else api.open_analysed(db, conf, note=progress_note)
        given = [(p, outputs.INPUT) for p in paths]
        guard = outputs.for_database(db, known, conf.source, given)
        if wait_for:
            known.close()
        guard.write_text(junit_file, render(doc))
    if record:
        if not wait_for:
            con.close()  # one connection at a time: the refresh below may write
        rec = api.open_analysed(db, conf, note=progress_note)
        api.record_decisions(rec, doc, conf, "gates")
        rec.close()
        api.refresh_history_findings(db, conf)
    if as_json:
        emit_json(doc)
    else:
        gates_report(doc)
    say_config()
    decisions = [s["decision"] for s in doc["stages"]]
    sys.exit(Decision.worst(decisions).exit_code)


@cli.command(context_settings=CONTEXT)
@db_option
@config_option
@click.option("--port", default=8501, show_default=True, type=int)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (loopback by default).",
)
def dashboard(db: str, config_path: str | None, port: int, host: str) -> None:
    """Start the Streamlit dashboard on the database.

    \b
    Findings are refreshed first if the data or configuration changed; the
    dashboard itself only reads.

    \b
    Examples:
      replaygate dashboard --db fleet.duckdb
      replaygate dashboard --db fleet.duckdb --config replaygate.toml --port 8600
    """
    import importlib.util
    import os
    from pathlib import Path

    from replaygate import api

    _check_port_free(host, port)
    conf = load_config(config_path, db)
    con = dbm.connect(db)
    api.analyse(con, conf, note=progress_note)
    con.close()
    say_config()
    # Located without importing the package: importing it would pull in streamlit here.
    spec = importlib.util.find_spec("replaygate.dashboard")
    assert spec is not None and spec.origin is not None
    app = Path(spec.origin).parent / "app.py"
    env = dict(os.environ, REPLAYGATE_DB=str(Path(db).resolve()))
    # Without --config the app reads the configuration stored with the analysis above.
    env.pop("REPLAYGATE_CONFIG", None)
    if config_path:
        env["REPLAYGATE_CONFIG"] = str(Path(config_path).resolve())
    click.echo(f"replaygate dashboard on http://{host}:{port} (Ctrl-C to stop)", err=True)
    cmd = [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app),
        "--server.port",
        str(port),
        "--server.address",
        host,
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        # An operator's dashboard: no Deploy button or developer menu.
        "--client.toolbarMode",
        "viewer",
    ]
    # Become the Streamlit process, so stopping this command stops the server.
    os.execve(sys.executable, cmd, env)


def _check_port_free(host: str, port: int) -> None:
    """One line before anything starts, not Streamlit's message after the URL was printed."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ReplaygateError(f"cannot listen on {host}: {exc.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        # As a server binds: a port left in TIME_WAIT by a stopped dashboard is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            raise ReplaygateError(
                f"port {port} on {host} is not available ({exc.strerror}); "
                "choose another with --port N"
            ) from None


@cli.command(context_settings=CONTEXT)
@db_option
@config_option
@click.option("--stage", metavar="NAME", help="Stage to report on (default: the newest).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["html", "md", "json", "pdf"]),
    default="html",
    show_default=True,
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Report file.")
@click.option(
    "--bundle",
    type=click.Path(file_okay=False),
    help="Also write an evidence bundle into this folder.",
)
@click.option(
    "--verify",
    "verify_dir",
    type=click.Path(file_okay=False, exists=True),
    help="Check a bundle's signature by a trusted key and every file against its "
    "statement, and exit.",
)
@click.option(
    "--pdf",
    "bundle_pdf",
    is_flag=True,
    help="With --bundle: also put the report as PDF in it (printed by headless chromium).",
)
@click.option(
    "--sign-key",
    metavar="KEY",
    help="Sign the bundle's statement with this Ed25519 private key (PEM or OpenSSH).",
)
@click.option(
    "--public-key",
    metavar="PUB",
    multiple=True,
    help="With --verify: a trusted signer's Ed25519 public key, or a file of several "
    "(repeatable; default: the files $REPLAYGATE_TRUSTED_KEYS names).",
)
@click.option(
    "--inputs",
    "inputs",
    multiple=True,
    type=click.Path(exists=True),
    metavar="PATH",
    help="With --verify: look for the recorded inputs here, by content (repeatable).",
)
def report(
    db: str,
    config_path: str | None,
    stage: str | None,
    fmt: str,
    output: str | None,
    bundle: str | None,
    bundle_pdf: bool,
    verify_dir: str | None,
    sign_key: str | None,
    public_key: tuple[str, ...],
    inputs: tuple[str, ...],
) -> None:
    """Write an audit report: scope, inputs, configuration, methodology, gates,
    decision, rollback verification and findings, with the command that reproduces it.

    \b
    HTML is one self-contained file (charts inlined, no network) that prints cleanly;
    PDF is printed from it by headless chromium. The same database and configuration
    give byte-identical Markdown and JSON. --verify accepts only a bundle signed by a
    trusted key (--public-key, or $REPLAYGATE_TRUSTED_KEYS): never an unsigned one,
    and never on the strength of the signer.pub inside it.

    \b
    Examples:
      replaygate report --format html -o audit.html
      replaygate report --stage write-10pct --format md -o ticket.md
      replaygate report --format pdf -o audit.pdf
      replaygate report -o audit.html --bundle evidence/ --pdf --sign-key ci.pem
      replaygate report --verify evidence/ --public-key ci.pub --inputs /var/log/mcp
    """
    from pathlib import Path

    from replaygate import api
    from replaygate.api import outputs
    from replaygate.api import reportdoc as rep
    from replaygate.dashboard import report as render

    if verify_dir:
        _verify_bundle(Path(verify_dir), public_key, inputs)
        return
    if not output and not bundle:
        raise click.UsageError("give -o FILE, --bundle DIR, or both")
    if (public_key or inputs) and not verify_dir:
        raise click.UsageError("--public-key and --inputs go with --verify")
    if sign_key and not bundle:
        raise click.UsageError("--sign-key signs a --bundle")
    if bundle_pdf and not bundle:
        raise click.UsageError("--pdf puts a PDF in a --bundle (a PDF alone: --format pdf)")
    conf = load_config(config_path, db)
    con = api.open_analysed(db, conf, note=progress_note)
    doc = rep.build(con, conf, stage, db_path=db, config_path=config_path)
    if output:
        guard = outputs.for_database(db, con, conf.source)
        render.write(doc, fmt, Path(output), guard)
        say(f"wrote {output} ({doc['scope']['stage']}: {doc['decision']})", err=True)
    if bundle:
        from replaygate.dashboard.bundle import bundle as write_bundle

        files = write_bundle(
            doc, con, conf, Path(bundle), sign_key=sign_key, db_path=db, pdf=bundle_pdf
        )
        say(f"wrote bundle {bundle}: " + ", ".join(files), err=True)
        if not sign_key:
            say(
                "note: the bundle is not signed, so `report --verify` will not accept it; "
                "sign it with --sign-key",
                err=True,
            )
    say_config()


def _verify_bundle(folder: Path, public_key: tuple[str, ...], inputs: tuple[str, ...]) -> None:
    """`report --verify`: reads only files inside the bundle (and the --inputs given)."""
    from replaygate.api import attest

    verdict = attest.verify(folder, public_key=public_key, inputs=list(inputs))
    for note in verdict.notes:
        say(note, err=True)
    for item in verdict.inputs:
        if item["status"] != "not checked":
            say(f"input {item['name']}: {item['status']}", err=True)
    for problem in verdict.problems:
        say(problem, err=True)
    if verdict.problems:
        raise ReplaygateError(f"bundle does not verify: {verdict.problems[0]}")
    click.echo(f"bundle verified: {verdict.files} files match the statement")


def _register_audit_commands() -> None:
    from .audit_cli import COMMANDS

    for command in COMMANDS:
        cli.add_command(command)


_register_audit_commands()


from .probe_cli import probe  # noqa: E402 - registered after the core commands
from .rollout_cli import rollout, serve  # noqa: E402 - registered after the core commands

cli.add_command(rollout)
cli.add_command(serve)
cli.add_command(probe)


def _debug_requested(argv: list[str]) -> bool:
    return "--debug" in argv


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        rc = cli.main(args=argv, prog_name="replaygate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("replaygate: aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        say(f"replaygate: error: {exc.format_message()}", err=True)
        sys.exit(1)
    except ReplaygateError as exc:
        if _debug_requested(argv):
            raise
        say(f"replaygate: error: {exc}", err=True)
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - the one place that turns crashes into a line
        if _debug_requested(argv):
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        say(f"replaygate: error: {type(exc).__name__}: {msg} (--debug for details)", err=True)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
