"""DuckDB connection and schema: one table per record type plus bookkeeping tables."""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, overload

import duckdb

from . import lock
from .contract import DERIVED, PROVENANCE, RECORD_TYPES
from .errors import ReplaygateError

SCHEMA_VERSION = "1"

# Memory DuckDB may hold before it spills to disk (its own default is 80 % of RAM, which
# a 10M-event analysis fills: 8.5 GB at its peak). Ingest streams each file through
# staging and needs little. An analysis joins and groups whole tables, whose size grows
# with the events stored: 3 GB keeps a 10M-event analysis under 4 GB of resident memory
# at a small cost in time, but at 100M every step spills under it (1,185 CPU s against
# 705.5 under 12 GB, peak 12.3 GB; docs/performance.md, 2026-12-04 afternoon). So the
# analysis' limit grows with the events, 0.3 GB a million past 10M, up to 12 GB or 60 % of
# the memory this machine (or its cgroup) has, whichever is less, and never below 3 GB.
# The dashboard reads what the analysis made (findings, the gate facts), a long-lived
# server beside which an analysis may run: it keeps the floor (its gate measures peak at
# 2.2 GB at 100M, nothing spilled). REPLAYGATE_MEMORY_LIMIT overrides every one.
INGEST_LIMIT = "1.5GB"
GB = 10**9
ANALYSIS_FLOOR = 3 * GB
ANALYSIS_PER_EVENT = 300  # bytes: 0.3 GB per million events stored
ANALYSIS_CAP = 12 * GB
RAM_SHARE = 0.6


def analysis_limit(events: int, ram: int | None) -> int:
    """The memory limit, in bytes, of an analysis of a store of `events` events on a
    machine with `ram` bytes of memory (None: not known, then the floor)."""
    cap = ANALYSIS_FLOOR if ram is None else min(ANALYSIS_CAP, int(RAM_SHARE * ram))
    return max(ANALYSIS_FLOOR, min(events * ANALYSIS_PER_EVENT, cap))


def physical_memory() -> int | None:
    """Bytes of memory this process may use: the machine's, or its cgroup's limit if
    lower (a container); None where the platform does not say."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    for limit in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            total = min(total, int(Path(limit).read_text().strip()))
    return total if total > 0 else None


def memory_limit(work: str = "analysis", events: int = 0) -> str:
    """The memory limit for a kind of work (`ingest`, `dashboard`, or `analysis` of a
    store of `events` events: `analysis_limit`), or the override."""
    override = os.environ.get("REPLAYGATE_MEMORY_LIMIT")
    if override:
        return override
    if work == "ingest":
        return INGEST_LIMIT
    if work == "dashboard":
        return f"{ANALYSIS_FLOOR // 10**6}MB"
    return f"{analysis_limit(events, physical_memory()) // 10**6}MB"


def memory_help() -> str:
    """The rule in words, for the CLI's help and the docs."""
    return (
        f"Memory: ingest runs under {INGEST_LIMIT.replace('GB', ' GB')}; an analysis "
        f"(and gates, findings, report) under {ANALYSIS_FLOOR // GB} GB up to "
        f"{ANALYSIS_FLOOR // ANALYSIS_PER_EVENT // 10**6}M events stored, "
        f"{ANALYSIS_PER_EVENT * 10**6 / GB:.1f} GB more per million beyond, at most "
        f"{ANALYSIS_CAP // GB} GB or {RAM_SHARE * 100:.0f} % of this machine's memory; the "
        f"dashboard under {ANALYSIS_FLOOR // GB} GB. REPLAYGATE_MEMORY_LIMIT (e.g. 8GB) "
        "sets one limit for all."
    )


def stored_events(con: duckdb.DuckDBPyConnection) -> int:
    """The events stored, from the table's statistics (no scan: 6 ms at 100M); 0 before
    the table exists. Asked before the database's objects are checked (`harden`), so
    through the system's own functions: a macro of the database may shadow a bare name."""
    made = con.execute(
        "SELECT system.main.count_star() FROM system.main.duckdb_tables() "
        "WHERE database_name = system.main.current_database() AND schema_name = 'main' "
        "AND table_name = 'events'"
    ).fetchone()
    if not made or not made[0]:
        return 0
    return int(one_row(con.execute("SELECT system.main.count_star() FROM main.events"))[0])


