"""Benchmark: the Spark analysis step by step — wall seconds, Spark jobs, stages and tasks
of every prepare table, detector and copy into DuckDB, in one process.

    python bench/spark_steps.py LAKE DB [--keep memory|lake] [--small] [--conf K=V ...]
                                [--master local[2]] [--json OUT]

`LAKE` is a lake (`replaygate ingest --engine spark`, or `replaygate.spark.lake.export`
of an ingested database); `DB` the DuckDB file the analysis writes. Each step runs under a
Spark job group of its own, so the status tracker tells its jobs, stages and tasks apart;
the steps not labelled (reading the record tables and copying them through the driver)
are `setup`. Also printed: the JVM's CPU seconds over the analysis (the driver and its
local executors are one JVM, a child of this process), the median wall time of a trivial
query (`SELECT 1`, Spark's fixed cost per query here) and the load average. `--small`
runs with `runtime.SMALL_LOCAL` (the tests' settings). Not a timed test: the figures
depend on the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any


def jvm_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children: the Spark JVM."""
    total = 0.0
    kids = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True)
    for pid in kids.stdout.split():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lake")
    ap.add_argument("db")
    ap.add_argument("--keep", choices=("memory", "lake"), default="lake")
    ap.add_argument("--small", action="store_true", help="runtime.SMALL_LOCAL settings")
    ap.add_argument("--conf", action="append", default=[], help="a Spark setting K=V")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    os.environ.setdefault("REPLAYGATE_HMAC_KEY", "bench-key-not-secret")
    from replaygate.core.config import Config
    from replaygate.queries import runner
    from replaygate.sim.fleet import ALLOWLIST
    from replaygate.spark import analyse, runtime, transpile

    conf = dict(runtime.SMALL_LOCAL) if args.small else {}
    conf.update(kv.split("=", 1) for kv in args.conf)
    t0 = time.perf_counter()
    spark = runtime.get(args.master, conf)
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    start_s = time.perf_counter() - t0
    wall: dict[str, float] = defaultdict(float)
    current = ["setup"]

    def label(name: str) -> None:
        current[0] = name
        sc.setJobGroup(name, name)

    def timed(prefix: str, fn: Any, key: Any) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            label(f"{prefix}:{key(*a)}")
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                wall[current[0]] += time.perf_counter() - t
                label("setup")

        return run

    analyse._run_detector = timed("detector", analyse._run_detector, lambda *a: a[2])
    analyse._copy_prepared = timed("copy", analyse._copy_prepared, lambda *a: a[1])
    runner._assign_stages = timed("duckdb", runner._assign_stages, lambda *a: "assign_stages")
    runner._gate_facts = timed("duckdb", runner._gate_facts, lambda *a: "gate_facts")
    steps_of = transpile.prepare_steps

    def prepare_steps(statements: list[str]) -> Any:
        for step in steps_of(statements):
            label(f"prep:{step.name}")
            t = time.perf_counter()
            yield step  # the analysis materialises the step before it asks for the next
            wall[current[0]] += time.perf_counter() - t
            label("setup")

    transpile.prepare_steps = prepare_steps  # type: ignore[assignment]
    label("setup")
    cpu0, t1 = jvm_cpu_s(), time.perf_counter()
    analyse.analyse(spark, args.lake, args.db, Config(origin_allowlist=ALLOWLIST), args.keep)
    total_s, cpu_s = time.perf_counter() - t1, jvm_cpu_s() - cpu0
    wall["setup"] = total_s - sum(v for k, v in wall.items() if k != "setup")
    trivial = []
    for _ in range(15):
        t = time.perf_counter()
        spark.sql("SELECT 1 AS x").toArrow()
        trivial.append(time.perf_counter() - t)

    tracker = sc.statusTracker()
    rows = []
    for name, secs in sorted(wall.items(), key=lambda kv: -kv[1]):
        jobs = tracker.getJobIdsForGroup(name)
        stages: set[int] = set()
        for j in jobs:
            info = tracker.getJobInfo(j)
            stages.update(info.stageIds if info else ())
        tasks = sum(s.numTasks for s in map(tracker.getStageInfo, stages) if s)
        rows.append({"step": name, "wall_s": round(secs, 2), "jobs": len(jobs),
                     "stages": len(stages), "tasks": tasks})  # fmt: skip
    out = {
        "spark_start_s": round(start_s, 1),
        "analysis_s": round(total_s, 1),
        "jvm_cpu_s": round(cpu_s, 1),
        "queries": sum(1 for r in rows if r["step"].startswith(("prep:", "detector:"))),
        "trivial_query_median_s": round(statistics.median(trivial), 3),
        "jobs": sum(r["jobs"] for r in rows),
        "stages": sum(r["stages"] for r in rows),
        "tasks": sum(r["tasks"] for r in rows),
        "loadavg": [round(x, 1) for x in os.getloadavg()],
        "settings": conf,
        "steps": rows,
    }
    for r in rows:
        print(f"{r['step']:<42} {r['wall_s']:>8.2f} s {r['jobs']:>4} jobs {r['stages']:>4} "
              f"stages {r['tasks']:>5} tasks")  # fmt: skip
    print(json.dumps({k: v for k, v in out.items() if k != "steps"}))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
