"""Incremental analysis: after an append, recompute only what the new rows can change.

Ingest notes the sessions of the rows it adds (`analysis_pending`). Most prepared tables
and detectors are *session-local*: a session's rows out depend only on that session's
rows in. Those are recomputed for the noted sessions alone, by running their unchanged
SQL against copies of the tables that hold only those sessions' rows (schema `rg_scope`,
first on the search path), and their old rows for those sessions are replaced. Prepared
tables with one row out per row in (ROW_PREP) are recomputed for those sessions' rows
and for the new rows without a session (ingest notes where each file's new rows start,
in `analysis_pending_rows`). `duplicate_dispatch`, whose findings belong to groups of
dispatches across sessions, recomputes the groups that hold a changed dispatch
(groups.py). `undelivered_result` also judges empty answers logged without a session,
placed by time on other sessions' streams: it recomputes the noted sessions with those
whose last findings were near such an answer, and every such answer (NEAR_SESSIONS).
The counts of records per stage and source (ADDITIVE_PREP) are
added to for the new rows; the attempts of an idempotency key that differ from its first
(KEYED_PREP) are recomputed for the new rows' keys. `session_after_terminal` and
`delete_fabricated`, session-local but for what logs blind to session ids say of other
files, are run for the noted sessions and those the growth of such a log may reach
(BLIND_LOCAL). Everything else (stage windows,
per-stage samples, fleet-wide rates, proxy-log checks) is recomputed whole, as
in a full analysis, but a detector none of whose tables received rows (READS), which
stands. Stages are then assigned to all findings as always.

A full analysis runs instead when there is no earlier analysis to build on, an ingest
since then did not note what it changed, the configuration changed, the rollout log
changed or rows were replaced, a detector's coverage would change, the files that cannot
show a fact a detector needs are no longer the ones it left out ("cannot tell",
cannottell.py: the same ones are left out again, and their `cannot_tell` counts are
recounted, but for the counts by stage of a file that did not grow and holds no row of a
noted session, which stand), or the noted sessions are a large share of the fleet.
Anything unexpected during an incremental run (a session-local table without
`session_hmac`, a session-local finding without a session) rolls it back and falls back
to a full one.
The result equals a from-scratch analysis (tests/test_incremental.py checks it).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from typing import Any

import duckdb

from replaygate.core import contract
from replaygate.core.config import Config
from replaygate.core.db import get_meta, one_row, set_metas

from . import buckets, cannottell, catalog, groups, params
from .groups import Fallback

# Prepared tables and detectors whose output for a session depends only on that
# session's rows (and on the stage windows, which a rollout change recomputes in full).
SESSION_PREP = {
    "a_sessions",
    "a_event_index",
    "a_inbox",
    "a_missing",
    "a_streams",
    "a_recoveries",
    "a_resumes",
    "a_server_missing",
    "a_empty_answers",
}
# Prepared tables with one output row per input row (of `proxy`): recomputed for the
# affected sessions' rows and for the new rows without a session.
ROW_PREP = {"a_proxy_staged": "proxy"}
# (`undelivered_result` is session-local but for its rows without a session:
# NEAR_SESSIONS. `delete_fabricated`, `reinit_missing` and `session_after_terminal` are
# not: a proxy log that cannot show a fact others show, of rows of no session or of other
# sessions, can make a session's unit `cannot_tell` (a_blind_spans, a_blind_clients).
# `priming_lost`, `resume_without_cursor` and `auth_subject_mismatch` are: their units are
# undecided by the session's own ledger rows in a sessions file that cannot show its
# resumability (a_resumability_unknown) or its token subject (a_subject_unknown), and
# which sessions files those are is checked unchanged (SESSION_BLIND); their undecided
# units are kept per session (runner's `cannot_tell_units`) and counted again. A proxy
# file that cannot show a request's subject is left out row by row (its plan), as for
# `missing_protocol_version`. Run whole, `auth_subject_mismatch` read every proxy row:
# 0.05-0.06 CPU s of a 1 % append's re-analysis at 1M.)
SESSION_DETECTORS = {
    "auth_subject_mismatch",
    "cross_stream_acceptance",
    "cursor_misrouted",
    "cursor_rejected",
    "dropped_terminal",
    "duplicate_delivery_accepted",
    "missing_protocol_version",
    "priming_lost",
    "replay_after_ack",
    "replay_buffer_exhausted",
    "replay_gap",
    "resume_without_cursor",
    "retry_not_honored",
    "rollback_cursor_dropped",
    "rollback_post_storm",
    "rollback_resumable_new_stream",
    "silent_truncation",
    "slow_recovery",
    "state_violation",
    "unrecovered_stream",
}
# What the session-local detectors read of partial blindness beyond a session's own rows:
# which sessions and stream ledger files cannot show which fact (a_blind_spans;
# a_blind_streams for rollback_post_storm). A change of it can change the verdict of
# sessions that received no rows: the analysis is then a full one.
SESSION_BLIND = (
    "SELECT fact, file_id FROM a_blind_spans WHERE tbl IN ('sessions', 'streams') ORDER BY ALL"
)
# Session-local detectors that also judge rows without a session, which the units of
# sessions near them in time bear on: their scoped run reads those rows too (`rows`, a
# predicate on the rows of their table) and returns their findings without a session;
# the sessions whose last findings were near such a row (`near`: the sessions to add) are
# recomputed with the pending ones, so that every unit such a row may be placed on is in
# the scope. `undelivered_result`: an empty answer a proxy log kept without its session is
# evidence for the stream another basis found (a finding, at the time the stream opened)
# opened nearest its run, within a second, else judged alone (queries/sql/detectors).
NEAR_SESSIONS: dict[str, dict[str, str]] = {
    "undelivered_result": {
        "table": "proxy",
        "rows": "session_hmac IS NULL "
        "AND empty_event_stream(method, status, body_bytes_sent, resp_content_type)",
        "near": """
            SELECT DISTINCT f.session_hmac
            FROM main.findings f
            JOIN (SELECT ts, duration_ms FROM {table}
                  WHERE session_hmac IS NULL
                    AND empty_event_stream(method, status, body_bytes_sent,
                                           resp_content_type)) e
              ON epoch_ms(f.ts) BETWEEN epoch_ms(e.ts) - 1000
                 AND epoch_ms(e.ts) + coalesce(e.duration_ms, 0) + 1000
            WHERE f.detector = 'undelivered_result' AND f.stream_id IS NOT NULL
              AND f.session_hmac IS NOT NULL""",
    },
}
# Detectors whose verdict for a session depends on that session's rows and on what the
# partial-blindness table `blind` says of other files (which an append to such a file
# moves). After an append they are run for the pending sessions and those whose verdict
# the change of that table may move (`near`, from the table before the prepare step,
# `rg_was_<blind>`, and after), on temporary views of `tables` holding those sessions'
# rows; when the table changed otherwise than by growing (`grew`: every row as it was or
# further out in time), they are run whole.
BLIND_LOCAL: dict[str, dict[str, Any]] = {
    # Undecided when a blind log served the session's client after its end (within the
    # skew): an append moves a client's last served request later, which can only reach
    # sessions of that client (or of every client, for rows naming none) that ended
    # between the old and the new time.
    "session_after_terminal": {
        "blind": "a_blind_clients",
        "tables": ("inbox", "proxy", "a_sessions"),
        "grew": """
            SELECT count(*) = 0 FROM rg_was_a_blind_clients o
            LEFT JOIN main.a_blind_clients n
              ON n.file_id = o.file_id AND n.client IS NOT DISTINCT FROM o.client
            WHERE n.file_id IS NULL
               OR n.last_served_ts IS DISTINCT FROM o.last_served_ts
                  AND NOT coalesce(n.last_served_ts > o.last_served_ts, false)""",
        "near": """
            WITH moved AS (
                SELECT n.client, epoch_ms(o.last_served_ts) AS old_ms,
                       epoch_ms(n.last_served_ts) AS new_ms
                FROM main.a_blind_clients n
                LEFT JOIN rg_was_a_blind_clients o
                  ON o.file_id = n.file_id AND o.client IS NOT DISTINCT FROM n.client
                WHERE n.last_served_ts IS DISTINCT FROM o.last_served_ts
            )
            SELECT DISTINCT a.session_hmac
            FROM main.a_sessions a
            JOIN moved m
              ON epoch_ms(a.terminal_ts) - blind_skew_ms() <= m.new_ms
             AND (m.old_ms IS NULL OR epoch_ms(a.terminal_ts) - blind_skew_ms() > m.old_ms)
            WHERE m.client IS NULL OR m.client = proxy_client(a.principal, NULL, NULL)
               OR a.session_hmac IN (
                   SELECT session_hmac FROM {proxy}
                   WHERE session_hmac IS NOT NULL
                     AND proxy_client(principal, client_addr, user_agent) IN (
                         SELECT client FROM moved))""",
    },
    # Undecided when a log blind to session ids spans (within the skew) the time from the
    # session's first ledger row to its TERMINATED: an append moves a span's ends out,
    # which can only reach sessions that began after the old end or were terminated
    # before the old start (within the skew, up to the new one).
    "delete_fabricated": {
        "blind": "a_blind_spans",
        "tables": ("sessions", "proxy", "a_sessions"),
        "grew": """
            SELECT count(*) = 0
            FROM (SELECT * FROM rg_was_a_blind_spans WHERE fact = 'proxy.session_hmac') o
            FULL JOIN (SELECT * FROM main.a_blind_spans WHERE fact = 'proxy.session_hmac') n
              USING (file_id)
            WHERE o.file_id IS NULL OR n.file_id IS NULL
               OR n.first_ts IS DISTINCT FROM o.first_ts
                  AND NOT coalesce(n.first_ts < o.first_ts, false)
               OR n.last_ts IS DISTINCT FROM o.last_ts
                  AND NOT coalesce(n.last_ts > o.last_ts, false)""",
        "near": """
            WITH moved AS (
                SELECT epoch_ms(o.first_ts) AS old_first, epoch_ms(n.first_ts) AS new_first,
                       epoch_ms(o.last_ts) AS old_last, epoch_ms(n.last_ts) AS new_last
                FROM (SELECT * FROM main.a_blind_spans WHERE fact = 'proxy.session_hmac') n
                JOIN (SELECT * FROM rg_was_a_blind_spans WHERE fact = 'proxy.session_hmac') o
                  USING (file_id)
                WHERE n.first_ts IS DISTINCT FROM o.first_ts
                   OR n.last_ts IS DISTINCT FROM o.last_ts
            )
            SELECT a.session_hmac FROM main.a_sessions a JOIN moved m
              ON epoch_ms(a.first_ts) - blind_skew_ms() > m.old_last
             AND epoch_ms(a.first_ts) - blind_skew_ms() <= m.new_last
            UNION
            SELECT s.session_hmac FROM {sessions} s JOIN moved m
              ON epoch_ms(s.ts) + blind_skew_ms() >= m.new_first
             AND epoch_ms(s.ts) + blind_skew_ms() < m.old_first
            WHERE s.state = 'TERMINATED'""",
    },
}
# Detectors whose finding of a row depends on that row alone (and on the configuration,
# which an incremental run never follows a change of): after an append they judge the new
# rows alone (`rg_delta`, with the files their plan leaves out left out) and the findings
# of the other rows stand. The value: None, or for a detector that returns each finding
# once (SELECT DISTINCT), its columns, by which a new row's finding equal to one already
# found is not added again (columns the query no longer returns fail the statement, and
# the run falls back to a full analysis). Judged whole, the four read every dispatch and
# proxy row: 0.035-0.042 CPU s of a 1 % append's re-analysis at 1M, 0.012-0.016 so.
ROW_DETECTORS: dict[str, str | None] = {
    "missing_idempotency_key": None,
    "allowed_origin_refused": "session_hmac, severity, ts, detail",
    "invalid_origin_accepted": "session_hmac, severity, ts, detail",
    "origin_refused_not_403": "session_hmac, severity, ts, detail",
}
# Detectors and the record tables their result reads: the rows they judge and every
# prepared table they read (the blind spans and clients of proxy logs from the proxy table
# and its files' facts; the key attempts and blind dispatch files from the dispatches;
# a_streams from the stream ledgers), and `sessions`, whose rows alone make a session's
# cohort (a_sessions), the stage of each unit they could not tell (the counts by stage of
# what they cannot tell, the undecided units kept with their stage). The configuration
# and the stage windows are the same in any incremental run. When none of those tables
# received new rows, a detector's findings, undecided units and counts of what it cannot
# tell stand as the last analysis left them, and it is not run: run whole after any
# append, the five of the proxy read every proxy row and duplicate_dispatch its groups'
# dispatches (0.25 CPU s of a re-analysis at 1M, whatever the append).
READS: dict[str, tuple[str, ...]] = {
    "conflict_executed": ("dispatches", "sessions"),
    "cursor_on_post": ("proxy", "sessions"),
    "duplicate_dispatch": ("dispatches", "inbox", "proxy", "sessions", "streams"),
    "idempotency_conflict": ("dispatches", "sessions"),
    "obsolete_resume": ("proxy", "sessions"),
    "raw_session_id_logged": ("proxy", "sessions"),
    "reconnect_storm": ("proxy", "sessions"),
    "reinit_missing": ("proxy", "sessions"),
}
# Prepared tables of counts of records per group (`n`, by every other column): an append
# adds the counts of its new rows to them, since an incremental run's rows are never
# replaced nor removed and its rollout log is unchanged (either makes a full analysis).
# `a_stage_sources` counts each source's records in each stage's window: recounted whole it
# read every record (3 % of a 1M re-analysis), for the new rows alone a hundredth of them.
ADDITIVE_PREP = {"a_stage_sources"}
DELTA = "rg_delta"
KEYED = "rg_keyed"
# Prepared tables whose rows out of a key's group of rows of one record table depend on
# that group alone ({name: (table, key)}; no row without a key): an append changes the
# groups of its new rows' keys, recomputed from all of their rows; the rest stand.
# `a_key_differing`: the attempts of an idempotency key against its first attempt, read
# whole a tenth of the fixed part of a 1 % append's re-analysis at 1M.
KEYED_PREP = {"a_key_differing": ("dispatches", "idempotency_key")}

# Set once an analysis keeps its undecided units (runner's `cannot_tell_units`): an
# incremental one needs those of the sessions it does not recompute.
UNITS_META = "cannot_tell_units"
# Above this share of the fleet's sessions a full analysis is as cheap.
MAX_SHARE = 0.25
SCOPE = "rg_scope"
_CREATES = re.compile(r"CREATE\s+OR\s+REPLACE\s+TABLE\s+(\w+)", re.IGNORECASE)


def clear_pending(
    con: duckdb.DuckDBPyConnection, files: str | None = None, also: dict[str, str] | None = None
) -> None:
    """Nothing is pending after an analysis. `files`: files_digest() when the caller has it;
    `also`: more of what the analysis notes in `meta`, written with this in one statement."""
    con.execute("DELETE FROM analysis_pending")
    con.execute("DELETE FROM analysis_pending_rows")
    set_metas(
        con,
        {
            "analysis_pending_full": "0",
            "analysis_noted_through": get_meta(con, "data_version", "0"),
            FILES_META: files_digest(con) if files is None else files,
            **(also or {}),
        },
    )


# The input files as the last analysis named them (clear_pending): a file moved since, with
# no new rows, changes what findings and counts of what a detector cannot tell name.
FILES_META = "analysis_files"


def files_digest(con: duckdb.DuckDBPyConnection) -> str:
    return str(
        one_row(
            con.execute(
                """SELECT coalesce(md5(string_agg(concat_ws('|', file_id, path, name, status),
                                                  '\n' ORDER BY file_id)), '')
                   FROM files"""
            )
        )[0]
    )


def plans(
    con: duckdb.DuckDBPyConnection,
    counts: dict[str, int],
    values: dict[str, Any] | None = None,
) -> dict[str, cannottell.Plan]:
    """What each detector that runs and declares facts may look at (cannottell.py);
    `values`: the configuration's bound values (params.from_config)."""
    seen: cannottell.Seen = {}
    return {
        name: cannottell.plan(con, q, values, seen)
        for name, q in catalog.detectors().items()
        if cannottell.facts(q) and not cannottell.missing_needs(q, counts)
    }


