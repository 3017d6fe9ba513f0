"""Run the prepare step and the detectors; materialise `findings` and `coverage`.

The findings of one analysis are stamped with the data version and the
configuration digest, so readers know whether they are current.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any, TypedDict, cast

import duckdb

from replaygate.core import config as cfg
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES
from replaygate.core.db import get_meta, limit_memory, one_row, set_meta, transaction
from replaygate.core.errors import ReplaygateError
from replaygate.core.timefmt import iso_ms as _iso

from . import buckets, cannottell, catalog, decisionfile, groups, incremental, named, params
from .outcome import Severity

# The columns that name a finding's unit (its session, stream, event or dispatch), in
# the order they are shown.
UNIT_COLUMNS = (
    "session_hmac",
    "generation",
    "stream_id",
    "event_id",
    "dispatch_id",
    "idempotency_key",
)


class Finding(TypedDict):
    """A finding as `findings` and reports list it: its time as an ISO string, `detail`
    parsed, and the columns of its unit (`UNIT_COLUMNS`, each None where it does not apply)."""

    detector: str
    severity: str
    ts: str | None
    stage: str | None
    session_hmac: str | None
    generation: int | None
    stream_id: str | None
    event_id: str | None
    dispatch_id: str | None
    idempotency_key: str | None
    detail: dict[str, Any]


class CannotTell(TypedDict):
    """Units of a detector it could not judge: `file` cannot show the fact `missing`."""

    file: str
    missing: str
    units: int


class StageCannotTell(CannotTell):
    """The same, of one rollout stage, with the detector named."""

    detector: str


class DetectorCoverage(TypedDict):
    """A detector that ran but could not judge some of its units."""

    status: str
    cannot_tell: list[CannotTell]


# Per detector: its status (`ok`, `not run`, ...), or that with the units it could not judge.
Coverage = dict[str, str | DetectorCoverage]


class FindingsDoc(TypedDict):
    """`findings --json`."""

    findings: list[Finding]
    coverage: Coverage


class Summary(TypedDict):
    total: int
    by_severity: dict[str, int]


FINDINGS_DDL = """
CREATE TABLE IF NOT EXISTS findings (
    detector VARCHAR, severity VARCHAR, ts TIMESTAMPTZ, stage VARCHAR,
    session_hmac VARCHAR, generation BIGINT, stream_id VARCHAR, event_id VARCHAR,
    dispatch_id VARCHAR, idempotency_key VARCHAR, detail JSON
);
CREATE TABLE IF NOT EXISTS coverage (detector VARCHAR, status VARCHAR, rows BIGINT,
                                     seconds DOUBLE);
-- Units a detector could not judge: the file and the fact it cannot show (cannottell.py).
CREATE TABLE IF NOT EXISTS cannot_tell (detector VARCHAR, file VARCHAR, missing VARCHAR,
                                        units BIGINT);
-- The same units by the rollout stage they belong to (the stage rule of macros.sql).
CREATE TABLE IF NOT EXISTS cannot_tell_stages (detector VARCHAR, file VARCHAR,
                                               missing VARCHAR, stage VARCHAR, units BIGINT);
