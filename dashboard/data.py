"""Data access for the dashboard: a read-only store and cached named queries.

Every read goes through the named queries of queries/sql/dashboard (`named`, through
`replaygate.api`, and the dashboard's model, `dashboard/model.py`), with the one filter
model of `Filters`; no SQL lives here.

The store opens a read-only DuckDB connection per cache miss and closes it at
once, so an ingest (which needs the write lock) is never blocked for long by an
open dashboard; while an ingest holds the lock, pages say so instead of failing.
Results are cached per data version, so a new ingest invalidates them.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import time

import duckdb
import pandas as pd
import streamlit as st

from replaygate import api
from replaygate.api import Config, Filters, escape, named, resolve_config
from replaygate.api import db as dbm

from . import model


class DatabaseBusy(Exception):
    """An ingest holds the write lock right now."""


class Store:
    def __init__(self, path: str, config: Config, config_note: str = "", config_given=False):
        self.path = path
        self.config = config
        # Which configuration this is (--config, or the one stored with the analysis).
        self.config_note = config_note
        self.config_given = config_given

    @contextlib.contextmanager
    def connect(self):
        if not os.path.exists(self.path):
            raise FileNotFoundError(f"no database at {self.path}")
        last = None
        for _ in range(3):
            try:
                con = duckdb.connect(self.path, read_only=True, config=dbm.open_config(True))
                break
            except duckdb.IOException as exc:  # locked by a writer
                last = exc
                time.sleep(0.3)
        else:
            raise DatabaseBusy(str(last).splitlines()[0]) from None
        try:
            con.execute("SET TimeZone = 'UTC'")
            con.execute("SET enable_progress_bar = false")
            # The floor, not the analysis' limit: it reads what the analysis made (core/db.py).
            con.execute("SET memory_limit = $m", {"m": dbm.memory_limit("dashboard")})
            dbm.harden(con, read_only=True)
            yield con
        finally:
            con.close()

    def stamp(self) -> tuple[str, bool]:
        """(data version, whether findings are current for it and this config)."""
        with self.connect() as con:
            version = dbm.get_meta(con, "data_version", "0")
            try:
                current = api.is_current(con, self.config)
            except duckdb.Error:
                current = False
        return f"{version}:{self.config.digest()}", current


@st.cache_resource
def store() -> Store:
    path = os.environ.get("REPLAYGATE_DB", "replaygate.duckdb")
    # Without a configuration given, the one the analysis ran with: the numbers shown are
    # those `replaygate gates --db PATH` gives in any folder.
    resolved = resolve_config(path, os.environ.get("REPLAYGATE_CONFIG") or None)
    return Store(path, resolved.config, resolved.note, resolved.origin == "given")


def gates_command(stage: str) -> str:
    """The CLI command that gives this dashboard's evaluation of a stage."""
    s = store()
    args = ["replaygate", "gates", "--db", s.path, "--stage", stage]
    if s.config_given:
        args += ["--config", os.environ.get("REPLAYGATE_CONFIG", "")]
    return shlex.join(args)


@contextlib.contextmanager
def _named():
    """A connection with the named queries' macros defined."""
    with store().connect() as con:
        named.prepare(con)
        yield con


def _df(name: str, **args) -> pd.DataFrame:
    with _named() as con:
        return named.df(con, name, **args)


# Every cached function takes the stamp first, so a new ingest is a cache miss.


@st.cache_data(show_spinner=False)
def gates_doc(stamp: str, stage: str | None, all_stages: bool = False) -> dict:
    s = store()
    with s.connect() as con:
        return api.gates_doc(con, s.config, stage=stage, all_stages=all_stages)


@st.cache_data(show_spinner=False)
def gate_measures(stamp: str, f: Filters, scope: str | None = None) -> list[dict]:
    """Every gate's measure under the filters (equal to the decision's under a stage alone)."""
    s = store()
    decided = None
    if model.stage_alone(f):
        doc = gates_doc(stamp, None, True)  # the Overview's and Rollout's, cached once
        decided = next((x for x in doc.get("stages", []) if x["stage"] == f.stage), None)
    with _named() as con:
        return model.gate_measures(con, s.config, f, scope, decided)


@st.cache_data(show_spinner=False)
def stages(stamp: str) -> pd.DataFrame:
    return _df("stages")


@st.cache_data(show_spinner=False)
def rollout_actions(stamp: str) -> pd.DataFrame:
    return _df("rollout_actions")