def limit_memory(con: duckdb.DuckDBPyConnection) -> str | None:
    """Give the connection the analysis' limit for the events it stores now. Returns a
    line to show when the rule raised it above the floor (else None)."""
    events = stored_events(con)
    con.execute("SET memory_limit = $m", {"m": memory_limit("analysis", events)})
    raised = analysis_limit(events, physical_memory())
    if os.environ.get("REPLAYGATE_MEMORY_LIMIT") or raised <= ANALYSIS_FLOOR:
        return None
    return (
        f"analysing {events:,} events under a memory limit of {raised / GB:.1f} GB "
        "(3 GB up to 10M events; REPLAYGATE_MEMORY_LIMIT overrides)"
    )


_BOOKKEEPING = """
CREATE SEQUENCE IF NOT EXISTS file_ids START 1;
CREATE TABLE IF NOT EXISTS files (
    file_id BIGINT PRIMARY KEY,
    path VARCHAR NOT NULL,
    name VARCHAR NOT NULL,
    format VARCHAR,     -- a name of ingest/readers.py FORMATS
    compression VARCHAR,  -- gzip, or NULL for none
    size BIGINT,
    sha256 VARCHAR NOT NULL,
    rows_loaded BIGINT,
    rows_quarantined BIGINT,
    rows_by_type JSON,
    ingested_at TIMESTAMPTZ,
    status VARCHAR,  -- loaded | superseded
    -- Identity by content (identity.py): what was read of the file and where it is now.
    abspath VARCHAR,
    consumed BIGINT,    -- bytes of content read (decompressed), up to a line end
    digest VARCHAR,     -- BLAKE3 of those bytes
    lines BIGINT,       -- newlines in them
    rows_read BIGINT,   -- rows the reader returned from them (CSV positions go on from it)
    raw_digest VARCHAR  -- BLAKE3 of the file on disk as last read (gzip: compressed)
);
CREATE TABLE IF NOT EXISTS quarantine (
    file_id BIGINT,
    path VARCHAR,
    line BIGINT,   -- physical line (JSON Lines, CSV structural errors)
    "row" BIGINT,  -- data row (CSV and Parquet rows that parsed but broke the contract)
    record_type VARCHAR,
    reason VARCHAR
);
ALTER TABLE files ADD COLUMN IF NOT EXISTS abspath VARCHAR;
ALTER TABLE files ADD COLUMN IF NOT EXISTS consumed BIGINT;
ALTER TABLE files ADD COLUMN IF NOT EXISTS digest VARCHAR;
ALTER TABLE files ADD COLUMN IF NOT EXISTS lines BIGINT;
ALTER TABLE files ADD COLUMN IF NOT EXISTS rows_read BIGINT;
ALTER TABLE files ADD COLUMN IF NOT EXISTS raw_digest VARCHAR;
-- Compression is its own column (earlier versions wrote it into the format: `jsonl.gz`).
ALTER TABLE files ADD COLUMN IF NOT EXISTS compression VARCHAR;
UPDATE files SET compression = 'gzip', format = left(format, length(format) - 3)
WHERE format LIKE '%.gz';
-- Rows whose raw session id was dropped because no HMAC key was set: once a key is set,
-- the file is read again and its ids hashed (identity.plan).
ALTER TABLE files ADD COLUMN IF NOT EXISTS ids_dropped BIGINT;
-- Sessions whose rows arrived since the last analysis (queries/incremental.py).
CREATE TABLE IF NOT EXISTS analysis_pending (session_hmac VARCHAR);
-- Where the new rows of each file start (rows after from_pos are new).
CREATE TABLE IF NOT EXISTS analysis_pending_rows (tbl VARCHAR, file_id BIGINT, from_pos BIGINT);
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
-- Facts each file can show (capabilities.py): how = keys (its log format) | values.
CREATE TABLE IF NOT EXISTS file_facts (file_id BIGINT, fact VARCHAR, how VARCHAR);
"""


def default_db_path() -> str:
    return os.environ.get("REPLAYGATE_DB", "replaygate.duckdb")