def possible(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    counts: dict[str, int],
    blind: dict[str, cannottell.Plan] | None = None,
) -> bool:
    """Can the last analysis be brought up to date incrementally? `blind`: the plans of
    `plans()` (computed here when not given)."""
    last = get_meta(con, "analysis_stamp")
    if not last or last.split(":", 1)[-1] != catalog.basis(config):
        return False
    if get_meta(con, "analysis_pending_full", "0") != "0":
        return False
    if get_meta(con, "analysis_noted_through") != get_meta(con, "data_version", "0"):
        return False  # an ingest that did not note its changes (an older version) ran since
    if get_meta(con, UNITS_META) is None:
        return False  # analysed by a version that did not keep its undecided units
    try:
        pending = one_row(con.execute("SELECT count(DISTINCT session_hmac) FROM analysis_pending"))[
            0
        ]
        fleet = one_row(con.execute("SELECT count(*) FROM a_sessions"))[0]
        ran = dict(con.execute("SELECT detector, status FROM coverage").fetchall())
    except duckdb.CatalogException:
        return False
    if not fleet or pending > MAX_SHARE * fleet:
        return False
    blind = plans(con, counts, params.from_config(config)) if blind is None else blind
    for name, q in catalog.detectors().items():
        missing = cannottell.missing_needs(q, counts)
        p = blind.get(name)
        now = cannottell.missing_label(missing[0]) if missing else "ok"
        if p is not None and p.skip:
            now = "cannot tell"
        if ran.get(name) != now:
            return False
    # Files that cannot show a fact a detector needs are left out of its input: the run
    # can apply that as the last analysis did, not a change of it (cannottell.py).
    return cannottell.same_as_recorded(con, blind)


