"""Benchmark of the simulator alone: wall and CPU seconds, peak memory and events per
second of `replaygate simulate` per size, format and engine, each run in its own process.

    python bench/simulate.py --sizes 1000000 10000000 --format parquet --out bench/out

Results go to <out>/simulate.json and a markdown table on standard output (the one in
docs/simulator.md); fleets are deleted after each run unless --keep. bench/run.py times
the simulate step of its own fleets too. Not a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
ENV = dict(os.environ, REPLAYGATE_HMAC_KEY="bench-key")


def run(n: int, fmt: str, engine: str, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [PY, "-m", "replaygate", "simulate", "--out", str(out), "--events", str(n)]
    cmd += ["--format", fmt, "--engine", engine, "--seed", "1", "--json"]
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as se:
        # output to files, not pipes: wait4 reaps the child and reports its own usage
        proc = subprocess.Popen(cmd, env=ENV, stdout=so, stderr=se)
        _, status, usage = os.wait4(proc.pid, 0)
        secs = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise SystemExit(f"failed: {' '.join(cmd)}\n{se.read().decode()[-2000:]}")
        summary = json.loads(so.read())
    return {
        "events_target": n,
        "events": summary["events"],
        "faults": summary["faults"],
        "format": fmt,
        "engine": summary["engine"],
        "seconds": round(secs, 1),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
        "peak_mb": round(usage.ru_maxrss / 1024),
        "output_mb": round(sum(p.stat().st_size for p in out.iterdir()) / 1e6),
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
    }


def table(results: list[dict]) -> str:
    lines = [
        "| events | format | engine | wall s | CPU s | peak MB | output MB | events/s (wall) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['events']:,} | {r['format']} | {r['engine']} | {r['seconds']} | "
            f"{r['cpu_s']} | {r['peak_mb']:,} | {r['output_mb']:,} | "
            f"{r['events'] / r['seconds']:,.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 10_000_000])
    ap.add_argument("--format", default="parquet", choices=["jsonl", "csv", "parquet", "mixed"])
    ap.add_argument("--engine", default="auto", choices=["auto", "python", "vector"])
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--keep", action="store_true", help="Keep the fleets.")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.sizes:
        fleet = args.out / f"sim-{n}-{args.format}-{args.engine}"
        results.append(run(n, args.format, args.engine, fleet))
        print(json.dumps(results[-1]), file=sys.stderr)
        if not args.keep:
            shutil.rmtree(fleet, ignore_errors=True)
    path = args.out / "simulate.json"
    old = json.loads(path.read_text()) if path.exists() else []
    path.write_text(json.dumps(old + results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