def table_ddl() -> list[str]:
    out = []
    for rt in RECORD_TYPES:
        cols = [f"{n} {t}" for n, t in PROVENANCE]
        cols += [f"{f.name} {f.sql_type}" for f in rt.stored_fields]
        cols += [f"{n} {t}" for n, t in DERIVED.get(rt.table, ())]
        out.append(f"CREATE TABLE IF NOT EXISTS {rt.table} ({', '.join(cols)})")
    return out


def connect(
    path: str | None = None, read_only: bool = False, role: str | None = None
) -> duckdb.DuckDBPyConnection:
    """A connection to a database file. With a `role` (`ingest`, `rollout`, `record`,
    `watch`: a write of data) it holds the database's writer lock (core/lock.py) until
    `close(con)` or until the connection is gone. Without one it may write only derived
    tables (the analysis), which DuckDB's own file lock serialises."""
    path = path or default_db_path()
    if read_only and path != ":memory:" and not Path(path).exists():
        raise ReplaygateError(f"no database at {path} (run `replaygate ingest` first)")
    held = None
    if not read_only and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        if role is not None:
            held = lock.acquire(path, role)
    try:
        con = _open(path, read_only)
    except BaseException:
        if held is not None:
            held.release()
        raise
    if held is not None:
        _LOCKS[id(con)] = weakref.finalize(con, _drop_lock, id(con), held)
    return con


# The writer lock of each connection that holds one (by id: connections are not hashable
# keys here, and the finalizer removes the entry with the lock).
_LOCKS: dict[int, weakref.finalize] = {}  # type: ignore[type-arg]


def _drop_lock(key: int, held: lock.Lock) -> None:
    _LOCKS.pop(key, None)
    held.release()


def close(con: duckdb.DuckDBPyConnection) -> None:
    """Close a connection and release the writer lock it holds, now."""
    con.close()
    fin = _LOCKS.get(id(con))
    if fin is not None:
        fin()


def open_config(read_only: bool) -> dict[str, Any]:
    """DuckDB settings for opening a database file someone else may have made: no
    extension is installed or loaded behind our back (a crafted database makes DuckDB
    try to download them), and a read-only connection reaches no file or URL at all (a
    crafted view or macro could read /proc/self/environ). Ingest and analysis need to
    read the inputs and the history, so only readers are cut off; their objects are
    checked instead (`check_objects`)."""
    conf: dict[str, Any] = {
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
        "allow_community_extensions": False,
    }
    if read_only:
        conf["enable_external_access"] = False
    return conf


def harden(con: duckdb.DuckDBPyConnection, read_only: bool) -> None:
    """After our own settings: a read-only connection's configuration is locked, and the
    database's objects are checked (`check_objects`)."""
    check_objects(con)
    if read_only:
        con.execute("SET lock_configuration = true")


def check_objects(con: duckdb.DuckDBPyConnection) -> None:
    """The database holds tables, not views: every name replaygate reads must be a
    table it made, or a crafted database could run any query (a view that reads local
    files) where a table was expected. Nor may a macro of it take the name of one of
    DuckDB's own functions or operators: a bare name resolves to the database's macro
    first, so `current_database()`, `lower(x)` or `a || b` in any query would run what
    the database says. Asked of the system's own functions, qualified, for that reason
    (an unqualified `duckdb_views()` could be such a macro)."""
    views = con.execute(
        "SELECT schema_name, view_name FROM system.main.duckdb_views() "
        "WHERE NOT internal AND NOT temporary "
        "AND database_name = system.main.current_database()"
    ).fetchall()
    if views:
        raise ReplaygateError(
            f"not a replaygate database: it defines views ({views[0][0]}.{views[0][1]}"
            + (f" and {len(views) - 1} more" if len(views) > 1 else "")
            + "); replaygate only makes tables"
        )
    # (names compared without case, as DuckDB resolves them). One listing of the functions
    # for both sides: each listing of duckdb_functions() builds every function's row (some
    # 13 CPU ms), and DuckDB's own names asked apart were a second one in each process.
    shadows = [
        f"{schema}.{name}"
        for schema, name in con.execute(
            """WITH fns AS MATERIALIZED (
                   SELECT database_name, schema_name, function_name, internal
                   FROM system.main.duckdb_functions()
                   WHERE database_name IN (system.main.current_database(), 'system'))
               SELECT DISTINCT schema_name, function_name FROM fns
               WHERE database_name = system.main.current_database() AND NOT internal
                 AND system.main.lower(function_name) IN (
                     SELECT system.main.lower(function_name) FROM fns
                     WHERE database_name = 'system')
               ORDER BY ALL"""
        ).fetchall()
    ]
    if shadows:
        raise ReplaygateError(
            f"not a replaygate database: its macro {shadows[0]} takes the name of a DuckDB "
            "function"
            + (f" (and {len(shadows) - 1} more)" if len(shadows) > 1 else "")
            + "; replaygate's macros never do"
        )