def analyse(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    counts: dict[str, int],
    blind: dict[str, cannottell.Plan] | None = None,
    finish: Callable[[list[str]], None] | None = None,
    files: str | None = None,
) -> None:
    """Recompute for the pending sessions (inside the caller's transaction, after it defined
    the shared macros: runner.analyse). `blind`: the
    plans of `plans()`, as `possible()` accepted them; `finish`: what to run after the
    detectors while the scope of the pending sessions is still there (gate_facts), given
    the detectors whose undecided units are to be counted again; `files`: files_digest(),
    when the caller has it."""
    blind = plans(con, counts, params.from_config(config)) if blind is None else blind
    values = params.from_config(config)
    con.execute(
        "CREATE OR REPLACE TEMP TABLE rg_affected AS "
        "SELECT DISTINCT session_hmac FROM analysis_pending"
    )
    for how in NEAR_SESSIONS.values():
        con.execute(
            f"""INSERT INTO rg_affected
                SELECT * FROM ({how["near"].format(table=_base(con, how["table"]))})
                EXCEPT SELECT session_hmac FROM rg_affected"""
        )
    _drop_scope(con)
    con.execute(f"CREATE SCHEMA {SCOPE}")
    _PATH.pop(id(con), None)  # not known until this run sets it
    seconds: dict[str, float] = {}
    _DATABASE[id(con)] = one_row(con.execute("SELECT current_database()"))[0]
    try:
        try:
            blind_before = con.execute(SESSION_BLIND).fetchall()
        except duckdb.CatalogException as e:
            raise Fallback("no partial blindness recorded") from e
        for blind_table in sorted({how["blind"] for how in BLIND_LOCAL.values()}):
            con.execute(
                f"CREATE OR REPLACE TEMP TABLE rg_was_{blind_table} AS "
                f"SELECT * FROM {_base(con, blind_table)}"
            )
        for table in SCOPED_RECORDS:
            _scoped_view(con, table)
        _new_rows(con)
        for q in catalog.load("prep"):
            # The session-local and row-wise steps leave the scope on the search path (what
            # they write back to main is named so): one statement for a stretch of them, not
            # two for each. Every other step reads main's tables.
            if q.name not in SESSION_PREP and q.name not in ROW_PREP:
                _search(con, scoped=False)
            if q.name in SESSION_PREP:
                _scoped_prep(con, q)
            elif q.name in ROW_PREP:
                base = ROW_PREP[q.name]
                con.execute(
                    f"""INSERT INTO {SCOPE}.{base}
                        SELECT * FROM {DELTA}.{base} WHERE session_hmac IS NULL"""
                )
                _scoped_prep(con, q, rows=True)
                # Those rows leave the scope again (copying the table anew read it whole).
                con.execute(f"DELETE FROM {SCOPE}.{base} WHERE NOT coalesce({_IN_SCOPE}, false)")
            elif q.name in ADDITIVE_PREP:
                _added_counts(con, q)
            elif q.name in KEYED_PREP:
                _keyed_prep(con, q, *KEYED_PREP[q.name])
            elif q.name == "macros":
                continue  # defined by the caller before the plans (runner.analyse)
            elif set(q.needs) == {"rollout"}:
                # The stage windows read the rollout log alone, which an incremental run
                # never follows a change of (ingest asks for a full analysis): its tables
                # stand as the last analysis left them (rebuilt, they were 6 statements
                # and 6 tables rewritten at the commit for the same rows).
                continue
            else:
                buckets.run(con, q)
        _search(con, scoped=False)
        if con.execute(SESSION_BLIND).fetchall() != blind_before:
            raise Fallback("a sessions file shows other facts than it did")
        nearby = _near_sessions(con)
        grown = _grown(con, files_digest(con) if files is None else files)
        runs = [
            (name, q, blind.get(name))
            for name, q in catalog.detectors().items()
            if not cannottell.missing_needs(q, counts) and not _stands(name, grown)
        ]
        recount = [name for name, q, _ in runs if q.header.list("undecided")]
        standing = _standing_stage_counts(con, runs)
        _forget(con, runs, nearby, standing)
        cannottell.record_cannot_tell_all(
            con,
            [(name, q, plan, standing.get(name, set())) for name, q, plan in runs if plan],
        )
        # The session-local detectors last, in one stretch on the scope's tables.
        runs.sort(key=lambda r: r[0] in SESSION_DETECTORS or r[0] in NEAR_SESSIONS)
        scoped = False
        for name, q, plan in runs:
            if plan is not None and plan.skip:
                continue
            t0 = time.perf_counter()
            bound = {"detector": name, **params.bind(q, values)}
            if name in SESSION_DETECTORS or name in NEAR_SESSIONS:
                near = NEAR_SESSIONS.get(name)
                rows = _IN_SCOPE
                if near is not None:
                    # Its rows without a session join the scope's for this run alone.
                    rows = f"({_IN_SCOPE} OR ({near['rows']}))"
                    table = _base(con, near["table"])
                    con.execute(
                        f"""INSERT INTO {SCOPE}.{near["table"]} SELECT * FROM {table}
                            WHERE rowid IN (SELECT rowid FROM {table} WHERE {near["rows"]})"""
                    )
                if not scoped:
                    _search(con, scoped=True)
                    scoped = True
                made = _scoped_shadow(con, plan, rows) if plan else []
                try:
                    con.execute(
                        f"""INSERT INTO main.findings BY NAME
                            SELECT $detector AS detector, * FROM ({q.sql})""",
                        bound,
                    )
                finally:
                    cannottell.unshadow(con, made)
                if near is not None:
                    kept = f"coalesce({_IN_SCOPE}, false)"
                    con.execute(f"DELETE FROM {SCOPE}.{near['table']} WHERE NOT {kept}")
            elif name in nearby:
                _near_run(con, q, plan, bound, nearby[name], BLIND_LOCAL[name]["tables"])
            elif name in ROW_DETECTORS:
                _row_run(con, q, plan, bound, ROW_DETECTORS[name])
            elif name in groups.DETECTORS:
                groups.rerun(
                    con,
                    name,
                    q.sql,
                    bound,
                    plan,
                    lambda t: _base(con, t),
                    lambda t: f"{SCOPE}.{t}",
                    lambda t: f"{DELTA}.{t}",
                )
            else:
                made = cannottell.shadow(con, plan) if plan else []
                try:
                    con.execute(
                        f"INSERT INTO main.findings BY NAME SELECT $detector AS detector, * "
                        f"FROM ({q.sql})",
                        bound,
                    )
                finally:
                    cannottell.unshadow(con, made)
            seconds[name] = time.perf_counter() - t0
        if scoped:
            _search(con, scoped=False)
        local = sorted(SESSION_DETECTORS.union(nearby).intersection(seconds))
        if one_row(
            con.execute(
                """SELECT count(*) FROM main.findings
                   WHERE list_contains($d, detector) AND session_hmac IS NULL""",
                {"d": local},
            )
        )[0]:
            raise Fallback("a session-local detector's finding without a session")
        # Each detector that ran: its findings now, counted in one statement.
        if seconds:
            con.execute(
                """UPDATE coverage c SET rows = coalesce(f.n, 0), seconds = s.seconds
                   FROM (SELECT unnest($names) AS detector, unnest($seconds) AS seconds) s
                   LEFT JOIN (SELECT detector, count(*) AS n FROM main.findings GROUP BY ALL) f
                     USING (detector)
                   WHERE c.detector = s.detector""",
                {"names": list(seconds), "seconds": list(seconds.values())},
            )
        if finish is not None:
            finish(recount)
    finally:
        _DATABASE.pop(id(con), None)
        # After a failed statement the transaction is aborted and the caller rolls back.
        with contextlib.suppress(duckdb.Error):
            _PATH.pop(id(con), None)  # set whatever this run last set
            _search(con, scoped=False)
            _drop_scope(con)
            _drop_schema(con, DELTA)
            con.execute("DROP TABLE IF EXISTS rg_new")
            con.execute("DROP TABLE IF EXISTS rg_fact_stages")
            for name, how in BLIND_LOCAL.items():
                con.execute(f"DROP TABLE IF EXISTS rg_was_{how['blind']}")
                con.execute(f"DROP TABLE IF EXISTS rg_near_{name}")
            for table in SAMPLED_TABLES:
                con.execute(f"DROP VIEW IF EXISTS temp.{table}")
        _PATH.pop(id(con), None)