-- Files left out of a detector's input because they cannot show a fact it needs (the
-- gates count only the units its detectors could judge).
CREATE TABLE IF NOT EXISTS blind_files (detector VARCHAR, source VARCHAR, file_id BIGINT);
-- The units counted in cannot_tell because their detector returned them undecided, one row
-- per unit and stage: an incremental analysis replaces those of the sessions it recomputes
-- and counts them all again (a count alone cannot lose the units of one session).
CREATE TABLE IF NOT EXISTS cannot_tell_units (
    detector VARCHAR, stage VARCHAR, missing VARCHAR, file_id BIGINT,
    session_hmac VARCHAR, generation BIGINT, stream_id VARCHAR, event_id VARCHAR,
    dispatch_id VARCHAR, idempotency_key VARCHAR, ts TIMESTAMPTZ
);
"""


def table_counts(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    # (one statement for every table: each is a look-up of its row count)
    counts = one_row(
        con.execute(
            "SELECT " + ", ".join(f"(SELECT count(*) FROM {rt.table})" for rt in RECORD_TYPES)
        )
    )
    return {rt.table: int(n) for rt, n in zip(RECORD_TYPES, counts, strict=True)}


# The configuration the last analysis ran with: its settings, where they came from and
# their digest. Readers use it unless they are given one (replaygate/api.py resolve_config).
CONFIG_META = "analysis_config"


def store_config(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    set_meta(con, CONFIG_META, _config_doc(config))


def _config_doc(config: Config) -> str:
    doc = {"settings": config.as_dict(), "source": config.source, "digest": config.digest()}
    return json.dumps(doc, sort_keys=True)


def stored_config(con: duckdb.DuckDBPyConnection) -> Config | None:
    """The configuration of the last analysis, or None before one (or for a database
    analysed before configurations were kept)."""
    text = get_meta(con, CONFIG_META)
    if not text:
        return None
    doc = json.loads(text)
    conf = cfg.from_mapping(doc["settings"], str(doc["source"]))
    if conf.digest() != doc["digest"]:
        raise ReplaygateError(
            "the configuration stored in the database does not match its digest; pass --config FILE"
        )
    return conf


def stamp(con: duckdb.DuckDBPyConnection, config: Config) -> str:
    return f"{get_meta(con, 'data_version', '0')}:{catalog.basis(config)}"


# Tables that earlier versions stored and the analysis now keeps as views (03_event_index.sql,
# 04_inbox.sql; the gate facts over their narrow tables, facts/gate_facts.sql): a database
# analysed by one of those still holds them.
RETIRED = ("a_event_index", "a_inbox", "a_gate_facts")


def drop_retired(con: duckdb.DuckDBPyConnection) -> None:
    for (t,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' "
        "AND database_name = current_database() AND list_contains($r, table_name)",
        {"r": list(RETIRED)},
    ).fetchall():
        con.execute(f'DROP TABLE "{current_db(con)}".main.{t}')


def prepared_views(con: duckdb.DuckDBPyConnection) -> None:
    """The prepare step's temporary views (a_event_index, a_inbox) in this connection, over
    the tables the last analysis stored, for detectors run without the prepare step."""
    for q in catalog.load("prep"):
        for stmt in q.statements():
            if stmt.upper().startswith("CREATE OR REPLACE TEMP VIEW"):
                con.execute(stmt)


def current_db(con: duckdb.DuckDBPyConnection) -> str:
    return str(one_row(con.execute("SELECT current_database()"))[0])


def is_current(con: duckdb.DuckDBPyConnection, config: Config) -> bool:
    return get_meta(con, "analysis_stamp") == stamp(con, config) and _history_current(con)


def _history_current(con: duckdb.DuckDBPyConnection) -> bool:
    return get_meta(con, "history_stamp", "0") == decisionfile.version(con)


def analyse(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    only: list[str] | None = None,
    force: bool = False,
    note: Callable[[str], None] | None = None,
) -> Summary:
    """Refresh derived tables and findings (skipped when already current). `note` is told
    when the analysis runs under a memory limit raised for a large store (core/db.py)."""
    # A database analysed before the gate facts were kept in a table per kind of unit is
    # not current: gates read them.
    current = get_meta(con, "analysis_stamp") == stamp(con, config) and _has_table(
        con, "a_gate_details"
    )
    if not force and only is None and current and _history_current(con):
        return summary(con)
    values = params.from_config(config)
    counts = table_counts(con)
    # Tables added since the database was last analysed exist before any path writes.
    for stmt in FINDINGS_DDL.split(";"):
        if stmt.strip():
            con.execute(stmt)
    # The shared macros first: a detector's units predicate may call one before any
    # prepare step has run in this database (cannottell.plan). One transaction for them
    # all: each definition committed apart wrote (and synced) the log of its own.
    with transaction(con):
        for q in catalog.load("prep"):
            if q.name == "macros":
                for stmt in q.statements():
                    con.execute(stmt)
    # Detectors may also read what replaygate itself recorded (queries/decisionfile.py).
    history_version = decisionfile.version(con)
    counts["decision_history"] = decisionfile.load_table(con)
    if not force and only is None and current:
        _history_only(con, values, counts, history_version)
        return summary(con)
    # The limit for the events stored now: the connection may have been opened before
    # an ingest or a watch cycle added to them.
    raised = limit_memory(con)
    if raised and note is not None:
        note(raised)
    if not force and only is None and _incrementally(con, config, counts, history_version):
        return summary(con)
    with transaction(con):
        for stmt in FINDINGS_DDL.split(";"):
            if stmt.strip():
                con.execute(stmt)
        drop_retired(con)
        for q in catalog.load("prep"):
            buckets.run(con, q)
        con.execute("DELETE FROM findings")
        con.execute("DELETE FROM coverage")
        con.execute("DELETE FROM cannot_tell")
        con.execute("DELETE FROM cannot_tell_stages")
        con.execute("DELETE FROM blind_files")
        # Their coverage and blind files are written once, for all of them.
        ledger = cannottell.Ledger()
        for name, q in catalog.detectors().items():
            if only and name not in only:
                continue
            _run_detector(con, name, q, values, counts, ledger)
        cannottell.write_coverage(con, ledger)
        _assign_stages(con)
        _gate_facts(con, values)
        if only is None:
            incremental.clear_pending(
                con,
                also={
                    "analysis_stamp": stamp(con, config),
                    CONFIG_META: _config_doc(config),
                    "analysis_mode": "full",
                    "history_stamp": history_version,
                },
            )
    return summary(con)


def _history_only(
    con: duckdb.DuckDBPyConnection, values: dict[str, Any], counts: dict[str, int], version: str
) -> None:
    """Only the decision history moved on: re-run just the detectors that read it."""
    with transaction(con):
        prepared_views(con)
        rerun: list[str] = []
        for name, q in catalog.detectors().items():
            if "decision_history" not in q.needs:
                continue
            for table in (
                "findings",
                "coverage",
                "cannot_tell",
                "cannot_tell_stages",
                "blind_files",
                "cannot_tell_units",
            ):
                con.execute(f"DELETE FROM {table} WHERE detector = $d", {"d": name})
            _run_detector(con, name, q, values, counts)
            rerun.append(name)
        _assign_stages(con, rerun)
        _gate_facts(con, values)
        set_meta(con, "history_stamp", version)


def _run_detector(
    con: duckdb.DuckDBPyConnection,
    name: str,
    q: catalog.Query,
    values: dict[str, Any],
    counts: dict[str, int],
    ledger: cannottell.Ledger | None = None,
) -> None:
    """`ledger`: where its coverage rows are kept (cannottell.record_coverage)."""
    missing = cannottell.missing_needs(q, counts)
    if missing:
        cannottell.record_coverage(con, name, cannottell.missing_label(missing[0]), ledger=ledger)
        return
    t0 = time.perf_counter()
    plan = cannottell.plan(con, q, values)
    cannottell.record_cannot_tell(con, name, q, plan)
    n = 0
    if not plan.skip:
        made = cannottell.shadow(con, plan)
        try:
            inserted = con.execute(
                f"INSERT INTO findings BY NAME SELECT $detector AS detector, * FROM ({q.sql})",
                {"detector": name, **params.bind(q, values)},
            ).fetchone()
            n = inserted[0] if inserted else 0
        finally:
            cannottell.unshadow(con, made)
    status = "cannot tell" if plan.skip else "ok"
    cannottell.record_coverage(con, name, status, plan, n, time.perf_counter() - t0, ledger)


def _incrementally(
    con: duckdb.DuckDBPyConnection, config: Config, counts: dict[str, int], history: str
) -> bool:
    """Bring the last analysis up to date for what changed (incremental.py), if it can;
    `history`: the decision history's version it reads (noted with the rest)."""
    blind = incremental.plans(con, counts, params.from_config(config))
    if not incremental.possible(con, config, counts, blind):
        return False
    try:
        with transaction(con):
            values = params.from_config(config)

            def finish(recount: list[str]) -> None:  # before the scope of the changed sessions goes
                _assign_stages(con, recount)
                incremental.gate_facts(con, _facts_statements(values))

            # The input files as named now: what the run compares with the last analysis'
            # and what it notes for the next (one digest of `files` for both).
            files = incremental.files_digest(con)
            incremental.analyse(con, config, counts, blind, finish, files)
            # What the analysis notes, in the same transaction and one statement.
            incremental.clear_pending(
                con,
                files,
                {
                    "analysis_stamp": stamp(con, config),
                    CONFIG_META: _config_doc(config),
                    "analysis_mode": "incremental",
                    "history_stamp": history,
                },
            )
    except duckdb.InterruptException:
        # Asked to stop (watch's stop): not a reason for a full analysis.
        incremental.reset(con)
        raise
    except (groups.Fallback, duckdb.Error):
        # Whatever went wrong (rolled back), a full analysis gives the right answer.
        incremental.reset(con)
        return False
    except BaseException:
        incremental.reset(con)
        raise
    return True


