"""The library's facade: the one module through which the CLI (`replaygate/`) and the
dashboard (`dashboard/`) reach the library below them (the core, ingest, the analysis
and the audit trail). It opens a database with current findings, analyses it, lists
findings, evaluates and shows gates and records decisions; and re-exports, by name, what
the two need of the rest: the version, errors and configuration, the load and the data's
status, the outcome enums, the filter model, the dashboard's named queries and the gates
under a filter, output escaping, the field guide and source matrix, and the audit trail
(decision history, attestation, guarded outputs, the report document). A few namespaces
whose names mean something only with them (`db.connect`, `lock.acquire`,
`rolloutlog.record`) are re-exported whole. tests/test_floorplan.py holds `replaygate/`
and `dashboard/` to importing nothing else of the library; a new need is one re-export or
thin function here."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import duckdb

from replaygate import __version__
from replaygate.audit import attest, decisionlog, outputs, reportdoc
from replaygate.core import config as cfg
from replaygate.core import db, lock
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES
from replaygate.core.errors import ReplaygateError
from replaygate.core.timefmt import parse as parse_iso
from replaygate.ingest import cdobjects, rolloutlog, staging
from replaygate.ingest.adapters import check_sources
from replaygate.ingest.adapters import sources as proxy_sources
from replaygate.ingest.capabilities import LABELS as CAPABILITY_LABELS
from replaygate.ingest.load import FileResult, IngestReport, ingest
from replaygate.ingest.readers import formats_help
from replaygate.ingest.status import status as data_status
from replaygate.queries import (
    catalog,
    escape,
    fieldguide,
    freshness,
    gatedefs,
    named,
    runner,
    sources,
)
from replaygate.queries.escape import (
    html_text,
    md_code,
    md_code_block,
    md_text,
    one_line,
    plot_text,
    slack_text,
    terminal,
    xml_text,
)
from replaygate.queries.filters import Filters
from replaygate.queries.gatedefs import BY_ID, GATES, GateDef, effective_settings
from replaygate.queries.gates import (
    NOT_EXERCISED,
    display_bound,
    display_status,
    display_threshold,
    display_value,
    evaluate,
    resolve_stage,
    title,
)
from replaygate.queries.gates import document as gates_doc
from replaygate.queries.gates import under_filter as gates_under_filter
from replaygate.queries.outcome import Decision, Severity, Status
from replaygate.queries.params import allowlist_note
from replaygate.queries.runner import (
    UNIT_COLUMNS,
    analyse,
    coverage_doc,
    findings_doc,
    is_current,
    list_findings,
    stamp,
)

__all__ = [
    "CAPABILITY_LABELS",
    "RECORD_TYPES",
    "Config",
    "FileResult",
    "IngestReport",
    "ReplaygateError",
    "__version__",
    "cdobjects",
    "data_status",
    "db",
    "formats_help",
    "ingest",
    "lock",
    "parse_iso",
    "proxy_sources",
    "rolloutlog",
    "staging",
    "BY_ID",
    "GATES",
    "NOT_EXERCISED",
    "UNIT_COLUMNS",
    "Decision",
    "Filters",
    "GateDef",
    "Resolved",
    "Severity",
    "Status",
    "allowlist_note",
    "analyse",
    "attest",
    "coverage_doc",
    "detector_names",
    "detector_pages",
    "display_bound",
    "display_status",
    "display_threshold",
    "display_value",
    "effective_settings",
    "escape",
    "evaluate",
    "fieldguide",
    "findings_doc",
    "freshness_of",
    "gates_doc",
    "gates_under_filter",
    "decisionlog",
    "html_text",
    "is_current",
    "list_findings",
    "load_config",
    "md_code",
    "md_code_block",
    "md_text",
    "named",
    "one_line",
    "open_analysed",
    "outputs",
    "plot_text",
    "record_decisions",
    "refresh_history_findings",
    "reportdoc",
    "resolve_config",
    "resolve_stage",
    "slack_text",
    "sources",
    "stale_sources",
    "stamp",
    "terminal",
    "title",
    "xml_text",
]


def detector_pages() -> dict[str, str]:
    """Each detector's dashboard page (its SQL header's `-- page:`; "" for the Findings
    page alone), by name."""
    return {n: q.header.text("page") for n, q in catalog.detectors().items()}


def detector_names() -> list[str]:
    """Every detector, by name (the files of queries/sql/detectors)."""
    return sorted(catalog.detectors())


def freshness_of(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    """The data's newest plausible time and the warnings of queries/freshness.py (sources
    behind the others, records dated after the last ingest)."""
    src = freshness.sources(con)
    return {"as_of": freshness.as_of(src), "warnings": freshness.warnings(src)}


def stale_sources(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Sources far behind the others, as "event log 3.6 days"."""
    return [
        f"{e['source']} {freshness.show_seconds(e['behind_seconds'])}"
        for e in freshness.stale(freshness.sources(con))
    ]


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """The configuration, with the names it gives checked against their declarations
    above the configuration: proxies and their keys against the adapters, gates against
    the gates' SQL headers."""
    conf = cfg.load(path)
    check_sources(conf)
    gatedefs.min_samples(conf)
    return conf