def _grown(con: duckdb.DuckDBPyConnection, files: str) -> set[str]:
    """The record tables that received new rows since the last analysis; every one when a
    file was moved since (`files`, files_digest() now; or the last analysis did not note
    the files)."""
    if get_meta(con, FILES_META) != files:
        return {rt.table for rt in contract.RECORD_TYPES}
    return {
        str(t) for (t,) in con.execute("SELECT DISTINCT tbl FROM analysis_pending_rows").fetchall()
    }


def _stands(name: str, grown: set[str]) -> bool:
    """Does a detector's result stand as the last analysis left it (READS)?"""
    inputs = READS.get(name)
    return inputs is not None and grown.isdisjoint(inputs)


def _added_counts(con: duckdb.DuckDBPyConnection, q: catalog.Query) -> None:
    """Run a prepare query of counts (ADDITIVE_PREP) on copies of the record tables that
    hold only the new rows (schema `rg_delta`, first on the search path), and add what it
    counts to the table's counts."""
    tables = list(dict.fromkeys(_CREATES.findall(q.sql)))
    try:
        _set_path(con, f"{DELTA},main")
        try:
            for stmt in q.statements():
                con.execute(stmt)
        finally:
            _search(con, scoped=False)
        for t in tables:
            cols = _columns(con, DELTA, t)
            if "n" not in cols:
                raise Fallback(f"{t}: no count `n`")
            by = ", ".join(c for c in cols if c != "n")
            con.execute(
                f"""CREATE OR REPLACE TEMP TABLE rg_counts AS
                    SELECT {by}, sum(n)::BIGINT AS n
                    FROM (SELECT * FROM main.{t} UNION ALL SELECT * FROM {DELTA}.{t})
                    GROUP BY ALL"""
            )
            con.execute(f"DELETE FROM main.{t}")
            con.execute(f"INSERT INTO main.{t} BY NAME SELECT * FROM rg_counts")
            con.execute("DROP TABLE rg_counts")
    finally:
        for t in tables:
            con.execute(f"DROP TABLE IF EXISTS {DELTA}.{t}")


