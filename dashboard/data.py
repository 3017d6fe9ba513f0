"""Data access for the dashboard: a read-only store and cached queries.

The store opens a read-only DuckDB connection per cache miss and closes it at
once, so an ingest (which needs the write lock) is never blocked for long by an
open dashboard; while an ingest holds the lock, pages say so instead of failing.
Results are cached per data version, so a new ingest invalidates them.
"""

from __future__ import annotations

import contextlib
import os
import time

import duckdb
import pandas as pd
import streamlit as st

from replaygate.ingest import db as dbm
from replaygate.ingest.config import Config
from replaygate.queries import api, runner
from replaygate.queries.api import load_config
from replaygate.queries.params import from_config

from .state import Filters, findings_where


class DatabaseBusy(Exception):
    """An ingest holds the write lock right now."""


class Store:
    def __init__(self, path: str, config: Config):
        self.path = path
        self.config = config

    @contextlib.contextmanager
    def connect(self):
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no database at {self.path}")
        last = None
        for _ in range(3):
            try:
                con = duckdb.connect(self.path, read_only=True)
                break
            except duckdb.IOException as exc:  # locked by a writer
                last = exc
                time.sleep(0.3)
        else:
            raise DatabaseBusy(str(last).splitlines()[0]) from None
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")
            yield con
        finally:
            con.close()

    def stamp(self) -> tuple[str, bool]:
        """(data version, whether findings are current for it and this config)."""
        with self.connect() as con:
            version = dbm.get_meta(con, "data_version", "0")
            try:
                current = runner.is_current(con, self.config)
            except duckdb.Error:
                current = False
        return f"{version}:{self.config.digest()}", current


@st.cache_resource
def store() -> Store:
    path = os.environ.get("REPLAYGATE_DB", "replaygate.duckdb")
    return Store(path, load_config(os.environ.get("REPLAYGATE_CONFIG") or None))


def _df(con, sql: str, args: dict | None = None) -> pd.DataFrame:
    return con.execute(sql, args or {}).df()


# Every cached function takes the stamp first, so a new ingest is a cache miss.


@st.cache_data(show_spinner=False)
def gates_doc(stamp: str, stage: str | None, all_stages: bool = False) -> dict:
    s = store()
    with s.connect() as con:
        return api.gates_doc(con, s.config, stage=stage, all_stages=all_stages)


@st.cache_data(show_spinner=False)
def stages(stamp: str) -> pd.DataFrame:
    with store().connect() as con:
        return _df(con, "SELECT * FROM a_stages ORDER BY start_ts")


@st.cache_data(show_spinner=False)
def rollout_actions(stamp: str) -> pd.DataFrame:
    with store().connect() as con:
        return _df(con, "SELECT ts, stage, action, scope, percent, note FROM rollout ORDER BY ts")


@st.cache_data(show_spinner=False)
def filter_options(stamp: str) -> dict:
    with store().connect() as con:

        def values(col):
            return [
                r[0]
                for r in con.execute(
                    f"SELECT DISTINCT {col} FROM a_sessions WHERE {col} IS NOT NULL ORDER BY 1"
                ).fetchall()
            ]

        span = con.execute(
            "SELECT min(ts), max(ts) FROM (SELECT ts FROM proxy UNION ALL SELECT ts FROM sessions)"
        ).fetchone()
        revs = values("protocol_version")
        if (
            "2026-07-28" not in revs
            and con.execute(
                "SELECT count(*) FROM dispatches WHERE session_hmac IS NULL"
            ).fetchone()[0]
        ):
            revs.append("2026-07-28")
        return {
            "revisions": revs,
            "servers": values("server_instance"),
            "clients": values("client_name"),
            "span": span,
        }


_FINDINGS = """
    SELECT f.detector, f.severity, f.ts, f.stage, f.session_hmac, f.generation, f.stream_id,
           f.event_id, f.dispatch_id, f.idempotency_key, f.detail,
           coalesce(a.protocol_version,
                    CASE WHEN f.session_hmac IS NULL THEN '2026-07-28' END) AS revision,
           a.server_instance AS server, a.client_name AS client
    FROM findings f LEFT JOIN a_sessions a USING (session_hmac)
    WHERE {where}
    ORDER BY CASE f.severity WHEN 'critical' THEN 0 WHEN 'high' THEN 1
             WHEN 'medium' THEN 2 ELSE 3 END, f.ts
"""


@st.cache_data(show_spinner=False)
def findings(stamp: str, f: Filters, detectors: tuple[str, ...] = ()) -> pd.DataFrame:
    where, args = findings_where(f)
    if detectors:
        where += " AND list_contains($dets, f.detector)"
        args["dets"] = list(detectors)
    with store().connect() as con:
        return _df(con, _FINDINGS.format(where=where), args)


