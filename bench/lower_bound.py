"""Benchmark: a lower bound for the analysis — the CPU of the least any analysis of an
ingested database must do, on this machine.

    python bench/lower_bound.py DB [--repeat 3]

Per record table, in one process (best of `--repeat`; `time.process_time`, all threads):

- `scan`: reading every column of it (each is read by some detector), a `min` of each so
  the reader cannot skip one;
- `by_session`: one grouping of it by session and generation (count, first and last
  time): the least a per-session rule costs, as the HMAC text is stored;
- `by_hash`: the same grouping keyed by a 64-bit hash of the HMAC (what an integer key
  stored at ingest would cost at most: the hash is computed here, a stored key would not
  be);

and `write_facts`: writing as many rows as the gate facts hold (one per delivered event,
stream, dispatch and proxy record) with their columns into a table, committed (the
dashboard and the gates read them stored). The sum of the groupings and that write is
what the doc calls the floor of this design; the 30 s target is 60 CPU s on 2 cores.
Not a timed test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import duckdb

TABLES = ("events", "inbox", "streams", "proxy", "dispatches", "sessions")


def best(con: duckdb.DuckDBPyConnection, sql: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        con.execute(sql).fetchall()
        times.append(time.process_time() - c0)
    return round(min(times), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    con = duckdb.connect(str(args.db))
    load0 = os.getloadavg()[0]
    out: dict = {"db": str(args.db), "tables": {}}
    for t in TABLES:
        cols = [r[0] for r in con.execute(f"DESCRIBE {t}").fetchall()]
        n = con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        gen = "generation" if "generation" in cols else "NULL"
        # min() of each column: a count of a column without NULLs is read off its statistics
        every = ", ".join(f"min({c})" for c in cols)
        out["tables"][t] = {
            "rows": n,
            "scan": best(con, f"SELECT {every} FROM {t}", args.repeat),
            "by_session": best(
                con,
                f"SELECT count(*), sum(n), min(t0), max(t1) FROM (SELECT session_hmac, {gen}, "
                f"count(*) AS n, min(ts) AS t0, max(ts) AS t1 FROM {t} GROUP BY ALL)",
                args.repeat,
            ),
            "by_hash": best(
                con,
                f"SELECT count(*), sum(n), min(t0), max(t1) FROM (SELECT hash(session_hmac) "
                f"AS h, {gen}, count(*) AS n, min(ts) AS t0, max(ts) AS t1 FROM {t} GROUP BY ALL)",
                args.repeat,
            ),
        }
    facts = """SELECT 'delivered_events' AS fact, 'stage' AS stage, ts, session_hmac,
                      NULL::DOUBLE AS secs, NULL::VARCHAR AS detector, NULL::INTEGER AS status,
                      NULL::VARCHAR AS method, 'rev' AS revision, 'srv' AS server,
                      'cli' AS client, false AS baseline, false AS probe
               FROM inbox WHERE verdict = 'accepted'
               UNION ALL SELECT 'completed_streams', 'stage', ts, session_hmac, NULL, NULL,
                      NULL, NULL, 'rev', 'srv', 'cli', false, false FROM streams
               UNION ALL SELECT 'write_dispatches', 'stage', ts, session_hmac, NULL, NULL,
                      NULL, NULL, 'rev', 'srv', 'cli', false, false FROM dispatches
               UNION ALL SELECT 'proxy_records', 'stage', ts, session_hmac, NULL, NULL,
                      status, method, 'rev', 'srv', 'cli', false, false FROM proxy"""
    times = []
    for _ in range(args.repeat):
        c0 = time.process_time()
        con.execute("BEGIN")
        con.execute(f"CREATE OR REPLACE TABLE lb_facts AS {facts}")
        con.execute("COMMIT")
        times.append(time.process_time() - c0)
    out["write_facts"] = {
        "rows": con.execute("SELECT count(*) FROM lb_facts").fetchone()[0],
        "cpu_s": round(min(times), 3),
    }
    con.execute("DROP TABLE lb_facts")
    tabs = out["tables"].values()
    out["sum_scan"] = round(sum(t["scan"] for t in tabs), 2)
    out["sum_by_session"] = round(sum(t["by_session"] for t in tabs), 2)
    out["sum_by_hash"] = round(sum(t["by_hash"] for t in tabs), 2)
    out["load"] = [round(load0, 1), round(os.getloadavg()[0], 1)]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