def _new_rows(con: duckdb.DuckDBPyConnection) -> None:
    """Copy the new rows of every record table (ingest notes where each file's new rows
    start, `analysis_pending_rows`) into schema `rg_delta`, once: the counts per stage
    (ADDITIVE_PREP) read them all; the keys of KEYED_PREP, the proxy rows of ROW_PREP, the
    gate facts and duplicate_dispatch's changed groups the new rows without a session
    (each found them by a join of its whole table with the pending files before)."""
    con.execute(f"CREATE SCHEMA {DELTA}")
    new = con.execute(
        """SELECT tbl, file_id, min(from_pos) FROM analysis_pending_rows
           GROUP BY ALL ORDER BY ALL"""
    ).fetchall()
    for rt in contract.RECORD_TYPES:
        base = _base(con, rt.table)
        # A file's new rows one file at a time: a filter on the file and its position
        # skips the blocks of other rows (a join with the pending files read them all).
        # The first file's make the table (an empty table first was a statement more).
        files = [(f, pos) for t, f, pos in new if t == rt.table]
        for k, (file_id, from_pos) in enumerate(files):
            into = f"INSERT INTO {DELTA}.{rt.table}" if k else f"CREATE TABLE {DELTA}.{rt.table} AS"
            con.execute(
                f"{into} SELECT * FROM {base} WHERE file_id = $f AND pos > $p",
                {"f": file_id, "p": from_pos},
            )
        if not files:
            con.execute(f"CREATE TABLE {DELTA}.{rt.table} AS SELECT * FROM {base} LIMIT 0")


def _standing_stage_counts(
    con: duckdb.DuckDBPyConnection,
    runs: list[tuple[str, catalog.Query, cannottell.Plan | None]],
) -> dict[str, set[tuple[str, str]]]:
    """Per detector, the entries (file, missing) of its plan's `cannot_tell` whose counts by
    stage stand as the last analysis stored them: those of files left out of its input
    (cannottell.plan) that received no new rows and hold no row of a pending session. A
    unit's stage is its rows' time and its session's cohort (cannottell.stage_units_sql),
    and its rows are its file's: neither changed. Counted again, each such entry joined
    its file's units with every session (0.06-0.09 CPU s of a 1 % append's re-analysis at
    1M, for files the append did not touch)."""
    grown = {
        (str(t), int(f))
        for t, f in con.execute(
            "SELECT DISTINCT tbl, file_id FROM analysis_pending_rows"
        ).fetchall()
    }
    candidates: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, q, plan in runs:
        u = cannottell.units(q)
        if plan is None or u is None:
            continue
        labels = set(q.header.list("undecided"))
        for entry in plan.cannot_tell:
            scope = entry["scope"]
            if scope is None or entry["missing"] in labels:
                continue  # a whole table's units, or a label its undecided units also count
            if any((u.table, int(f)) in grown for f in scope):
                continue
            candidates.setdefault(u.table, []).append((name, entry))
    out: dict[str, set[tuple[str, str]]] = {}
    for table, entries in candidates.items():
        ids = sorted({int(f) for _, entry in entries for f in entry["scope"]})
        touched = {
            int(r[0])
            for r in con.execute(
                f"""SELECT DISTINCT file_id FROM {_base(con, table)}
                    WHERE list_contains($ids, file_id)
                      AND session_hmac IN (SELECT session_hmac FROM rg_affected)""",
                {"ids": ids},
            ).fetchall()
        }
        for name, entry in entries:
            if not touched.intersection(int(f) for f in entry["scope"]):
                out.setdefault(name, set()).add((entry["file"], entry["missing"]))
    return out


# Joins the names of a cannot_tell entry (detector, file, missing) into one value: a
# file's path may hold any other character.
_SEP = "\x1f"
_STANDS = "list_contains($kept, concat_ws($sep, detector, file, missing))"