@dataclass(frozen=True)
class Resolved:
    """The configuration a command uses, and a line saying which it is."""

    config: Config
    origin: str  # "given", "stored", "file" (./replaygate.toml) or "defaults"
    note: str


def resolve_config(
    db_path: str | None,
    path: str | os.PathLike[str] | None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> Resolved:
    """The configuration for a command on a database: the one given (--config), else the
    one its last analysis ran with, else ./replaygate.toml, else the built-in defaults.
    Reading the stored one means a reader without --config shows what the analysis
    showed, whatever folder it runs in. `con`: the command's own connection to the
    database, read instead of opening it again."""
    if path is not None:
        conf = load_config(path)
        return Resolved(conf, "given", f"{conf.source} (--config, {_short(conf)})")
    stored = _stored(db_path, con) if db_path else None
    local = load_config(None)
    if stored is not None:
        note = f"{stored.source}, as stored with the analysis ({_short(stored)})"
        if local.source != "built-in defaults" and local.digest() != stored.digest():
            note += f"; {local.source} differs: pass --config {local.source} to use it"
        return Resolved(stored, "stored", note)
    origin = "defaults" if local.source == "built-in defaults" else "file"
    return Resolved(local, origin, f"{local.source} ({_short(local)})")


def _short(conf: Config) -> str:
    return f"sha256 {conf.digest()[:12]}"


def _stored(db_path: str, open_con: duckdb.DuckDBPyConnection | None = None) -> Config | None:
    if open_con is not None:
        conf = runner.stored_config(open_con)
    else:
        if not os.path.exists(db_path):
            return None
        try:
            con = db.connect(db_path, read_only=True)
        except (ReplaygateError, duckdb.Error):
            # Busy (a writer holds it) or not a database yet: the command itself says so.
            return None
        try:
            conf = runner.stored_config(con)
        finally:
            con.close()
    if conf is not None:
        gatedefs.min_samples(conf)
    return conf


def open_analysed(
    path: str, config: Config, note: Callable[[str], None] | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection whose findings are current for this data and configuration (`note`:
    as `analyse` takes it)."""
    con = db.connect(path, read_only=True)
    try:
        current = runner.is_current(con, config)
    except duckdb.Error:
        current = False
    if current:
        return con
    con.close()
    try:
        con = db.connect(path)
    except ReplaygateError as exc:
        raise ReplaygateError(
            f"{exc}; findings are out of date and the database is busy (another process "
            "holds it open for writing)"
        ) from None
    runner.analyse(con, config, note=note)
    return con


def record_decisions(
    con: duckdb.DuckDBPyConnection, doc: dict[str, Any], config: Config, source: str, **kw: Any
) -> list[dict[str, Any]]:
    """Append a gates document's decisions to the decision history (audit/decisionlog.py).
    `con` is the connection `doc` was evaluated on; `source` names the caller (gates,
    watch, serve); `only_changes=True` skips stages whose evaluation is unchanged."""
    return decisionlog.record_evaluation(con, doc, config, source, **kw)


def refresh_history_findings(path: str, config: Config) -> bool:
    """After an append to the history: bring the findings that read it up to date and
    anchor the new head in the database, if it can be written now (else the next
    analysis does; False). Not while `watch` owns the database: its next cycle does."""
    if (lock.holder(path) or {}).get("role") == lock.WATCH:
        return False
    try:
        con = db.connect(path)
    except ReplaygateError:
        return False
    try:
        runner.analyse(con, config)
    finally:
        con.close()
    return True
