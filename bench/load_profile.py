"""Where the CPU of one `replaygate ingest` goes, by statement (docs/performance.md).

    python bench/load_profile.py DB FOLDER           # a fresh database; prints JSON
    python bench/load_profile.py DB FOLDER --bare    # and DuckDB's bare read, by table

Ingests FOLDER into DB in this process with every statement the load sends to DuckDB
timed (process CPU seconds, all threads, and wall seconds), grouped by kind: staging (by
reader), the inserts per table, the commit, the rest by their first words.
`identity.plan` (the scan that counts lines and takes BLAKE3, and a new file's SHA-256 in
a thread of its own) is timed whole; a SHA-256 taken apart while a file is staged is
timed in its thread (`sha256_thread`). Also timed: the imports, opening the database,
closing it (its checkpoint: the load's commit leaves it to the close) and the Python
between the statements (`python_cpu_s`, the scan included: hashing, sniffing, the
loader's own work). `--bare`: then, in the same process,
`bench/run.py`'s bare read of the same files into `DB.bare`, its CPU by table and its
close, so each table's insert compares with the bare read of the same files at the same
load. Not a timed test.
"""

from __future__ import annotations

import time

_START_CPU = time.process_time()

import argparse  # noqa: E402
import collections  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import duckdb  # noqa: E402

from replaygate.core import config, db  # noqa: E402
from replaygate.core.contract import RECORD_TYPES  # noqa: E402
from replaygate.ingest import identity, load, stageplan  # noqa: E402

IMPORT_CPU = time.process_time() - _START_CPU
TABLES = {rt.table for rt in RECORD_TYPES}
CPU: dict[str, float] = collections.defaultdict(float)
WALL: dict[str, float] = collections.defaultdict(float)


def kind(sql: str) -> str:
    s = " ".join(sql.split())
    if re.match(r"CREATE OR REPLACE (TEMP )?TABLE \S+ AS", s):
        for reader in ("read_json", "read_parquet", "read_csv"):
            if f"{reader}(" in s:
                return f"stage ({reader})"
        return "stage (other)"
    m = re.match(r"INSERT INTO (\w+)", s)
    if m:
        return f"insert {m.group(1) if m.group(1) in TABLES | {'quarantine'} else '(other)'}"
    if s.upper().startswith("COMMIT"):
        return "commit"
    return "other: " + " ".join(s.split()[:2])


class Timed:
    """A connection whose execute() is timed by kind of statement."""

    def __init__(self, con: Any) -> None:
        self._con = con

    def execute(self, sql: str, params: Any = None) -> Any:
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return self._con.execute(sql, params) if params is not None else self._con.execute(sql)
        finally:
            CPU[kind(sql)] += time.process_time() - c0
            WALL[kind(sql)] += time.perf_counter() - t0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def bare(target: str, folder: str) -> dict[str, Any]:
    """bench/run.py's bare read of the same files (DuckDB's typed readers, a table per
    file), its CPU by record type and its close."""
    by_table: dict[str, float] = collections.defaultdict(float)
    c0 = time.process_time()
    con = duckdb.connect(target)
    con.execute("SET TimeZone = 'UTC'")
    sources, _ = load.discover([folder])
    for i, src in enumerate(sources):
        if src.default_type is None or src.path.stat().st_size == 0:
            continue
        cols = {x.name: x.sql_type for x in src.default_type.fields}
        if src.format == "jsonl":
            read = (
                f"read_json($f, columns = {cols!r}, format = 'newline_delimited', "
                "ignore_errors = true)"
            )
        elif src.format == "csv":
            read = (
                f"read_csv($f, header = true, columns = {cols!r}, auto_detect = false, "
                "ignore_errors = true)"
            )
        else:
            read = "read_parquet($f)"
        c = time.process_time()
        con.execute(f"CREATE TABLE t{i} AS SELECT * FROM {read}", {"f": str(src.path)})
        by_table[src.default_type.table] += time.process_time() - c
    c = time.process_time()
    con.close()
    closed = time.process_time() - c
    return {
        "bare_cpu_s": round(time.process_time() - c0, 2),
        "bare_close_cpu_s": round(closed, 2),
        "bare_tables_cpu_s": {k: round(v, 2) for k, v in sorted(by_table.items())},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="the database to ingest into (a new one: a full load)")
    ap.add_argument("folder", help="the files to ingest")
    ap.add_argument("--bare", action="store_true", help="also the bare read, by table")
    args = ap.parse_args()
    target, folder = args.db, args.folder
    os.environ.setdefault("REPLAYGATE_HMAC_KEY", "bench-key")
    spent = {"sha256_thread": 0.0, "scan_blake3": 0.0}
    sha, plan = stageplan.sha256, identity.plan

    def timed_sha(path: Any) -> str:
        t = time.thread_time()
        try:
            return sha(path)
        finally:
            spent["sha256_thread"] += time.thread_time() - t

    def timed_plan(*args: Any, **kwargs: Any) -> Any:
        c = time.process_time()
        try:
            return plan(*args, **kwargs)
        finally:
            spent["scan_blake3"] += time.process_time() - c

    stageplan.sha256 = timed_sha  # type: ignore[assignment]
    identity.plan = timed_plan  # type: ignore[assignment]
    c0, t0 = time.process_time(), time.perf_counter()
    con = db.connect(target, role="ingest")
    c1 = time.process_time()
    load.ingest(Timed(con), [folder], config.Config())  # type: ignore[arg-type]
    c2 = time.process_time()
    db.close(con)
    c3 = time.process_time()
    out: dict[str, Any] = {
        "cpu_s": round(c3 - c0, 2),
        "seconds": round(time.perf_counter() - t0, 2),
        "load_avg": round(os.getloadavg()[0], 1),
        "import_cpu_s": round(IMPORT_CPU, 2),
        "connect_cpu_s": round(c1 - c0, 2),
        "close_cpu_s": round(c3 - c2, 2),
        "python_cpu_s": round(c2 - c1 - sum(CPU.values()), 2),
        **{f"{k}_cpu_s": round(v, 2) for k, v in spent.items()},
        "statements_cpu_s": {k: round(v, 2) for k, v in sorted(CPU.items(), key=lambda kv: -kv[1])},
        "statements_s": {k: round(v, 2) for k, v in sorted(WALL.items(), key=lambda kv: -kv[1])},
    }
    if args.bare:
        bare_db = Path(f"{target}.bare")
        for p in (bare_db, Path(f"{bare_db}.wal")):
            p.unlink(missing_ok=True)
        out.update(bare(str(bare_db), folder))
        bare_db.unlink(missing_ok=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