def _forget(
    con: duckdb.DuckDBPyConnection,
    runs: list[tuple[str, catalog.Query, cannottell.Plan | None]],
    near: dict[str, str],
    standing: dict[str, set[tuple[str, str]]],
) -> None:
    """Delete what the detectors about to run will find again, for them all at once (one
    statement per table, not a few per detector): the findings they replace (of the
    pending sessions for a session-local one, with those without a session for one of
    NEAR_SESSIONS; all for the rest; `duplicate_dispatch` replaces its changed groups'
    itself, groups.py), the units they returned undecided likewise, and counted again;
    the counts of what they could not tell: of the units they return undecided (their
    `-- undecided:` labels), and every count of one whose files are left out as in the
    last analysis (possible(): the counts of what those files hide grew with them)."""
    labelled = [f"{n}|{m}" for n, q, _ in runs for m in q.header.list("undecided")]
    planned = [n for n, _, p in runs if p is not None]
    # (the counts by stage of the entries that stand are kept: _standing_stage_counts)
    kept = [_SEP.join((n, f, m)) for n, entries in standing.items() for f, m in sorted(entries)]
    for table, stand in (("cannot_tell", "false"), ("cannot_tell_stages", _STANDS)):
        con.execute(
            f"""DELETE FROM main.{table}
                WHERE list_contains($planned, detector) AND NOT {stand}
                   OR list_contains($labelled, detector || '|' || missing)""",
            {"planned": planned, "labelled": labelled}
            | ({"kept": kept, "sep": _SEP} if table == "cannot_tell_stages" else {}),
        )
    ran = [n for n, _, p in runs if p is None or not p.skip]

    def replaced(names: list[str]) -> dict[str, list[str]]:
        return {
            "local": [n for n in names if n in SESSION_DETECTORS],
            "near": [n for n in names if n in NEAR_SESSIONS],
            "whole": [
                n
                for n in names
                if n not in SESSION_DETECTORS and n not in NEAR_SESSIONS
                and n not in groups.DETECTORS and n not in near and n not in ROW_DETECTORS
            ],
        }  # fmt: skip

    which = f"""list_contains($whole, detector)
                OR list_contains($local, detector) AND {_IN_SCOPE}
                OR list_contains($near, detector) AND ({_IN_SCOPE} OR session_hmac IS NULL)"""
    con.execute(f"DELETE FROM main.findings WHERE {which}", replaced(ran))
    undecided = [n for n, q, _ in runs if q.header.list("undecided")]
    units = replaced(undecided)
    units["whole"] += [n for n in undecided if n in groups.DETECTORS]
    con.execute(f"DELETE FROM main.cannot_tell_units WHERE {which}", units)
    # Those of BLIND_LOCAL run for some sessions: theirs.
    for n, sessions in near.items():
        mine = f"detector = $d AND session_hmac IN (SELECT session_hmac FROM {sessions})"
        if n in ran:
            con.execute(f"DELETE FROM main.findings WHERE {mine}", {"d": n})
        if n in undecided:
            con.execute(f"DELETE FROM main.cannot_tell_units WHERE {mine}", {"d": n})


