""" "Cannot tell": units whose verdict needs a fact the loaded files cannot show.

A detector declares in its SQL header the facts its verdict depends on
(`-- facts: proxy.initialize, proxy.principal|proxy.client_addr`; `a|b`: either one)
and the units it judges (`-- units: <table> [WHERE <predicate>] [BY <unit key>]`).
Files are matched against ingest/capabilities.py's `file_facts`:

- a fact of the units' own table: the files of that table that cannot show it are
  left out of the detector's input (so their units can never be findings), and their
  units are counted as `cannot_tell` for that file;
- a fact of another table: when no file of that table can show it, the detector is
  not run and all its units are `cannot_tell`, naming each of those files.

A detector with several bases (`undelivered_result`: the server's event log, client
receipts, a proxy log) names the record types that judge its other units
(`-- other_bases: events`): a units table whose every file is blind then leaves only those
files out, and the detector still runs while one of those record types is loaded.

Detectors whose rule is about a field's absence (`missing_idempotency_key`,
`missing_protocol_version`, ...) declare the facts that make the absence visible.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import duckdb

from replaygate.core.config import Config
from replaygate.core.db import one_row

from . import catalog
from .headers import UNITS
from .params import from_config


@dataclass(frozen=True)
class Units:
    table: str
    where: str
    by: str | None


def facts(q: catalog.Query) -> tuple[tuple[str, ...], ...]:
    """The declared facts of a detector: groups of alternatives (each a known fact: its
    header was checked when it loaded)."""
    return q.header.alternatives("facts")


def units(q: catalog.Query) -> Units | None:
    raw = q.header.text("units")
    m = UNITS.match(raw)
    if not m:  # none declared (a declared one was checked when it loaded)
        return None
    return Units(m["table"], m["where"] or "true", m["by"])


@dataclass
class Plan:
    """How to run one detector on what the files can show."""

    exclude: dict[str, list[int]]  # table -> files left out of its input
    cannot_tell: list[dict[str, Any]]  # {"file", "missing", "units", "scope": unit files or None}
    skip: bool = False  # no file could show a fact: nothing can be judged
    # The configured values the units predicate binds (`$dead_statuses`).
    args: dict[str, Any] = field(default_factory=dict)


# What plans made at one time share (plans of every detector: each record table's files
# are looked up once, not once per detector that reads it).
Seen = dict[str, Any]


def _files_of(
    con: duckdb.DuckDBPyConnection, table: str, seen: Seen | None = None
) -> list[tuple[int, str]]:
    if seen is not None and f"files:{table}" in seen:
        return list(seen[f"files:{table}"])
    rows: list[tuple[int, str]] = con.execute(
        f"""SELECT f.file_id, f.path FROM files f
            WHERE f.status = 'loaded' AND EXISTS (
                SELECT 1 FROM {table} t WHERE t.file_id = f.file_id)
            ORDER BY f.path"""
    ).fetchall()
    if seen is not None:
        seen[f"files:{table}"] = list(rows)
    return rows


def _shown(con: duckdb.DuckDBPyConnection, seen: Seen | None = None) -> dict[int, set[str]]:
    if seen is not None and "shown" in seen:
        return dict(seen["shown"])
    out: dict[int, set[str]] = {}
    for fid, fact in con.execute("SELECT file_id, fact FROM file_facts").fetchall():
        out.setdefault(fid, set()).add(fact)
    if seen is not None:
        seen["shown"] = dict(out)
    return out


_PARAM = re.compile(r"\$([a-z_]+)")


def unit_args(u: Units | None, values: dict[str, Any] | None) -> dict[str, Any]:
    """The bound values a units predicate names (`$dead_statuses`), from the configuration."""
    if u is None:
        return {}
    names = set(_PARAM.findall(u.where))
    if names and values is None:
        values = from_config(Config())
    return {n: (values or {})[n] for n in sorted(names)}


def _count(
    con: duckdb.DuckDBPyConnection,
    u: Units,
    file_ids: list[int] | None,
    bound: dict[str, Any] | None = None,
) -> int:
    key = f"DISTINCT ({u.by})" if u.by else "*"
    scope = "true" if file_ids is None else "list_contains($ids, file_id)"
    args = {**(bound or {}), **({} if file_ids is None else {"ids": file_ids})}
    row = con.execute(
        f"SELECT count({key}) FROM {u.table} WHERE ({u.where}) AND {scope}", args
    ).fetchone()
    return int(row[0]) if row else 0


def _count_by_file(
    con: duckdb.DuckDBPyConnection, u: Units, file_ids: list[int], bound: dict[str, Any]
) -> dict[int, int]:
    """The units in each of `file_ids` (those with none left out), in one statement: a
    statement per file read the table once per file."""
    if not file_ids:
        return {}
    key = f"DISTINCT ({u.by})" if u.by else "*"
    rows = con.execute(
        f"""SELECT file_id, count({key}) FROM {u.table}
            WHERE ({u.where}) AND list_contains($ids, file_id) GROUP BY file_id""",
        {**bound, "ids": file_ids},
    ).fetchall()
    return {int(f): int(n) for f, n in rows}


def plan(
    con: duckdb.DuckDBPyConnection,
    q: catalog.Query,
    values: dict[str, Any] | None = None,
    seen: Seen | None = None,
) -> Plan:
    """`values`: the configuration's bound values (params.from_config), for a units
    predicate that names one; `seen`: shared by plans made of the same data at once."""
    groups = facts(q)
    u = units(q)
    p = Plan({}, [], args=unit_args(u, values))
    if not groups:
        return p
    shown = _shown(con, seen)
    # Record types that judge the detector's other units (its other bases): while one is
    # loaded, blind files of the units table never stop it from running.
    others = catalog.split(q.header.get("other_bases", ""))
    judged_elsewhere = any(_files_of(con, t, seen) for t in others)
    for group in groups:
        table = group[0].split(".", 1)[0]
        files = _files_of(con, table, seen)
        blind = [(fid, path) for fid, path in files if not shown.get(fid, set()) & set(group)]
        if not blind:
            continue
        missing = "|".join(group)
        if u is not None and u.table == table:
            # Every file blind: nothing left to judge (the detector is not run), unless
            # another basis judges its other units.
            p.skip = p.skip or (len(blind) == len(files) and not judged_elsewhere)
            p.exclude.setdefault(table, [])
            left = [(fid, path) for fid, path in blind if fid not in p.exclude[table]]
            counted = _count_by_file(con, u, [fid for fid, _ in left], p.args)
            for fid, path in left:
                p.exclude[table].append(fid)
                n = counted.get(fid, 0)
                if n:
                    p.cannot_tell.append(
                        {"file": path, "missing": missing, "units": n, "scope": [fid]}
                    )
        elif len(blind) == len(files):
            p.skip = True
            n = _count(con, u, None, p.args) if u is not None else 0
            for _, path in blind:
                p.cannot_tell.append({"file": path, "missing": missing, "units": n, "scope": None})
    return p


def stage_units_sql(u: Units | None, scope: list[int] | None) -> str:
    """A query of (stage, units): the units of a cannot_tell entry by the rollout stage
    they belong to, by the same attribution as findings and gate samples
    (`stage_attributed` in macros.sql): a unit's rows by their session's cohort and
    time. A unit whose rows fall in several stages counts in each; units in no stage are
    not listed."""
    if u is None:
        return "SELECT NULL::VARCHAR AS stage, 0::BIGINT AS units WHERE false"
    key = f"({u.by})" if u.by else "NULL"
    count = "count(DISTINCT t.u_key)" if u.by else "count(*)"
    where = "true" if scope is None else "list_contains($ids, file_id)"
    return f"""
        WITH u_located AS (
            SELECT t.u_ts, t.u_key, a.session_hmac IS NOT NULL AS u_known, a.cohort AS u_cohort
            FROM (SELECT session_hmac AS u_session, ts AS u_ts, {key} AS u_key
                  FROM {u.table} WHERE ({u.where}) AND {where}) t
            LEFT JOIN a_sessions a ON a.session_hmac = t.u_session
        )
        SELECT stage, {count}::BIGINT AS units
        FROM stage_attributed(u_located, u_known, u_cohort, u_ts) t
        WHERE stage IS NOT NULL
        GROUP BY stage"""


def filter_units_sql(u: Units | None, scope: list[int] | None) -> str:
    """A query of (units): the units of a detector's `-- units:` in the files `scope`
    (None: every file) that the dashboard's filter `$flt` keeps, by the dimensions of
    each unit's session and its time (rg_keep of the gate facts' `setup`; a filter
    without a stage: a unit is not attributed to one)."""
    if u is None:
        return "SELECT 0::BIGINT AS units"
    key = f"({u.by})" if u.by else "NULL"
    count = "count(DISTINCT t.u_key)" if u.by else "count(*)"
    where = "true" if scope is None else "list_contains($ids, file_id)"
    return f"""
        SELECT {count}::BIGINT AS units
        FROM (SELECT session_hmac AS u_session, ts AS u_ts, {key} AS u_key
              FROM {u.table} WHERE ({u.where}) AND {where}) t
        LEFT JOIN a_sessions a ON a.session_hmac = t.u_session
        WHERE rg_keep(NULL, is_baseline(a.session_hmac, a.cohort),
                      record_revision(t.u_session, a.protocol_version),
                      a.server_instance, a.client_name, t.u_ts, $flt)"""


def scope_args(entry: dict[str, Any]) -> dict[str, Any]:
    return {} if entry.get("scope") is None else {"ids": entry["scope"]}


def same_as_recorded(con: duckdb.DuckDBPyConnection, now: dict[str, Plan]) -> bool:
    """Do these plans leave out the same files and skip the same detectors as the ones the
    last analysis ran with (`blind_files`, coverage `cannot tell`)? Then an incremental
    run can apply them as they are."""
    excluded: dict[str, set[tuple[str, int]]] = {}
    for det, table, fid in con.execute(
        "SELECT detector, source, file_id FROM blind_files"
    ).fetchall():
        excluded.setdefault(det, set()).add((table, fid))
    skipped = {
        r[0]
        for r in con.execute(
            "SELECT detector FROM coverage WHERE status = 'cannot tell'"
        ).fetchall()
    }
    for name, p in now.items():
        mine = {(t, f) for t, ids in p.exclude.items() for f in ids}
        if mine != excluded.pop(name, set()) or p.skip != (name in skipped):
            return False
    return not excluded


def shadow(con: duckdb.DuckDBPyConnection, p: Plan, scope: str = "true") -> list[str]:
    """Temporary views that hide the excluded files' rows from a detector (temporary
    views come first whatever the search path). `scope`: a predicate on the rows as
    well, the incremental run's sessions (a view may not read another view of the same
    name, so it reads the table itself)."""
    if not p.exclude:
        return []
    db = one_row(con.execute("SELECT current_database()"))[0]
    made = []
    for table, ids in p.exclude.items():
        listed = ", ".join(str(int(i)) for i in ids)
        con.execute(
            f'CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM "{db}".main.{table} '
            f"WHERE file_id NOT IN ({listed}) AND ({scope})"
        )
        made.append(table)
    return made


def unshadow(con: duckdb.DuckDBPyConnection, made: list[str]) -> None:
    for table in made:
        con.execute(f"DROP VIEW IF EXISTS temp.{table}")


def markdown_table() -> list[str]:
    """The capability table of docs/detectors.md, from the detectors' headers."""

    def cell(text: str) -> str:
        return text.replace("|", " or ")

    out = [
        "| detector | reads (`needs`) | facts its verdict depends on (`facts`) "
        "| units that become `cannot_tell` (`units`) |",
        "|---|---|---|---|",
    ]
    for name, q in sorted(catalog.detectors().items()):
        groups = facts(q)
        if groups:
            shown = ", ".join(" or ".join(f"`{a}`" for a in g) for g in groups)
        elif q.header.list("undecided"):
            # required fields only, but the detector itself returns units it cannot judge
            shown = "— (per unit: " + ", ".join(q.header.list("undecided")) + ")"
        elif "facts" in q.header:
            shown = "— (required fields only)"
        else:
            shown = "not declared"
        u = q.header.text("units")
        out.append(
            f"| `{name}` | {cell(', '.join(q.needs))} | {shown} | "
            f"{('`' + cell(u) + '`') if u else '—'} |"
        )
    return out


