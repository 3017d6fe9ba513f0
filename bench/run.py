"""Benchmarks: simulate, bare DuckDB read vs replaygate ingest, detectors, gates, pages.

Each step runs in its own process so wall time and peak memory (max RSS) are its own.

    python bench/run.py --sizes 1000000 10000000 --out bench/out

Results go to <out>/results.json and a markdown table on standard output, the one
in docs/performance.md. Not a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
ENV = dict(os.environ, REPLAYGATE_HMAC_KEY="bench-key")


def timed(cmd: list[str]) -> dict:
    """Run a command; its wall seconds and peak RSS (MB), from wait4 of that child."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    secs = time.perf_counter() - t0
    out = proc.stdout.read().decode()
    err = proc.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err[-2000:]}")
    return {"seconds": round(secs, 2), "peak_mb": round(usage.ru_maxrss / 1024), "out": out}


# The bare read: DuckDB's own reader with the contract's column types given (auto-detection
# fails on these files, whose null fields are absent), straight into a table.
BARE = """
import duckdb, sys, pathlib
from replaygate.ingest.contract import type_for_filename
con = duckdb.connect(sys.argv[1])
con.execute("SET TimeZone = 'UTC'")
con.execute("SET enable_progress_bar = false")
for i, f in enumerate(sorted(pathlib.Path(sys.argv[2]).glob('*.jsonl'))):
    rt = type_for_filename(f.name)
    cols = {x.name: x.sql_type for x in rt.fields}
    con.execute(f"CREATE TABLE t{i} AS SELECT * FROM read_json($f, columns = {cols!r}, "
                "format = 'newline_delimited')", {"f": str(f)})
con.close()
"""

ANALYSE = """
import json, sys, time
from replaygate.ingest import db, config
from replaygate.queries import runner, gates
con = db.connect(sys.argv[1])
conf = config.Config()
t0 = time.perf_counter(); runner.analyse(con, conf, force=True); t1 = time.perf_counter()
gates.evaluate(con, conf, all_stages=True); gates.rollback_verification(con)
t2 = time.perf_counter()
per = dict(con.execute("SELECT detector, seconds FROM coverage").fetchall())
print(json.dumps({"detect_s": t1 - t0, "gates_s": t2 - t1, "per_detector": per,
                  "findings": con.execute("SELECT count(*) FROM findings").fetchone()[0]}))
"""

PAGES = """
import json, os, sys, time
os.environ["REPLAYGATE_DB"] = sys.argv[1]
from streamlit.testing.v1 import AppTest
app = sys.argv[2]
out = {}
at = AppTest.from_file(app, default_timeout=600)
t0 = time.perf_counter(); at.run(); out["overview"] = time.perf_counter() - t0
for p in ["rollout", "streams", "dispatch", "sessions", "findings", "inspector", "datafiles"]:
    at.switch_page(f"views/{p}.py")
    t0 = time.perf_counter(); at.run(); cold = time.perf_counter() - t0
    t0 = time.perf_counter(); at.run(); warm = time.perf_counter() - t0
    out[p] = {"cold": cold, "cached": warm}
    assert not at.exception, (p, at.exception)
print(json.dumps(out))
"""