def _near_sessions(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """For each detector of BLIND_LOCAL whose blindness table only grew, the temporary table
    of the sessions to run it for: the pending ones and those the growth may move."""
    out = {}
    for name, how in BLIND_LOCAL.items():
        if not one_row(con.execute(how["grew"]))[0]:
            continue  # run whole
        near = how["near"].format(proxy=_base(con, "proxy"), sessions=_base(con, "sessions"))
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE rg_near_{name} AS
                SELECT session_hmac FROM rg_affected UNION SELECT * FROM ({near})"""
        )
        out[name] = f"rg_near_{name}"
    return out


def _near_run(
    con: duckdb.DuckDBPyConnection,
    q: catalog.Query,
    plan: cannottell.Plan | None,
    bound: dict[str, Any],
    sessions: str,
    tables: tuple[str, ...],
) -> None:
    """Run a detector of BLIND_LOCAL for the sessions listed in `sessions`, on temporary
    views of its `tables` holding their rows (and the files its plan leaves out left out).
    When those are the pending sessions alone (the growth of the blindness table reached no
    other), the views read the scope's copies of their rows: read from the database's
    tables, the two detectors read every inbox, proxy and ledger row again (0.05-0.06 CPU s
    each of a 1 % append's re-analysis at 1M)."""
    rows = f"session_hmac IN (SELECT session_hmac FROM {sessions})"
    beyond = one_row(
        con.execute(
            f"""SELECT count(*) FROM (SELECT session_hmac FROM {sessions}
                                      EXCEPT SELECT session_hmac FROM rg_affected)"""
        )
    )[0]
    within = _tables(con) if not beyond else set()
    made = []
    for t in tables:
        if plan is None or t not in plan.exclude:
            source = f"{_database(con)}.{SCOPE}.{t}" if (SCOPE, t) in within else _base(con, t)
            con.execute(f"CREATE OR REPLACE TEMP VIEW {t} AS SELECT * FROM {source} WHERE {rows}")
            made.append(t)
    if plan is not None:
        shadow = cannottell.shadow if beyond else _scoped_shadow
        made += shadow(con, plan, rows)
    try:
        con.execute(
            f"INSERT INTO main.findings BY NAME SELECT $detector AS detector, * FROM ({q.sql})",
            bound,
        )
    finally:
        cannottell.unshadow(con, made)


def _row_run(
    con: duckdb.DuckDBPyConnection,
    q: catalog.Query,
    plan: cannottell.Plan | None,
    bound: dict[str, Any],
    once: str | None,
) -> None:
    """Run a detector of ROW_DETECTORS on temporary views of the new rows of the tables it
    reads (its plan's files left out), adding what it finds to the findings that stand;
    `once`: its columns, when it returns each finding once (a new row's finding equal to
    one found before is not added again)."""
    made = []
    try:
        for t in q.needs:
            out = plan.exclude.get(t, ()) if plan is not None else ()
            kept = f" WHERE file_id NOT IN ({', '.join(str(int(i)) for i in out)})" if out else ""
            con.execute(f"CREATE OR REPLACE TEMP VIEW {t} AS SELECT * FROM {DELTA}.{t}{kept}")
            made.append(t)
        new = f"SELECT * FROM ({q.sql})"
        if once is not None:
            new = f"""SELECT {once} FROM ({q.sql})
                      EXCEPT SELECT {once} FROM main.findings WHERE detector = $detector"""
        con.execute(
            f"INSERT INTO main.findings BY NAME SELECT $detector AS detector, * FROM ({new})",
            bound,
        )
    finally:
        cannottell.unshadow(con, made)


def _keyed_prep(con: duckdb.DuckDBPyConnection, q: catalog.Query, table: str, key: str) -> None:
    """Run a prepare query local to the groups of `table` by `key` (KEYED_PREP) on a copy
    of the rows of the new rows' keys (schema `rg_keyed`, first on the search path), and
    replace those keys' rows of its tables."""
    made = list(dict.fromkeys(_CREATES.findall(q.sql)))
    base = _base(con, table)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE rg_keys AS
            SELECT DISTINCT {key} FROM {DELTA}.{table} WHERE {key} IS NOT NULL"""
    )
    keyed = f"{key} IN (SELECT {key} FROM rg_keys)"
    con.execute(f"CREATE SCHEMA {KEYED}")
    try:
        con.execute(
            f"""CREATE TABLE {KEYED}.{table} AS SELECT * FROM {base}
                WHERE rowid IN (SELECT rowid FROM {base} WHERE {keyed})"""
        )
        _set_path(con, f"{KEYED},main")
        try:
            for stmt in q.statements():
                con.execute(stmt)
        finally:
            _search(con, scoped=False)
        for t in made:
            if key not in _columns(con, KEYED, t):
                raise Fallback(f"{t}: no `{key}`")
            if one_row(con.execute(f"SELECT count(*) FROM {KEYED}.{t} WHERE {key} IS NULL"))[0]:
                raise Fallback(f"{t}: a row without a `{key}`")
            con.execute(f"DELETE FROM main.{t} WHERE {keyed}")
            con.execute(f"INSERT INTO main.{t} BY NAME SELECT * FROM {KEYED}.{t}")
    finally:
        _drop_schema(con, KEYED)
        con.execute("DROP TABLE IF EXISTS rg_keys")


def _drop_schema(con: duckdb.DuckDBPyConnection, schema: str) -> None:
    # Its tables one by one: a table created and dropped with its schema in one
    # transaction makes DuckDB refuse the commit.
    for (t,) in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = $s "
        "AND database_name = current_database()",
        {"s": schema},
    ).fetchall():
        con.execute(f"DROP TABLE {schema}.{t}")
    con.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


def _drop_scope(con: duckdb.DuckDBPyConnection) -> None:
    _drop_schema(con, SCOPE)


def reset(con: duckdb.DuckDBPyConnection) -> None:
    """After a rollback: an aborted transaction refused the run's own clean-up, so the
    search path may still name the scope the rollback removed."""
    _PATH.pop(id(con), None)
    con.execute("RESET search_path")


# The search path each connection was last given here (during analyse()): a step that asks
# for the one it has sends no statement.
_PATH: dict[int, str] = {}


def _set_path(con: duckdb.DuckDBPyConnection, path: str) -> None:
    if _PATH.get(id(con)) != path:
        con.execute(f"SET search_path = '{path}'")
        _PATH[id(con)] = path


def _search(con: duckdb.DuckDBPyConnection, scoped: bool) -> None:
    _set_path(con, f"{SCOPE},main" if scoped else "main")


@contextlib.contextmanager
def _in_scope(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Statements inside read the scope's tables before main's; main again after."""
    _search(con, scoped=True)
    try:
        yield
    finally:
        _search(con, scoped=False)


# The database's name during analyse(), by connection: looked up once, not per table named.
_DATABASE: dict[int, str] = {}


def _database(con: duckdb.DuckDBPyConnection) -> str:
    db = _DATABASE.get(id(con)) or one_row(con.execute("SELECT current_database()"))[0]
    return f'"{db}"'


def _base(con: duckdb.DuckDBPyConnection, table: str) -> str:
    """A table of the database itself: `main.x` alone would also find a temporary view `x`
    (cannottell.shadow), which reads this scope's view of it."""
    return f"{_database(con)}.main.{table}"


# The record tables the scope holds copies of (every row of the pending sessions).
SCOPED_RECORDS = ("sessions", "streams", "events", "inbox", "dispatches", "proxy")


def _scoped_shadow(con: duckdb.DuckDBPyConnection, plan: cannottell.Plan, rows: str) -> list[str]:
    """cannottell.shadow for a run on the scope: the views that leave a detector's excluded
    files out read the scope's copy of a record table, which holds every row `rows` picks
    (the pending sessions', and the rows without a session a NEAR_SESSIONS run added to
    it), not the whole table again."""
    made = []
    for table, ids in plan.exclude.items():
        scoped = table in SCOPED_RECORDS
        source = f"{_database(con)}.{SCOPE}.{table}" if scoped else _base(con, table)
        listed = ", ".join(str(int(i)) for i in ids)
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {source} "
            f"WHERE file_id NOT IN ({listed}) AND ({rows})"
        )
        made.append(table)
    return made


_IN_SCOPE = "session_hmac IN (SELECT session_hmac FROM rg_affected)"


def _scoped_view(con: duckdb.DuckDBPyConnection, table: str, source: str | None = None) -> None:
    # A table, not a view: every scoped query after it reads the affected sessions' rows
    # without scanning the whole table again. The rows are found by their session column
    # alone, then fetched by row id: filtering every column of every row by the session
    # read the whole table (4-5x the CPU at 1M events).
    base = _base(con, source or table)
    con.execute(
        f"""CREATE OR REPLACE TABLE {SCOPE}.{table} AS SELECT * FROM {base}
            WHERE rowid IN (SELECT rowid FROM {base} WHERE {_IN_SCOPE})"""
    )


def _scoped_prep(con: duckdb.DuckDBPyConnection, q: catalog.Query, rows: bool = False) -> None:
    """Run a session-local prepare query for the affected sessions, then replace their
    rows in the full table; later scoped queries read the scoped rows. `rows`: a query of
    ROW_PREP, whose scope also held the new rows without a session."""
    tables = list(dict.fromkeys(_CREATES.findall(q.sql)))
    _search(con, scoped=True)  # left so: the statements below name main's tables
    buckets.run(con, q)
    for t in tables:
        # A table without session_hmac fails this statement (a binder error): the caller
        # rolls back and runs a full analysis (a look-up of the columns first was a
        # statement per table for nothing).
        con.execute(
            f"DELETE FROM main.{t} WHERE session_hmac IN (SELECT session_hmac FROM rg_affected)"
        )
        con.execute(f"INSERT INTO main.{t} BY NAME SELECT * FROM {SCOPE}.{t}")
        if rows:
            # What later scoped queries read: the affected sessions' rows, as in main now
            # (the scope of any other prepare query holds no other rows).
            con.execute(f"DELETE FROM {SCOPE}.{t} WHERE NOT coalesce({_IN_SCOPE}, false)")


# The record tables the gate facts take their units from (queries/sql/facts).
FACT_UNITS = ("inbox", "events", "streams", "dispatches", "proxy")


def gate_facts(
    con: duckdb.DuckDBPyConnection, statements: list[tuple[str, dict[str, Any]]]
) -> None:
    """The gate facts and stage samples (runner._facts_statements: the statements that
    build them whole), brought up to date after the detectors and the stages of their
    findings, within analyse() while its scope is there.

    A gate fact of a unit depends on the unit's row, its session's rows (a_sessions,
    a_inbox_sessions, a_recoveries, its earlier GETs) and the stage windows, which an
    incremental run leaves as they were; a fact of a row without a session, on that row
    and the windows. So the pending sessions' rows of a_gate_sessions are built again
    (a session keeps its key, a new one is numbered after the last), the facts of the
    pending sessions are built again from their rows, with the new rows without a
    session, by the same statement run on the scope; the facts of findings (a few per
    thousand units, from detectors of every kind) are built again whole. The stage
    samples are summarised again for the stages whose facts changed."""
    tables = _tables(con)
    if ("main", "a_gate_details") not in tables:
        raise Fallback("gate facts: not kept in a table per kind of unit yet")
    # Each table's statements: the one that makes it, and for a table declared with its
    # columns (a column's storage chosen: CREATE TABLE, then INSERT INTO it), its rows.
    build: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for stmt, bound in statements:
        bare = _COMMENTS.sub("", stmt).strip()
        if _TEMP_MACRO.match(bare):  # the readers' macros
            con.execute(stmt, bound)
            continue
        made = _CREATES.findall(stmt)
        filled = _INSERT.match(bare)
        if not made and filled and filled[1] in build:
            build[filled[1]].append((stmt, bound))
            continue
        if len(made) != 1 or made[0] not in FACT_TABLES or made[0] in build:
            raise Fallback(f"gate facts: a statement that builds {made or 'nothing'}")
        build[made[0]] = [(stmt, bound)]
    if set(build) != set(FACT_TABLES):
        raise Fallback("gate facts: not the statements expected")
    for table in FACT_UNITS:
        if (SCOPE, table) not in tables:
            _scoped_view(con, table)
        con.execute(
            f"INSERT INTO {SCOPE}.{table} SELECT * FROM {DELTA}.{table} WHERE session_hmac IS NULL"
        )
    # The pending sessions' keys and what they tell, from their a_sessions rows (up to
    # date now), numbered by the same statement on the scope.
    con.execute(
        f"""CREATE OR REPLACE TABLE {SCOPE}.a_sessions AS
            SELECT * FROM {_base(con, "a_sessions")} WHERE {_IN_SCOPE}"""
    )
    _build_in_scope(con, build["a_gate_sessions"])
    # The facts replaced: every finding's, and the pending sessions' units and proxy
    # records (by their key, or by session_hmac for those of a session not known before).
    old = f"""{_IN_SCOPE} OR sid IN (SELECT sid FROM main.a_gate_sessions WHERE {_IN_SCOPE})"""
    # The stages whose samples may change: those of the units replaced, before and after
    # (the samples summarise a record's units alone, SAMPLED_TABLES: no proxy record nor
    # finding).
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE rg_fact_stages AS
            {
            " UNION ".join(
                f"SELECT stage FROM main.{t} WHERE ({old}) AND stage IS NOT NULL"
                for t in SAMPLED_TABLES
            )
        }"""
    )
    for table in (*SAMPLED_TABLES, "a_gate_requests"):
        con.execute(f"DELETE FROM main.{table} WHERE {old}")
    con.execute("DELETE FROM main.a_gate_findings")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE rg_gate_sessions AS
            SELECT n.* REPLACE (coalesce(o.sid, m.top + row_number() OVER (
                       PARTITION BY o.sid IS NULL ORDER BY n.session_hmac))::INTEGER AS sid)
            FROM {SCOPE}.a_gate_sessions n
            LEFT JOIN main.a_gate_sessions o USING (session_hmac)
            CROSS JOIN (SELECT coalesce(max(sid), 0) AS top FROM main.a_gate_sessions) m"""
    )
    con.execute(f"DELETE FROM main.a_gate_sessions WHERE {_IN_SCOPE}")
    con.execute("INSERT INTO main.a_gate_sessions BY NAME SELECT * FROM rg_gate_sessions")
    con.execute("DROP TABLE rg_gate_sessions")
    # The whole of what the facts join their units to (up to date for the pending
    # sessions now), and every finding.
    for table in ("a_sessions", "a_inbox_sessions", "findings", "a_gate_sessions"):
        con.execute(f"DROP TABLE IF EXISTS {SCOPE}.{table}")
    con.execute(f"CREATE TABLE {SCOPE}.findings AS SELECT * FROM main.findings")
    for table in UNIT_TABLES:
        _build_in_scope(con, build[table])
        if table in SAMPLED_TABLES:
            con.execute(
                f"""INSERT INTO rg_fact_stages
                    SELECT DISTINCT stage FROM {SCOPE}.{table} WHERE stage IS NOT NULL
                    EXCEPT SELECT stage FROM rg_fact_stages"""
            )
        con.execute(f"INSERT INTO main.{table} BY NAME SELECT * FROM {SCOPE}.{table}")
        con.execute(f"DROP TABLE {SCOPE}.{table}")
    # The samples read the facts of those stages through a temporary view of their units
    # (temporary views come first whatever the search path), not a copy of them.
    try:
        for table in SAMPLED_TABLES:
            con.execute(
                f"""CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {_base(con, table)}
                    WHERE stage IN (SELECT stage FROM rg_fact_stages)"""
            )
        _build_in_scope(con, build["a_stage_samples"])
    finally:
        for table in SAMPLED_TABLES:
            con.execute(f"DROP VIEW IF EXISTS temp.{table}")
    con.execute(
        "DELETE FROM main.a_stage_samples WHERE stage IN (SELECT stage FROM rg_fact_stages)"
    )
    con.execute(f"INSERT INTO main.a_stage_samples BY NAME SELECT * FROM {SCOPE}.a_stage_samples")


