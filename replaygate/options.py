"""Options and output shared by the `replaygate` commands (the main group, `rollout`,
`serve`, `audit`): each option spelled once."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    import duckdb

    from replaygate.api import Config

# A click command function, as the option decorators below take and return it.
F = TypeVar("F", bound=Callable[..., Any])

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db",
        metavar="FILE",
        envvar="REPLAYGATE_DB",
        default="replaygate.duckdb",
        show_default=True,
        help="DuckDB file ($REPLAYGATE_DB).",
    )(f)


def config_option(f: F) -> F:
    return click.option(
        "--config",
        "config_path",
        metavar="FILE",
        default=None,
        help="TOML configuration (default: ./replaygate.toml if present).",
    )(f)


def source_option(help: str) -> Callable[[F], F]:
    """`--source`: how proxy access logs are read; the choices are the registered proxies."""
    from replaygate.api import proxy_sources

    return click.option(
        "--source",
        type=click.Choice(proxy_sources()),
        default="auto",
        show_default=True,
        help=help,
    )


class LateChoice(click.Choice[str]):
    """A choice whose values are looked up when first needed (the command runs, or shows
    its help): they are declared in a module that the other commands need not import
    (the simulator's formats import numpy and pyarrow)."""

    def __init__(self, values: Callable[[], Sequence[str]]) -> None:
        self._values = values
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._values())

    @choices.setter
    def choices(self, _: Sequence[str]) -> None:
        """click.Choice sets its values when made; these are looked up instead."""


def engine_options(f: F) -> F:
    """`--engine`, `--lake`, `--spark-master`: where the records are validated and the
    detectors run (docs/spark.md)."""
    f = click.option(
        "--spark-master",
        metavar="URL",
        default=None,
        help="Spark master (e.g. local[4], spark://host:7077); default: spark-submit's, "
        "else local mode.",
    )(f)
    f = click.option(
        "--lake",
        metavar="DIR",
        default=None,
        help="With --engine spark: the Parquet lake (a folder or an s3a://, abfss:// ... URI).",
    )(f)
    return click.option(
        "--engine",
        type=click.Choice(["duckdb", "spark"]),
        default="duckdb",
        show_default=True,
        help="duckdb (embedded) or spark (pip install 'replaygate[spark]'; docs/spark.md).",
    )(f)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="One JSON document on stdout.")(f)


def emit_json(doc: Any) -> None:
    click.echo(json.dumps(doc, indent=2, default=str))


def say(text: object, err: bool = False) -> None:
    """One line of text that may quote data (a stage, a file name, an error that names
    either) for the terminal: no escape sequence, line break, bidi or zero-width
    character from it reaches the reader (queries/escape.py `terminal`)."""
    from replaygate.api import terminal

    click.echo(terminal(text), err=err)


def progress_note(text: str) -> None:
    """One line on standard error while a command works (an analysis under a memory
    limit raised for a large store), apart from its output."""
    say(text, err=True)


def load_config(
    path: str | None, db: str | None = None, con: duckdb.DuckDBPyConnection | None = None
) -> Config:
    """The configuration a command uses: --config, else (with a database) the one its last
    analysis ran with, else ./replaygate.toml, else the defaults. Which one is kept for
    `say_config`, so the command can name it once it has succeeded. `con`: the command's
    connection to the database `db`, if it has one open already."""
    from replaygate.api import resolve_config

    resolved = resolve_config(db, path, con)
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta["replaygate.config"] = resolved.note
    return resolved.config


def say_config() -> None:
    """One line on standard error naming the configuration used (after the output, so
    an error stays the only line of a failed command)."""
    ctx = click.get_current_context(silent=True)
    note = ctx.meta.get("replaygate.config") if ctx is not None else None
    if note:
        say(f"configuration: {note}", err=True)