@st.cache_data(show_spinner=False)
def filter_options(stamp: str) -> dict:
    values = _df("filter_values")
    span = _df("data_span")
    by = {
        d: list(values.loc[values["dim"] == d, "value"]) for d in ("revision", "server", "client")
    }
    lo, hi = span.iloc[0]["first_ts"], span.iloc[0]["last_ts"]
    return {
        "revisions": by["revision"],
        "servers": by["server"],
        "clients": by["client"],
        "span": (
            None if pd.isna(lo) else lo.to_pydatetime(),
            None if pd.isna(hi) else hi.to_pydatetime(),
        ),
    }


@st.cache_data(show_spinner=False)
def source_freshness(stamp: str) -> dict:
    """The data's newest plausible time and the warnings of queries/freshness.py (sources
    behind the others, records dated after the last ingest)."""
    with store().connect() as con:
        return api.freshness_of(con)


@st.cache_data(show_spinner=False)
def freshness(stamp: str) -> pd.DataFrame:
    return _df("freshness")


@st.cache_data(show_spinner=False)
def findings(stamp: str, f: Filters, detectors: tuple[str, ...] = ()) -> pd.DataFrame:
    return _df("findings", flt=f, dets=list(detectors))


@st.cache_data(show_spinner=False)
def findings_of_severity(
    stamp: str, f: Filters, detectors: tuple[str, ...], severities: tuple[str, ...]
) -> pd.DataFrame:
    df = findings(stamp, f, detectors)
    return df[df["severity"].isin(severities)] if severities else df


@st.cache_data(show_spinner=False)
def findings_file(
    stamp: str, f: Filters, detectors: tuple[str, ...], severities: tuple[str, ...], file_type: str
) -> bytes:
    """A download of the Findings page: CSV (formula cells neutralised) or Parquet, made
    when its button is clicked and kept per data version and filter."""
    df = findings_of_severity(stamp, f, detectors, severities)
    if file_type == "csv":
        return escape.csv_bytes(df)
    buf = io.BytesIO()
    df.to_parquet(buf, index=False)
    return buf.getvalue()


@st.cache_data(show_spinner=False)
def finding_summary(stamp: str, f: Filters, detectors: tuple[str, ...] = ()) -> pd.DataFrame:
    return _df("finding_summary", flt=f, dets=list(detectors))


@st.cache_data(show_spinner=False)
def findings_over_time(stamp: str, f: Filters, detectors: tuple[str, ...], bucket) -> pd.DataFrame:
    return _df("findings_over_time", flt=f, dets=list(detectors), bucket=bucket)


@st.cache_data(show_spinner=False)
def recoveries(stamp: str, f: Filters) -> pd.DataFrame:
    return _df("recoveries", flt=f)


@st.cache_data(show_spinner=False)
def resumes_over_time(stamp: str, f: Filters, bucket) -> pd.DataFrame:
    return _df("stream_states_over_time", flt=f, bucket=bucket)


@st.cache_data(show_spinner=False)
def dispatch_mix(stamp: str, f: Filters, bucket) -> pd.DataFrame:
    return _df("dispatch_mix", flt=f, bucket=bucket)


@st.cache_data(show_spinner=False)
def proxy_status(stamp: str, f: Filters, bucket) -> pd.DataFrame:
    return _df("proxy_status", flt=f, bucket=bucket)


@st.cache_data(show_spinner=False)
def reconnects(stamp: str, f: Filters) -> pd.DataFrame:
    return _df("reconnects", flt=f)


@st.cache_data(show_spinner=False)
def inspector_subjects(stamp: str, f: Filters, limit: int = 500) -> pd.DataFrame:
    return _df("inspector_subjects", flt=f, limit=limit)


@st.cache_data(show_spinner=False)
def timeline(stamp: str, session_hmac: str, stream_id: str | None) -> pd.DataFrame:
    """One session (or stream) as rows of (ts, lane, label, kind, ...) for the inspector."""
    return _df("session_timeline", s=session_hmac, stream=stream_id)


@st.cache_data(show_spinner=False)
def sessionless_timeline(stamp: str, subject: str | None, at=None) -> pd.DataFrame:
    return _df("sessionless_timeline", subject=subject, at=at)


@st.cache_data(show_spinner=False)
def streams_of(stamp: str, session_hmac: str) -> list[str]:
    return list(_df("streams_of", s=session_hmac)["stream_id"])


@st.cache_data(show_spinner=False)
def data_overview(stamp: str) -> dict:
    from replaygate.api import data_status

    with _named() as con:
        return {
            "status": data_status(con),
            "files": named.df(con, "files"),
            "quarantine": named.df(con, "quarantine"),
            "coverage": named.df(con, "coverage"),
            "cannot_tell": named.df(con, "cannot_tell"),
        }


@st.cache_data(show_spinner=False)
def report(stamp: str, stage: str, fmt: str) -> bytes:
    """The audit report of a stage, as `replaygate report` writes it."""
    from replaygate.api import reportdoc as rep

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