def _open(path: str, read_only: bool) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + (10 if not read_only else 0)
    while True:
        try:
            con = duckdb.connect(path, read_only=read_only, config=open_config(read_only))
            break
        except duckdb.Error as exc:
            # A dashboard holds a read lock only for the moment of a query: wait it out.
            if "lock" in str(exc).lower() and time.monotonic() < deadline:
                time.sleep(0.25)
                continue
            raise ReplaygateError(
                f"cannot open database {path}: {str(exc).splitlines()[0]}"
            ) from None
    con.execute("SET TimeZone = 'UTC'")
    # Progress is tracked (query_progress() feeds the ingest bar) but never drawn by
    # DuckDB: its bar would land on standard output, which belongs to --json.
    con.execute("SET enable_progress_bar = true")
    con.execute("SET enable_progress_bar_print = false")
    # Whatever joins whole tables through this connection (an analysis, gates, a report,
    # an export) runs under the analysis' limit for the events stored.
    limit_memory(con)
    try:
        harden(con, read_only)
    except BaseException:
        con.close()
        raise
    if not read_only:
        ensure_schema(con)
    return con


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    for stmt in _BOOKKEEPING.split(";"):
        if stmt.strip():
            con.execute(stmt)
    for stmt in table_ddl():
        con.execute(stmt)
    _add_new_fields(con)
    con.execute(
        "INSERT INTO meta VALUES ('schema_version', $v) ON CONFLICT DO NOTHING",
        {"v": SCHEMA_VERSION},
    )
    con.execute("INSERT INTO meta VALUES ('data_version', '0') ON CONFLICT DO NOTHING")


def _add_new_fields(con: duckdb.DuckDBPyConnection) -> None:
    # A database written before a field joined the contract gets the column (NULL in
    # its old rows), so the same queries run on it.
    have = set(
        con.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'main'"
        ).fetchall()
    )
    for rt in RECORD_TYPES:
        for f in rt.stored_fields:
            if (rt.table, f.name) not in have:
                con.execute(f"ALTER TABLE {rt.table} ADD COLUMN {f.name} {f.sql_type}")


def one_row(cur: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    """The row of a query that always returns one (an aggregate, a sequence's next value);
    DuckDB's fetchone() is typed as optional for the general case."""
    row = cur.fetchone()
    if row is None:
        raise ReplaygateError("the database returned no row where one was due")
    return row


@overload
def get_meta(con: duckdb.DuckDBPyConnection, key: str, default: str) -> str: ...
@overload
def get_meta(con: duckdb.DuckDBPyConnection, key: str, default: None = None) -> str | None: ...
def get_meta(con: duckdb.DuckDBPyConnection, key: str, default: str | None = None) -> str | None:
    try:
        row = con.execute("SELECT value FROM meta WHERE key = $k", {"k": key}).fetchone()
    except duckdb.CatalogException:
        return default
    return str(row[0]) if row else default


@contextlib.contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """One transaction: committed when the block ends, rolled back when it raises
    (whatever it raises, an interrupt too), so a failed write leaves nothing behind."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        # A connection closed meanwhile has dropped its transaction already.
        with contextlib.suppress(duckdb.ConnectionException):
            con.execute("ROLLBACK")
        raise


def set_meta(con: duckdb.DuckDBPyConnection, key: str, value: str) -> None:
    con.execute(
        "INSERT INTO meta VALUES ($k, $v) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        {"k": key, "v": value},
    )


def set_metas(con: duckdb.DuckDBPyConnection, values: dict[str, str]) -> None:
    """set_meta of several keys in one statement (an analysis ends by noting six or seven:
    one statement each cost about a millisecond apiece)."""
    con.execute(
        "INSERT INTO meta SELECT unnest($k), unnest($v) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        {"k": list(values), "v": list(values.values())},
    )