def _has_table(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE table_name = $n AND NOT temporary",
            {"n": name},
        ).fetchall()[0][0]
    )


def _gate_facts(con: duckdb.DuckDBPyConnection, values: dict[str, Any]) -> None:
    """The gate facts and the samples behind the meters (queries/sql/facts), after the
    detectors and the stages of their findings: every gate measure, for the decision and
    under the dashboard's filters, aggregates them. `values`: params.from_config (which of
    the probe's units count)."""
    for stmt, bound in _facts_statements(values):
        con.execute(stmt, bound)


def _facts_statements(values: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The statements that build the gate facts and the stage samples, with their values:
    the readers' macros between (the stage samples read the facts through gate_facts())."""
    return [
        (stmt, {k: values[k] for k in PROBE_PARAMS if f"${k}" in stmt})
        for name in ("build", "setup", "samples")
        for stmt in named.get(name, "facts").statements()
    ]


PROBE_PARAMS = ("probe_facts", "probe_detectors")


# The severity of a unit a detector returned as one it cannot judge (`-- undecided:` in its
# header names what it could not tell, `detail.missing`; `detail.file_id` its file).
UNDECIDED = "cannot_tell"


def _split_undecided(con: duckdb.DuckDBPyConnection, recount: Collection[str] | None) -> None:
    """Units a detector returned as undecided are `cannot_tell`, per file and per stage like
    the units of a file that cannot show a fact, and never findings (nor coverage rows).
    They are kept, a row per unit and stage, in `cannot_tell_units`; `recount`: the
    detectors whose undecided counts are counted again from it, their kept units of
    sessions not recomputed included (incremental.py); None: every detector's, from this
    run's units alone."""
    # (a unit in the windows of two stages was staged twice: once per stage, once in all)
    if recount is None:
        con.execute("DELETE FROM cannot_tell_units")
        set_meta(con, incremental.UNITS_META, "kept")
    con.execute(f"""INSERT INTO cannot_tell_units
                    SELECT detector, stage, json_extract_string(detail, '$.missing'),
                           TRY_CAST(json_extract(detail, '$.file_id') AS BIGINT),
                           {", ".join(UNIT_COLUMNS)}, ts
                    FROM findings WHERE severity = '{UNDECIDED}'""")
    units = f"""SELECT detector, stage, missing, file_id, ({", ".join(UNIT_COLUMNS)}, ts) AS unit
                FROM cannot_tell_units
                WHERE $all OR list_contains($recount, detector)"""
    which = {"all": recount is None, "recount": list(recount or ())}
    con.execute(
        f"""INSERT INTO cannot_tell
            SELECT u.detector, coalesce(f.path, '?'), u.missing, count(DISTINCT u.unit)
            FROM ({units}) u LEFT JOIN files f USING (file_id) GROUP BY ALL""",
        which,
    )
    con.execute(
        f"""INSERT INTO cannot_tell_stages
            SELECT u.detector, coalesce(f.path, '?'), u.missing, u.stage, count(DISTINCT u.unit)
            FROM ({units}) u LEFT JOIN files f USING (file_id)
            WHERE u.stage IS NOT NULL GROUP BY ALL""",
        which,
    )
    undecided = f"""SELECT detector, ({", ".join(UNIT_COLUMNS)}, ts) AS unit
                    FROM findings WHERE severity = '{UNDECIDED}'"""
    con.execute(f"""UPDATE coverage c SET rows = c.rows - u.n
                    FROM (SELECT detector, count(DISTINCT unit) AS n FROM ({undecided})
                          GROUP BY detector) u
                    WHERE c.detector = u.detector""")
    con.execute(f"DELETE FROM findings WHERE severity = '{UNDECIDED}'")


# The findings with their stage: the same attribution as every gate sample
# (stage_attributed in macros.sql), except for a finding about a stage by name
# (detail.filed_under: the stage a rollout action acted on), which is filed under that
# stage whatever window its time falls in.
STAGED_FINDINGS = """
    WITH located AS (
        SELECT f.* EXCLUDE (stage), json_extract_string(f.detail, '$.filed_under')
                   AS filed_under, a.session_hmac IS NOT NULL AS rg_known,
               a.cohort AS rg_cohort
        FROM findings f LEFT JOIN a_sessions a ON a.session_hmac = f.session_hmac
    )
    SELECT * EXCLUDE (stage, filed_under, rg_known, rg_cohort),
           coalesce(filed_under, stage) AS stage
    FROM stage_attributed(located, rg_known, rg_cohort,
                          CASE WHEN filed_under IS NULL THEN ts END)"""


def _assign_stages(con: duckdb.DuckDBPyConnection, recount: Collection[str] | None = None) -> None:
    """`recount`: see _split_undecided."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE rg_staged AS {STAGED_FINDINGS}")
    con.execute("DELETE FROM findings")
    con.execute("INSERT INTO findings BY NAME SELECT * FROM rg_staged")
    con.execute("DROP TABLE rg_staged")
    _split_undecided(con, recount)


def summary(con: duckdb.DuckDBPyConnection) -> Summary:
    by_sev = dict(
        con.execute("SELECT severity, count(*) FROM findings GROUP BY severity").fetchall()
    )
    total = sum(by_sev.values())
    return {"total": total, "by_severity": by_sev}


def cannot_tell(con: duckdb.DuckDBPyConnection) -> dict[str, list[CannotTell]]:
    """Per detector, the units it could not judge."""
    out: dict[str, list[CannotTell]] = {}
    try:
        rows = con.execute(
            "SELECT detector, file, missing, units FROM cannot_tell ORDER BY detector, file"
        ).fetchall()
    except duckdb.CatalogException:  # a database analysed before this table existed
        return out
    for det, file, missing, n in rows:
        out.setdefault(det, []).append(CannotTell(file=file, missing=missing, units=n))
    return out


def cannot_tell_by_stage(con: duckdb.DuckDBPyConnection) -> dict[str, list[StageCannotTell]]:
    """Per rollout stage, the units of that stage its detectors could not judge."""
    out: dict[str, list[StageCannotTell]] = {}
    try:
        rows = con.execute(
            """SELECT stage, detector, file, missing, units FROM cannot_tell_stages
               ORDER BY stage, detector, file, missing"""
        ).fetchall()
    except duckdb.CatalogException:  # a database analysed before this table existed
        return out
    for stage, det, file, missing, n in rows:
        out.setdefault(stage, []).append(
            StageCannotTell(detector=det, file=file, missing=missing, units=n)
        )
    return out


def cannot_tell_under(
    con: duckdb.DuckDBPyConnection,
    detectors: Iterable[str],
    flt: dict[str, Any],
    values: dict[str, Any],
) -> int:
    """The units of `detectors` the dashboard's filter `flt` (Filters.param(), no stage)
    keeps that they could not judge: those of the files a detector was kept from
    (`blind_files`) or, when no file could show a fact it needs (coverage `cannot tell`),
    all its units, counted by its `-- units:`; and those it returned undecided
    (`undecided_units`, as the gates subtract them). Needs the gate facts' `setup` macros
    (named.prepare(con, "facts")); `values`: params.from_config."""
    names = list(detectors)
    skipped = {
        r[0]
        for r in con.execute(
            "SELECT detector FROM coverage WHERE status = 'cannot tell' "
            "AND list_contains($d, detector)",
            {"d": names},
        ).fetchall()
    }
    n = 0
    for name in names:
        u = cannottell.units(catalog.detectors()[name])
        if u is None:
            continue
        scope: list[int] | None = None
        if name not in skipped:
            scope = [
                int(r[0])
                for r in con.execute(
                    "SELECT file_id FROM blind_files WHERE detector = $d AND source = $t",
                    {"d": name, "t": u.table},
                ).fetchall()
            ]
            if not scope:
                continue
        bound = {**cannottell.unit_args(u, values), "flt": flt}
        if scope is not None:
            bound["ids"] = scope
        n += int(one_row(con.execute(cannottell.filter_units_sql(u, scope), bound))[0])
    n += int(
        one_row(
            con.execute(
                "SELECT coalesce(sum(n), 0) FROM undecided_units(false, $flt, $d, $p)",
                {"flt": flt, "d": names, "p": values["probe_detectors"]},
            )
        )[0]
    )
    return n


def undecided_between(con: duckdb.DuckDBPyConnection, name: str, t0: Any, t1: Any) -> int:
    """The units of detector `name` whose time is in [t0, t1) that it could not judge: those
    it returned undecided (`cannot_tell_units`, a row per unit and stage) and those of the
    files it was kept from (`blind_files`, counted by its `-- units:`)."""
    window = {"t0": t0, "t1": t1}
    returned = one_row(
        con.execute(
            f"""SELECT count(DISTINCT ({", ".join(UNIT_COLUMNS)}, ts)) FROM cannot_tell_units
                WHERE detector = $d AND in_window(ts, $t0, $t1)""",
            {"d": name, **window},
        )
    )[0]
    u = cannottell.units(catalog.detectors()[name])
    ids = [
        int(r[0])
        for r in con.execute(
            "SELECT file_id FROM blind_files WHERE detector = $d AND source = $t",
            {"d": name, "t": u.table if u else ""},
        ).fetchall()
    ]
    if u is None or not ids:
        return int(returned)
    key = f"DISTINCT ({u.by})" if u.by else "*"
    kept = one_row(
        con.execute(
            f"""SELECT count({key}) FROM {u.table} WHERE ({u.where})
                AND list_contains($ids, file_id) AND in_window(ts, $t0, $t1)""",
            {"ids": ids, **window, **cannottell.unit_args(u, None)},
        )
    )[0]
    return int(returned) + int(kept)


def blind_detectors(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """Detectors that could judge nothing because no file can show a fact they need,
    with what is missing ("proxy.log cannot show proxy.initialize")."""
    rows = con.execute(
        """SELECT c.detector, arg_min(t.file || ' cannot show ' || t.missing, (t.file, t.missing))
           FROM coverage c JOIN cannot_tell t USING (detector)
           WHERE c.status = 'cannot tell' GROUP BY c.detector"""
    ).fetchall()
    return dict(rows)


def coverage_doc(con: duckdb.DuckDBPyConnection) -> Coverage:
    """`coverage` as `findings --json` prints it: a detector's status, or, when some of
    its units could not be judged, {"status": ..., "cannot_tell": [...]}."""
    status = coverage(con)
    out: Coverage = dict(status)
    for det, entries in cannot_tell(con).items():
        out[det] = DetectorCoverage(status=status.get(det, "not run"), cannot_tell=entries)
    return out


def coverage(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    rows = dict(con.execute("SELECT detector, status FROM coverage").fetchall())
    return {name: rows.get(name, "not run") for name in catalog.detectors()}


SEVERITIES = tuple(Severity)


def list_findings(
    con: duckdb.DuckDBPyConnection,
    detectors: Iterable[str] | None = None,
    stage: str | None = None,
    severity: str | None = None,
    limit: int | None = None,
) -> list[Finding]:
    """The findings, most severe first, optionally of some detectors, one stage, at
    least a severity, at most `limit`; times as ISO strings, `detail` parsed. Findings of
    one detector in one millisecond are ordered by their unit and detail: the table's own
    order follows the threads that inserted them, and differs from run to run."""
    where: list[str] = ["true"]
    args: dict[str, Any] = {}
    if detectors:
        where.append("list_contains($detectors, detector)")
        args["detectors"] = list(detectors)
    if stage:
        where.append("stage = $stage")
        args["stage"] = stage
    if severity:
        if severity not in SEVERITIES:
            raise ReplaygateError(f"unknown severity {severity!r} ({', '.join(SEVERITIES)})")
        where.append("list_contains($sev, severity)")
        args["sev"] = [str(s) for s in SEVERITIES if s.rank <= Severity(severity).rank]
    sql = f"""SELECT detector, severity, ts, stage, {", ".join(UNIT_COLUMNS)}, detail
              FROM findings WHERE {" AND ".join(where)}
              ORDER BY list_position($order, severity), ts, detector,
                       {", ".join(UNIT_COLUMNS)}, CAST(detail AS VARCHAR)"""
    args["order"] = [str(s) for s in SEVERITIES]
    if limit:
        sql += " LIMIT $limit"
        args["limit"] = limit
    cur = con.execute(sql, args)
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        rec = dict(zip(cols, row, strict=True))
        rec["ts"] = _iso(rec["ts"])
        rec["detail"] = json.loads(rec["detail"]) if rec["detail"] else {}
        out.append(cast(Finding, rec))  # its columns are Finding's (tests/test_runner_types.py)
    return out


def findings_doc(con: duckdb.DuckDBPyConnection, **filters: Any) -> FindingsDoc:
    """`findings --json`: the findings `list_findings` selects, and the coverage."""
    return FindingsDoc(findings=list_findings(con, **filters), coverage=coverage_doc(con))