def _build_in_scope(
    con: duckdb.DuckDBPyConnection, steps: list[tuple[str, dict[str, Any]]]
) -> None:
    """A gate fact table's statements run on the scope: the table is made there."""
    with _in_scope(con):
        for stmt, bound in steps:
            con.execute(stmt, bound)


# What the gate facts' statements build (queries/sql/facts/gate_facts.sql), besides the
# readers' temporary macros: the tables of the units, one per kind of unit, in this order;
# those of a record's units, which the stage samples summarise.
UNIT_TABLES = ("a_gate_units", "a_gate_details", "a_gate_requests", "a_gate_findings")
SAMPLED_TABLES = ("a_gate_units", "a_gate_details")
FACT_TABLES = ("a_gate_sessions", *UNIT_TABLES, "a_stage_samples")
_TEMP_MACRO = re.compile(r"CREATE\s+OR\s+REPLACE\s+TEMP\s+MACRO\s", re.IGNORECASE)
_INSERT = re.compile(r"INSERT\s+INTO\s+(\w+)\s", re.IGNORECASE)
_COMMENTS = re.compile(r"^\s*--.*$", re.MULTILINE)


def _columns(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> list[str]:
    """A table's column names, in their order (from a query of no rows: the catalog views
    of information_schema cost more than the statement that made the table)."""
    return [d[0] for d in con.execute(f"SELECT * FROM {schema}.{table} LIMIT 0").description]


def _tables(con: duckdb.DuckDBPyConnection) -> set[tuple[str, str]]:
    """The database's tables, (schema, name), in one look-up (one per table asked about
    was ten statements of the gate facts)."""
    return {
        (str(s), str(t))
        for s, t in con.execute(
            "SELECT schema_name, table_name FROM duckdb_tables() "
            "WHERE database_name = current_database()"
        ).fetchall()
    }
