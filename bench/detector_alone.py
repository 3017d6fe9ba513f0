"""Benchmark: one detector alone, its query from a file against another, in turn, on an
analysed database — CPU seconds, wall seconds and peak RSS of each run, and whether the
two gave the same rows.

    python bench/detector_alone.py DB NAME [--old FILE] [--new FILE] [--repeat 2]

`DB` is an analysed database (its prepared tables stored); it is opened read-only, so a
shared copy may be measured while nothing else writes it. `NAME` is a detector; `--new`
defaults to its file under queries/sql/detectors, `--old` (optional) is the file of the
query it replaced (tests/fixtures/sql_v0, or a copy of main's). Each run is planned and
shadowed as the analysis runs it (`cannottell.plan`, `shadow`) and its rows are written
into a temporary table, old and new alternating `--repeat` times; then the two tables
are compared (`EXCEPT ALL` both ways, the JSON detail as text). CPU seconds are
`time.process_time` (all threads); peak RSS is sampled every 5 ms from /proc. Not a
timed test: numbers depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import Any

from replaygate.core import config, db
from replaygate.queries import cannottell, catalog, params, runner

_PAGE = os.sysconf("SC_PAGE_SIZE")


class Peak:
    """The resident set's peak since the last `take()`, sampled in a thread."""

    def __init__(self) -> None:
        self.peak = 0
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE

    def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def take(self) -> int:
        p, self.peak = max(self.peak, self.rss()), 0
        return p


def run(con: Any, q: catalog.Query, table: str, peak: Peak) -> tuple[float, float, float, int]:
    values = params.from_config(config.Config())
    plan = cannottell.plan(con, q, values)
    made = cannottell.shadow(con, plan)
    try:
        peak.take()
        c0, t0 = time.process_time(), time.perf_counter()
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT * FROM ({q.sql})",
            params.bind(q, values),
        )
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
        mb = peak.take() / 1e6
    finally:
        cannottell.unshadow(con, made)
    n = con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    return cpu, wall, mb, n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("name")
    ap.add_argument("--old", type=Path)
    ap.add_argument("--new", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    new = catalog.parse(args.new, "detectors") if args.new else catalog.detectors()[args.name]
    queries = {"new": new}
    if args.old:
        queries = {"old": catalog.parse(args.old, "detectors"), **queries}
    con = db.connect(str(args.db), read_only=True)
    runner.prepared_views(con)
    peak = Peak()
    load = os.getloadavg()[0]
    for i in range(args.repeat):
        for which, q in queries.items():
            cpu, wall, mb, n = run(con, q, f"bench_{which}", peak)
            print(
                f"{args.name}\t{which}\t{i + 1}\t{cpu:.2f} CPU s\t{wall:.2f} s"
                f"\t{mb:,.0f} MB\t{n} rows"
            )
    if args.old:
        cols = "* REPLACE (detail::VARCHAR AS detail)"
        diff = [
            con.execute(
                f"SELECT count(*) FROM (SELECT {cols} FROM {a} EXCEPT ALL SELECT {cols} FROM {b})"
            ).fetchone()[0]
            for a, b in (("bench_old", "bench_new"), ("bench_new", "bench_old"))
        ]
        print(f"{args.name}\tdiffering rows old-new {diff[0]}, new-old {diff[1]}")
    print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
