"""Run the prepare step and the detectors; materialise `findings` and `coverage`.

The findings of one analysis are stamped with the data version and the
configuration digest, so readers know whether they are current.
"""

from __future__ import annotations

import time

import duckdb

from replaygate.ingest.config import Config
from replaygate.ingest.contract import RECORD_TYPES
from replaygate.ingest.db import get_meta, set_meta

from . import catalog, incremental, params

FINDINGS_DDL = """
CREATE TABLE IF NOT EXISTS findings (
    detector VARCHAR, severity VARCHAR, ts TIMESTAMPTZ, stage VARCHAR,
    session_hmac VARCHAR, generation BIGINT, stream_id VARCHAR, event_id VARCHAR,
    dispatch_id VARCHAR, idempotency_key VARCHAR, detail JSON
);
CREATE TABLE IF NOT EXISTS coverage (detector VARCHAR, status VARCHAR, rows BIGINT,
                                     seconds DOUBLE);
"""
_MISSING_LABEL = {
    "sessions": "no session ledger",
    "streams": "no stream ledger",
    "events": "no event log",
    "inbox": "no client inbox",
    "dispatches": "no dispatch records",
    "proxy": "no proxy log",
    "rollout": "no rollout log",
}


def table_counts(con) -> dict[str, int]:
    return {
        rt.table: con.execute(f"SELECT count(*) FROM {rt.table}").fetchone()[0]
        for rt in RECORD_TYPES
    }


def missing_needs(q, counts: dict[str, int]) -> list[str]:
    """The needs of a query that the record counts do not meet (a need "a|b" is met by
    either record type)."""
    return [n for n in q.needs if not any(counts.get(t) for t in n.split("|"))]


def missing_label(need: str) -> str:
    """A need as people read its absence: "no proxy log", "no client inbox and no proxy log"."""
    return " and ".join(_MISSING_LABEL[t] for t in need.split("|"))


def stamp(con, config: Config) -> str:
    return f"{get_meta(con, 'data_version', '0')}:{config.digest()}"


def is_current(con, config: Config) -> bool:
    return get_meta(con, "analysis_stamp") == stamp(con, config)


def analyse(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    only: list[str] | None = None,
    force: bool = False,
) -> dict:
    """Refresh derived tables and findings (skipped when already current)."""
    if not force and only is None and is_current(con, config):
        return summary(con)
    values = params.from_config(config)
    counts = table_counts(con)
    if not force and only is None and _incrementally(con, config, counts):
        return summary(con)
    con.execute("BEGIN TRANSACTION")
    try:
        for stmt in FINDINGS_DDL.split(";"):
            if stmt.strip():
                con.execute(stmt)
        for q in catalog.load("prep"):
            for stmt in q.statements():
                con.execute(stmt)
        con.execute("DELETE FROM findings")
        con.execute("DELETE FROM coverage")
        for name, q in catalog.detectors().items():
            if only and name not in only:
                continue
            missing = missing_needs(q, counts)
            if missing:
                label = missing_label(missing[0])
                con.execute("INSERT INTO coverage VALUES ($d, $s, 0, 0)", {"d": name, "s": label})
                continue
            t0 = time.perf_counter()
            n = con.execute(
                f"INSERT INTO findings BY NAME SELECT $detector AS detector, * FROM ({q.sql})",
                {"detector": name, **params.bind(q, values)},
            ).fetchone()[0]
            con.execute(
                "INSERT INTO coverage VALUES ($d, 'ok', $n, $s)",
                {"d": name, "n": n, "s": time.perf_counter() - t0},
            )
        _assign_stages(con)
        if only is None:
            set_meta(con, "analysis_stamp", stamp(con, config))
            set_meta(con, "analysis_mode", "full")
            incremental.clear_pending(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return summary(con)


def _incrementally(con, config: Config, counts: dict[str, int]) -> bool:
    """Bring the last analysis up to date for what changed (incremental.py), if it can."""
    if not incremental.possible(con, config, counts):
        return False
    con.execute("BEGIN TRANSACTION")
    try:
        incremental.analyse(con, config, counts)
        _assign_stages(con)
        set_meta(con, "analysis_stamp", stamp(con, config))
        set_meta(con, "analysis_mode", "incremental")
        incremental.clear_pending(con)
        con.execute("COMMIT")
    except (incremental.Fallback, duckdb.Error):
        # Whatever went wrong, a full analysis gives the right answer.
        con.execute("ROLLBACK")
        return False
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return True


def _assign_stages(con) -> None:
    # The same attribution as every gate sample (stage_key in macros.sql).
    con.execute("""
        CREATE OR REPLACE TEMP TABLE rg_staged AS
        SELECT f.* EXCLUDE (stage), w.stage
        FROM findings f
        LEFT JOIN a_sessions a ON a.session_hmac = f.session_hmac
        LEFT JOIN a_stage_windows w
          ON attributed(w.key, w.start_ts, w.end_ts, a.session_hmac IS NOT NULL, a.cohort, f.ts)
    """)
    con.execute("DELETE FROM findings")
    con.execute("INSERT INTO findings BY NAME SELECT * FROM rg_staged")
    con.execute("DROP TABLE rg_staged")


def summary(con) -> dict:
    by_sev = dict(
        con.execute("SELECT severity, count(*) FROM findings GROUP BY severity").fetchall()
    )
    total = sum(by_sev.values())
    return {"total": total, "by_severity": by_sev}


def coverage(con) -> dict[str, str]:
    rows = dict(con.execute("SELECT detector, status FROM coverage").fetchall())
    return {name: rows.get(name, "not run") for name in catalog.detectors()}
