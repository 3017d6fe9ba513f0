"""Where the CPU of one `replaygate ingest` goes, by statement (docs/performance.md).

    python bench/load_profile.py DB FOLDER     # a fresh database; prints JSON

Ingests FOLDER into DB in this process with every statement the load sends to DuckDB
timed (process CPU seconds, all threads, and wall seconds), grouped by kind: staging (by
reader), the inserts per table, the commit, the rest by their first words. The SHA-256
thread is timed apart (its own thread's CPU, which overlaps the staging statements), and
`identity.plan` (the scan that counts lines and takes BLAKE3) whole. Not a timed test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time
from typing import Any

from replaygate.core import config, db
from replaygate.core.contract import RECORD_TYPES
from replaygate.ingest import identity, load, stageplan

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", help="the database to ingest into (a new one: a full load)")
    ap.add_argument("folder", help="the files to ingest")
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
    con = db.connect(target)
    load.ingest(Timed(con), [folder], config.Config())  # type: ignore[arg-type]
    out = {
        "cpu_s": round(time.process_time() - c0, 2),
        "seconds": round(time.perf_counter() - t0, 2),
        **{f"{k}_cpu_s": round(v, 2) for k, v in spent.items()},
        "statements_cpu_s": {k: round(v, 2) for k, v in sorted(CPU.items(), key=lambda kv: -kv[1])},
        "statements_s": {k: round(v, 2) for k, v in sorted(WALL.items(), key=lambda kv: -kv[1])},
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