@st.cache_data(show_spinner=False)
def findings_over_time(stamp: str, f: Filters, detectors: tuple[str, ...]) -> pd.DataFrame:
    where, args = findings_where(f)
    args["dets"] = list(detectors)
    sql = f"""SELECT time_bucket(INTERVAL 15 MINUTE, f.ts) AS bucket, f.detector,
                     count(*) AS n
              FROM findings f LEFT JOIN a_sessions a USING (session_hmac)
              WHERE {where} AND list_contains($dets, f.detector)
              GROUP BY ALL ORDER BY bucket"""
    with store().connect() as con:
        return _df(con, sql, args)


def _time_where(f: Filters, col: str = "ts") -> tuple[str, dict]:
    where, args = ["true"], {}
    if f.start:
        where.append(f"{col} >= $start")
        args["start"] = f.start
    if f.end:
        where.append(f"{col} <= $end")
        args["end"] = f.end
    return " AND ".join(where), args


@st.cache_data(show_spinner=False)
def recoveries(stamp: str, f: Filters) -> pd.DataFrame:
    where, args = _time_where(f, "disc_ts")
    with store().connect() as con:
        return _df(
            con,
            f"""SELECT disc_ts, secs, retry_ms FROM a_recoveries
                            WHERE reopen_ts IS NOT NULL AND {where}""",
            args,
        )


@st.cache_data(show_spinner=False)
def resumes_over_time(stamp: str, f: Filters) -> pd.DataFrame:
    where, args = _time_where(f)
    with store().connect() as con:
        return _df(
            con,
            f"""SELECT time_bucket(INTERVAL 15 MINUTE, ts) AS bucket, state,
                                   count(*) AS n
                            FROM streams
                            WHERE state IN ('DISCONNECTED', 'RESUME_PENDING', 'CURSOR_REJECTED')
                              AND {where}
                            GROUP BY ALL ORDER BY bucket""",
            args,
        )


@st.cache_data(show_spinner=False)
def dispatch_mix(stamp: str, f: Filters) -> pd.DataFrame:
    where, args = _time_where(f, "d.ts")
    with store().connect() as con:
        return _df(
            con,
            f"""
            SELECT time_bucket(INTERVAL 30 MINUTE, d.ts) AS bucket, d.outcome,
                   coalesce(a.protocol_version,
                            CASE WHEN d.session_hmac IS NULL THEN '2026-07-28' END,
                            'unknown') AS revision,
                   d.tool_class, d.idempotency_key IS NOT NULL AS keyed, count(*) AS n
            FROM dispatches d LEFT JOIN a_sessions a USING (session_hmac)
            WHERE {where} GROUP BY ALL ORDER BY bucket""",
            args,
        )


@st.cache_data(show_spinner=False)
def proxy_status(stamp: str, f: Filters) -> pd.DataFrame:
    where, args = _time_where(f)
    with store().connect() as con:
        return _df(
            con,
            f"""SELECT time_bucket(INTERVAL 15 MINUTE, ts) AS bucket,
                                   (status // 100) || 'xx' AS class, count(*) AS n
                            FROM proxy WHERE {where} GROUP BY ALL ORDER BY bucket""",
            args,
        )


@st.cache_data(show_spinner=False)
def reconnects(stamp: str, f: Filters) -> pd.DataFrame:
    where, args = _time_where(f)
    with store().connect() as con:
        return _df(
            con,
            f"""SELECT make_timestamptz((epoch_ms(ts) // 10000) * 10000000) AS win,
                                   count(*) / 10.0 AS qps
                            FROM proxy
                            WHERE ((method = 'GET' AND last_event_id IS NOT NULL)
                                   OR status IN (429, 503)) AND {where}
                            GROUP BY ALL ORDER BY win""",
            args,
        )


@st.cache_data(show_spinner=False)
def http_checks(stamp: str) -> dict:
    s = store()
    with s.connect() as con:
        q = con.execute("""SELECT count(*) FILTER (WHERE status = 404 AND session_hmac IS NOT NULL
                                                  AND method <> 'DELETE'),
                                  count(*) FILTER (WHERE protocol_version IS NULL
                                                   AND session_hmac IS NOT NULL)
                           FROM proxy""").fetchone()
        origin = con.execute(
            """SELECT count(*), count(*) FILTER (WHERE status <> 403) FROM proxy
               WHERE origin IS NOT NULL
                 AND len(list_filter($p, lambda x: like_escape(origin, x, '\\'))) = 0""",
            {"p": from_config(s.config)["origin_patterns"]},
        ).fetchone()
    return {
        "n404": q[0],
        "no_version": q[1],
        "invalid_origin": origin[0],
        "invalid_origin_served": origin[1],
    }