_MISSING_LABEL = {
    "sessions": "no session ledger",
    "streams": "no stream ledger",
    "events": "no event log",
    "inbox": "no client inbox",
    "dispatches": "no dispatch records",
    "proxy": "no proxy log",
    "rollout": "no rollout log",
    "decision_history": "no decision recorded",
}


def missing_needs(q: catalog.Query, counts: dict[str, int]) -> list[str]:
    """The needs of a query that the record counts do not meet (a need "a|b" is met by
    either record type)."""
    return [n for n in q.needs if not any(counts.get(t) for t in n.split("|"))]


def missing_label(need: str) -> str:
    """A need as people read its absence: "no proxy log", "no client inbox and no proxy log"."""
    return " and ".join(_MISSING_LABEL[t] for t in need.split("|"))


@dataclass
class Ledger:
    """The coverage and blind-file rows of several detectors, kept to be written at once
    (write_coverage): a statement per row was most of what writing them cost."""

    coverage: list[tuple[str, str, int, float]] = field(default_factory=list)
    blind: list[tuple[str, str, int]] = field(default_factory=list)


def record_coverage(
    con: duckdb.DuckDBPyConnection,
    name: str,
    status: str,
    plan: Plan | None = None,
    findings: int = 0,
    seconds: float = 0.0,
    ledger: Ledger | None = None,
) -> None:
    """Store how a detector ran (`ok`, `cannot tell`, or why it did not) and the files it
    was kept from (`plan.exclude`): the same rows whichever engine ran it. `ledger`: keep
    them there instead, for write_coverage."""
    excluded = (plan.exclude if plan else {}).items()
    blind = [(name, table, int(fid)) for table, ids in excluded for fid in ids]
    rows = Ledger([(name, status, findings, seconds)], blind)
    if ledger is None:
        write_coverage(con, rows)
    else:
        ledger.coverage += rows.coverage
        ledger.blind += rows.blind


