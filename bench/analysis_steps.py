"""Benchmark: the analysis step by step — CPU seconds, wall seconds and peak RSS of every
prepare statement, detector and gate-facts statement, in one process.

    python bench/analysis_steps.py DB [--incremental] [--progress] [--json OUT] [--drop-caches]

`DB` is an ingested database (`replaygate ingest --no-analyse`); it is analysed in place
(`runner.analyse(force=True)`, or with `--incremental` what `watch` runs after an ingest:
`runner.analyse()`). Every statement the analysis sends to DuckDB is timed
(`time.process_time`: all threads of the process; `time.perf_counter`) and attributed to
the detector that runs it (or that it binds as `$detector`), else to the table it
creates (`a_missing`, ...), else to its first words. Peak RSS per step is sampled every
5 ms from /proc (a step shorter than that may show its predecessor's level); the whole
process's peak is `ru_maxrss`. The process start, imports and the database's opening are
not counted in the steps (they are in `process_cpu_s`). With `--profile DIR` every
statement's DuckDB profile (JSON, every operator's time and rows) is kept in DIR, one file
per statement numbered in order, and each step adds what DuckDB spilled (`spill_mb`: bytes
written to the temporary folder) and the folder's peak (`temp_peak_mb`); the profiling
costs a little CPU, so compare runs that both had it. The profiles also give each step's
planning (`plan_s`: binding, the optimizers and the physical plan, wall seconds as DuckDB's
profiler counts them) and the run's time per optimizer (`optimizers`, summed over every
statement, largest first): what `SET disabled_optimizers` could save at most. Not a timed
test: numbers depend on the machine, its load and its page cache: the headline notes the
cache at the start (`page_cache_mb`), and `--drop-caches` (root) drops it first, so runs
start alike.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import drop_page_cache, page_cache_mb  # noqa: E402

from replaygate.core import config, db  # noqa: E402
from replaygate.queries import runner  # noqa: E402

_PAGE = os.sysconf("SC_PAGE_SIZE")
_CREATE = re.compile(
    r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(TABLE|VIEW|MACRO)\s+(\w+)", re.I
)
# A prepared table declared with its columns, then filled (a_streams): one step with it.
_FILL = re.compile(r"^\s*INSERT\s+INTO\s+(a_\w+)\s", re.I)
# queries/buckets.py's own statements: a step's buckets of time cut, and its check read
_BUCKETS = re.compile(r"^SELECT \(SELECT count\(\*\) - count\((\w+)\) FROM (\w+)\)")
_CHECK = re.compile(r"^SELECT EXISTS \(FROM (a_\w+)\)$")


class Peak:
    """The resident set's peak since the last `take()`, sampled in a thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = False
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def rss() -> int:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE

    def _run(self) -> None:
        while not self._stop:
            self.peak = max(self.peak, self.rss())
            time.sleep(0.005)

    def take(self) -> int:
        p, self.peak = max(self.peak, self.rss()), 0
        return p