@st.cache_data(show_spinner=False)
def sessions_for_inspector(stamp: str, f: Filters, limit: int = 500) -> pd.DataFrame:
    where, args = findings_where(f)
    with store().connect() as con:
        return _df(
            con,
            f"""
            SELECT f.session_hmac, count(*) AS findings, list(DISTINCT f.detector) AS detectors,
                   min(f.ts) AS first
            FROM findings f LEFT JOIN a_sessions a USING (session_hmac)
            WHERE f.session_hmac IS NOT NULL AND {where}
            GROUP BY f.session_hmac ORDER BY findings DESC, first LIMIT $limit""",
            {**args, "limit": limit},
        )


@st.cache_data(show_spinner=False)
def timeline(stamp: str, session_hmac: str, stream_id: str | None) -> pd.DataFrame:
    """One session (or stream) as rows of (ts, lane, label, kind) for the inspector."""
    args = {"s": session_hmac, "st": stream_id}
    stream_cond = "($st IS NULL OR stream_id = $st)"
    sql = f"""
        SELECT ts, 'session ledger' AS lane, state AS label, state AS kind, NULL AS stream_id,
               'generation ' || generation AS info
        FROM sessions WHERE session_hmac = $s
        UNION ALL
        SELECT ts, 'stream ledger', state, state, stream_id,
               concat_ws(' ', 'stream ' || stream_id, close_reason,
                         'resume from ' || resume_from_event_id)
        FROM streams WHERE session_hmac = $s AND {stream_cond}
        UNION ALL
        SELECT ts, 'server events', kind || ' #' || seq, disposition, stream_id,
               'stream ' || stream_id || ', event ' || event_id
        FROM events WHERE session_hmac = $s AND {stream_cond}
        UNION ALL
        SELECT ts, 'client receipts',
               coalesce(kind, 'event') || ' #' || coalesce(seq::VARCHAR, '?'),
               verdict, stream_id,
               'arrived on ' || stream_id || ', from ' || coalesce(origin_stream_id, '?')
               || ', event ' || event_id
        FROM a_inbox WHERE session_hmac = $s AND {stream_cond}
        UNION ALL
        SELECT ts, 'proxy requests', method || ' ' || status, 'http ' || (status // 100) || 'xx',
               NULL, concat_ws(' ', jsonrpc_method, 'Last-Event-ID ' || last_event_id, origin)
        FROM proxy WHERE session_hmac = $s
        UNION ALL
        SELECT ts, 'dispatches', tool_name || ' ' || outcome, outcome, NULL,
               concat_ws(' ', dispatch_id, 'key ' || idempotency_key)
        FROM dispatches WHERE session_hmac = $s
        ORDER BY ts
    """
    with store().connect() as con:
        return _df(con, sql, args)


@st.cache_data(show_spinner=False)
def streams_of(stamp: str, session_hmac: str) -> list[str]:
    with store().connect() as con:
        return [
            r[0]
            for r in con.execute(
                "SELECT DISTINCT stream_id FROM streams WHERE session_hmac = $s ORDER BY 1",
                {"s": session_hmac},
            ).fetchall()
        ]


@st.cache_data(show_spinner=False)
def data_overview(stamp: str) -> dict:
    with store().connect() as con:
        from replaygate.ingest.status import status

        return {
            "status": status(con),
            "files": _df(
                con,
                """SELECT path, format, size, sha256, rows_loaded, rows_quarantined,
                                        ingested_at, status FROM files ORDER BY file_id""",
            ),
            "quarantine": _df(
                con,
                """SELECT path, line, "row", record_type, reason
                                      FROM quarantine ORDER BY path, line, "row" LIMIT 5000""",
            ),
            "coverage": _df(
                con, "SELECT detector, status, rows, seconds FROM coverage ORDER BY detector"
            ),
        }


@st.cache_data(show_spinner=False)
def report(stamp: str, stage: str, fmt: str) -> bytes:
    """The audit report of a stage, as `replaygate report` writes it."""
    from replaygate.queries import report as rep

    from . import report as render

    s = store()
    with s.connect() as con:
        doc = rep.build(
            con, s.config, stage, db_path=s.path, config_path=os.environ.get("REPLAYGATE_CONFIG")
        )
    if fmt == "md":
        return render.to_markdown(doc).encode()
    if fmt == "json":
        return render.to_json(doc).encode()
    return render.to_html(doc).encode()