def write_coverage(con: duckdb.DuckDBPyConnection, ledger: Ledger) -> None:
    """The rows of a ledger, a statement per table. Each result is read whole (an unread
    result blocks the connection)."""
    for table, rows in (("blind_files", ledger.blind), ("coverage", ledger.coverage)):
        if not rows:
            continue
        # (a list per column, unnested side by side: one row per entry)
        columns = {f"c{k}": list(col) for k, col in enumerate(zip(*rows, strict=True))}
        con.execute(
            f"INSERT INTO {table} SELECT {', '.join(f'unnest(${c})' for c in columns)}",
            columns,
        ).fetchall()


def record_cannot_tell(
    con: duckdb.DuckDBPyConnection,
    name: str,
    q: catalog.Query,
    plan: Plan,
    standing: Collection[tuple[str, str]] = (),
) -> None:
    """Store a detector's units that no file could show a needed fact for, whole and by
    the rollout stage they belong to (after the prepare step: it reads the stages).
    `standing`: the entries (file, missing) whose counts by stage the last analysis
    stored and are kept as they are (an incremental analysis: incremental.py)."""
    record_cannot_tell_all(con, [(name, q, plan, standing)])


def record_cannot_tell_all(
    con: duckdb.DuckDBPyConnection,
    runs: list[tuple[str, catalog.Query, Plan, Collection[tuple[str, str]]]],
) -> None:
    """record_cannot_tell of several detectors: their whole counts in one statement (a
    statement per entry was most of the cost of writing a few rows)."""
    entries = [(name, entry) for name, _, plan, _ in runs for entry in plan.cannot_tell]
    if entries:
        con.execute(
            "INSERT INTO cannot_tell SELECT unnest($d), unnest($f), unnest($m), unnest($u)",
            {
                "d": [name for name, _ in entries],
                "f": [entry["file"] for _, entry in entries],
                "m": [entry["missing"] for _, entry in entries],
                "u": [int(entry["units"]) for _, entry in entries],
            },
        )
    for name, q, plan, standing in runs:
        for entry in plan.cannot_tell:
            if (entry["file"], entry["missing"]) in standing:
                continue
            con.execute(
                "INSERT INTO cannot_tell_stages SELECT $d, $f, $m, stage, units FROM "
                f"({stage_units_sql(units(q), entry['scope'])})",
                {
                    "d": name,
                    "f": entry["file"],
                    "m": entry["missing"],
                    **scope_args(entry),
                    **plan.args,
                },
            )