def bench_size(n: int, work: Path, keep: bool) -> dict:
    d = work / f"fleet-{n}"
    res: dict = {"events_target": n}
    if not (d / "truth.json").exists():
        shutil.rmtree(d, ignore_errors=True)
        r = timed(
            [
                PY,
                "-m",
                "replaygate",
                "simulate",
                "--out",
                str(d),
                "--events",
                str(n),
                "--format",
                "jsonl",
                "--seed",
                "1",
                "--json",
            ]
        )
        res["simulate"] = {k: r[k] for k in ("seconds", "peak_mb")}
        res["events"] = json.loads(r["out"])["events"]
    else:
        res["events"] = json.loads((d / "truth.json").read_text())["events"]
    res["input_mb"] = round(sum(f.stat().st_size for f in d.glob("*.jsonl")) / 1e6)
    bare_db, ours_db = work / f"bare-{n}.duckdb", work / f"ours-{n}.duckdb"
    for p in (bare_db, ours_db):
        p.unlink(missing_ok=True)
    r = timed([PY, "-c", BARE, str(bare_db), str(d)])
    res["bare_read_json"] = {k: r[k] for k in ("seconds", "peak_mb")}
    r = timed(
        [PY, "-m", "replaygate", "ingest", str(d), "--db", str(ours_db), "--no-analyse", "--json"]
    )
    res["ingest"] = {k: r[k] for k in ("seconds", "peak_mb")}
    res["ingest_ratio"] = round(res["ingest"]["seconds"] / res["bare_read_json"]["seconds"], 2)
    r = timed([PY, "-c", ANALYSE, str(ours_db)])
    res["analyse"] = {**json.loads(r["out"]), "peak_mb": r["peak_mb"]}
    r = timed([PY, "-c", PAGES, str(ours_db), str(ROOT / "dashboard" / "app.py")])
    res["pages"] = json.loads(r["out"])
    if not keep:
        for p in (bare_db, ours_db):
            p.unlink(missing_ok=True)
    return res


def table(results: list[dict]) -> str:
    lines = [
        "| measure | " + " | ".join(f"{r['events']:,} events" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]

    def row(label, f):
        lines.append(f"| {label} | " + " | ".join(f(r) for r in results) + " |")

    row("input (JSON Lines, MB)", lambda r: f"{r['input_mb']:,}")
    row(
        "simulate: s / peak MB",
        lambda r: (
            f"{r['simulate']['seconds']} / {r['simulate']['peak_mb']}"
            if "simulate" in r
            else "(cached)"
        ),
    )
    row(
        "bare `CREATE TABLE AS read_json`: s / peak MB",
        lambda r: f"{r['bare_read_json']['seconds']} / {r['bare_read_json']['peak_mb']}",
    )
    row(
        "replaygate ingest: s / peak MB",
        lambda r: f"{r['ingest']['seconds']} / {r['ingest']['peak_mb']}",
    )
    row("ingest ÷ bare", lambda r: f"{r['ingest_ratio']}x")
    row("all 29 detectors: s", lambda r: f"{r['analyse']['detect_s']:.1f}")
    row("gates, all stages: s", lambda r: f"{r['analyse']['gates_s']:.2f}")
    row(
        "slowest detector",
        lambda r: "{} {:.1f} s".format(
            *max(r["analyse"]["per_detector"].items(), key=lambda kv: kv[1] or 0)
        ),
    )
    for page in (
        "overview",
        "rollout",
        "streams",
        "dispatch",
        "sessions",
        "findings",
        "inspector",
        "datafiles",
    ):
        row(
            f"page {page}: s (cold / cached)",
            lambda r, p=page: (
                f"{r['pages'][p]:.2f}"
                if isinstance(r["pages"][p], float)
                else f"{r['pages'][p]['cold']:.2f} / {r['pages'][p]['cached']:.2f}"
            ),
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", type=int, default=[1_000_000, 10_000_000])
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    args = ap.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    results = [bench_size(n, work, args.keep) for n in args.sizes]
    (work / "results.json").write_text(json.dumps(results, indent=1))
    print(table(results))
    if len(results) > 1:
        a, b = results[0], results[-1]
        scale = b["events"] / a["events"]
        for key in ("ingest", "bare_read_json"):
            print(
                f"{key}: x{b[key]['seconds'] / a[key]['seconds']:.1f} time for x{scale:.1f} events"
            )
        print(
            f"detectors: x{b['analyse']['detect_s'] / a['analyse']['detect_s']:.1f} time "
            f"for x{scale:.1f} events"
        )


if __name__ == "__main__":
    main()