class Timed:
    """A connection whose every `execute` is timed and attributed to a step."""

    def __init__(
        self,
        con: Any,
        steps: dict[str, dict[str, float]],
        peak: Peak,
        progress: bool = False,
        profile: Path | None = None,
    ) -> None:
        self._con, self._steps, self._peak = con, steps, peak
        self._progress = progress
        self._profile, self._n = profile, 0
        # seconds per optimizer over every profiled statement (DuckDB's `optimizer` block)
        self.optimizers: dict[str, float] = defaultdict(float)
        self.label: str | None = None
        if profile:
            profile.mkdir(parents=True, exist_ok=True)
            con.execute("SET enable_profiling = 'json'")
            con.execute("SET profiling_coverage = 'ALL'")  # CREATE TABLE ... AS too
            con.execute("SET profiling_output = $f", {"f": str(profile / "last.json")})

    def _kept_profile(self, label: str, sql: str) -> dict[str, float]:
        """The statement's profile moved aside; its spill and temporary peak in MB, and its
        planning in seconds (the optimizers' added to the run's `optimizers`)."""
        assert self._profile
        last = self._profile / "last.json"
        if not last.exists():  # a statement that failed writes none
            return {}
        profile = json.loads(last.read_text())
        if profile.get("query", {}).get("sql") != sql:
            # A SELECT whose rows are fetched after `execute` returns writes its profile
            # then: this one is an earlier statement's, not this one's.
            last.unlink()
            return {}
        self._n += 1
        kept = self._profile / f"{self._n:05d}-{re.sub(r'[^A-Za-z0-9_]+', '_', label)}.json"
        os.replace(last, kept)
        system = profile.get("system", {})
        optimizer = profile.get("optimizer", {})
        for name, secs in optimizer.items():
            if name != "total_time":
                self.optimizers[name] += secs
        plan_s = sum(
            profile.get(part, {}).get("total_time", 0)
            for part in ("planner", "optimizer", "physical_planner")
        )
        return {
            "spill_mb": system.get("total_bytes_spilled", 0) / 1e6,
            "temp_peak_mb": system.get("peak_temp_dir_size", 0) / 1e6,
            "plan_s": plan_s,
        }

    def execute(self, sql: str, *args: Any, **kw: Any) -> Any:
        bound = args[0] if args and isinstance(args[0], dict) else {}
        if self.label:
            label = self.label
        elif isinstance(bound.get("detector"), str):  # a detector run outside the runner's
            label = bound["detector"]  # own loop (incremental.analyse)
        else:
            m, fill = _CREATE.search(sql), _FILL.match(sql)
            cut, check = _BUCKETS.match(sql), _CHECK.match(sql)
            label = fill.group(1) if fill else m.group(2) if m else " ".join(sql.split()[:3])
            if cut:
                label = f"buckets of {cut.group(2)} by {cut.group(1)}"
            elif check:
                label = check.group(1)
        self._peak.take()
        c0, t0 = time.process_time(), time.perf_counter()
        try:
            return self._con.execute(sql, *args, **kw)
        finally:
            s = self._steps[label]
            s["cpu_s"] += time.process_time() - c0
            s["s"] += time.perf_counter() - t0
            p = self._peak.take() / 1e6
            s["peak_mb"] = max(s["peak_mb"], p)
            s["n"] += 1
            spilled = self._kept_profile(label, sql) if self._profile else {}
            if spilled:
                s["spill_mb"] = s.get("spill_mb", 0.0) + spilled["spill_mb"]
                s["temp_peak_mb"] = max(s.get("temp_peak_mb", 0.0), spilled["temp_peak_mb"])
                s["plan_s"] = s.get("plan_s", 0.0) + spilled["plan_s"]
            if self._progress:  # each statement as it ends: a run cut short still tells
                c, t = time.process_time() - c0, time.perf_counter() - t0
                line = f"{label}\t{c:.3f} CPU s\t{t:.3f} s\t{p:,.0f} MB"
                line += f"\t{time.strftime('%H:%M:%S')}\tload {os.getloadavg()[0]:.1f}"
                if spilled:
                    line += f"\tspilled {spilled['spill_mb']:,.0f} MB"
                print(line, file=sys.stderr, flush=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._con, name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("db", type=Path)
    ap.add_argument("--incremental", action="store_true", help="runner.analyse() after an append")
    ap.add_argument("--json", type=Path, help="write the steps here too")
    ap.add_argument("--top", type=int, default=25, help="rows of the table (default 25)")
    ap.add_argument(
        "--progress", action="store_true", help="print each statement to stderr as it ends"
    )
    ap.add_argument("--profile", type=Path, help="keep every statement's DuckDB profile here")
    ap.add_argument(
        "--drop-caches",
        action="store_true",
        help="sync and drop the kernel's page cache before the analysis (root on Linux)",
    )
    args = ap.parse_args()
    if args.drop_caches:
        drop_page_cache()
    cache0 = page_cache_mb()
    peak = Peak()
    steps: dict[str, dict[str, float]] = defaultdict(
        lambda: {"cpu_s": 0.0, "s": 0.0, "peak_mb": 0.0, "n": 0}
    )
    con = Timed(db.connect(str(args.db)), steps, peak, args.progress, args.profile)
    run_detector = runner._run_detector

    def timed_detector(c: Any, name: str, *rest: Any) -> None:
        c.label = name
        try:
            run_detector(c, name, *rest)
        finally:
            c.label = None

    runner._run_detector = timed_detector  # type: ignore[assignment]
    load0 = os.getloadavg()[0]
    c0, t0 = time.process_time(), time.perf_counter()
    runner.analyse(con, config.Config(), force=not args.incremental)  # type: ignore[arg-type]
    cpu, secs = time.process_time() - c0, time.perf_counter() - t0
    mode = con.execute("SELECT value FROM meta WHERE key = 'analysis_mode'").fetchone()
    findings = con.execute("SELECT count(*) FROM findings").fetchone()[0]
    out = {
        "db": str(args.db),
        "mode": mode[0] if mode else None,
        "analysis_cpu_s": round(cpu, 2),
        "analysis_s": round(secs, 2),
        "process_cpu_s": round(time.process_time(), 2),
        "peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "findings": findings,
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        # The limit the analysis ran under (the override, or core/db.py's rule).
        "memory_limit": con._con.execute("SELECT current_setting('memory_limit')").fetchone()[0],
        "page_cache_mb": cache0,
        "steps": {
            k: {m: round(v, 3) if m != "n" else int(v) for m, v in s.items()}
            for k, s in sorted(steps.items(), key=lambda kv: -kv[1]["cpu_s"])
        },
    }
    if args.profile:
        out["plan_s"] = round(sum(s.get("plan_s", 0.0) for s in steps.values()), 3)
        out["optimizers"] = {
            k: round(v, 4) for k, v in sorted(con.optimizers.items(), key=lambda kv: -kv[1])
        }
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    print(
        f"{out['mode']}: {out['analysis_s']} s / {out['analysis_cpu_s']} CPU s in the analysis, "
        f"process {out['process_cpu_s']} CPU s, peak {out['peak_mb']:,} MB, "
        f"{findings:,} findings, load {out['load']}, page cache at start {cache0} MB"
    )
    if args.profile:
        top = ", ".join(f"{k} {v:.3f}" for k, v in list(out["optimizers"].items())[:5])
        print(f"planning {out['plan_s']} s as profiled; optimizers: {top}")
    print("| step | CPU s | s | peak MB | spilled MB | statements |\n|---|---|---|---|---|---|")
    for k, s in list(out["steps"].items())[: args.top]:
        spilled = f"{s['spill_mb']:,.0f}" if "spill_mb" in s else ""
        print(f"| {k} | {s['cpu_s']} | {s['s']} | {s['peak_mb']:,.0f} | {spilled} | {s['n']} |")


if __name__ == "__main__":
    sys.exit(main())
