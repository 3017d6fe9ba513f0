"""Benchmark: `gates --all-stages` over a rollout log of many stages.

    python bench/gates_stages.py --stages 100000 --out bench/out
    python bench/gates_stages.py --stages 100000 --out bench/out --src /tmp/old-checkout

A rollout log of N stages (one start each, 10 s apart, no release, as an automated
rollout of many small steps writes it; no other record) is ingested once into
`<out>/stages-N.duckdb`. Then `gates.evaluate(all_stages=True)` runs in a process of its
own (wall and CPU seconds, peak RSS from wait4), and the JSON of the gates document is
written and timed in another. `--src` measures another checkout of replaygate (an
earlier commit: `git archive COMMIT | tar -x -C DIR`) on the same database, so a change
is measured before and after in one run; it is imported from a tree of links laid out as
installed, as `./dev types` makes. Results go to `<out>/gates-stages-N.json` and a
markdown row on standard output.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PY  # noqa: E402
from run import run_step as timed  # noqa: E402

EVALUATE = """
import json, sys, time
if sys.argv[2]:
    sys.path.insert(0, sys.argv[2])
from replaygate.core import db, config
from replaygate.queries import gates
from replaygate import api
con = db.connect(sys.argv[1], read_only=True)
t0 = time.perf_counter(); c0 = time.process_time()
doc = gates.evaluate(con, config.Config(), all_stages=True)
cpu = time.process_time() - c0; secs = time.perf_counter() - t0
n = len(doc["stages"])
decisions = sorted({s["decision"] for s in doc["stages"]})
if sys.argv[3] == "json":
    t1 = time.process_time()
    text = json.dumps(api.gates_doc(con, config.Config(), all_stages=True), default=str)
    cpu_json = time.process_time() - t1
else:
    text, cpu_json = "", None
print(json.dumps({"stages": n, "decisions": decisions, "evaluate_s": round(secs, 2),
                  "evaluate_cpu_s": round(cpu, 2), "json_cpu_s": cpu_json and round(cpu_json, 2),
                  "json_mb": round(len(text) / 1e6)}))
"""


def rollout_log(folder: Path, stages: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    t0 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)
    with open(folder / "rollout.csv", "w", encoding="utf-8") as fh:
        fh.write("ts,stage,release,action,percent,scope,actor,note\n")
        for i in range(stages):
            t = t0 + dt.timedelta(seconds=10 * i)
            fh.write(f"{t:%Y-%m-%dT%H:%M:%S}.000Z,stage-{i},,start,5.0,read,bot,\n")


def link_tree(src: Path, work: Path) -> Path:
    """A tree of links to `src` laid out as replaygate installs (ingest/ is
    replaygate.ingest), for a checkout that is not installed."""
    root = work / f"src-{src.name}"
    tree = root / "replaygate"
    tree.mkdir(parents=True, exist_ok=True)
    for p in (src / "replaygate").glob("*.py"):
        (tree / p.name).unlink(missing_ok=True)
        (tree / p.name).symlink_to(p.resolve())
    for d in ("ingest", "queries", "dashboard", "sim", "recorder", "probe", "spark"):
        if (src / d).is_dir():
            (tree / d).unlink(missing_ok=True)
            (tree / d).symlink_to((src / d).resolve())
    return root


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, default=100_000)
    ap.add_argument("--out", default="bench/out")
    ap.add_argument("--src", help="another checkout of replaygate to measure")
    ap.add_argument("--no-json", action="store_true", help="time the evaluation alone")
    args = ap.parse_args()
    work = Path(args.out).resolve()
    work.mkdir(parents=True, exist_ok=True)
    db = work / f"stages-{args.stages}.duckdb"
    if not db.exists():
        logs = work / f"stages-{args.stages}"
        rollout_log(logs, args.stages)
        r = timed([PY, "-m", "replaygate", "ingest", str(logs), "--db", str(db), "--json"])
        print(f"ingest: {r['seconds']} s, {r['cpu_s']} CPU s, {r['peak_mb']} MB", file=sys.stderr)
    path = str(link_tree(Path(args.src).resolve(), work)) if args.src else ""
    r = timed([PY, "-c", EVALUATE, str(db), path, "" if args.no_json else "json"])
    res = {
        **json.loads(r["out"]),
        "src": args.src or "this checkout",
        "process": {k: r[k] for k in ("seconds", "cpu_s", "peak_mb", "load")},
    }
    out = work / f"gates-stages-{args.stages}.json"
    old = json.loads(out.read_text()) if out.exists() else []
    out.write_text(json.dumps([*old, res], indent=1) + "\n")
    print(
        "| code | stages | evaluate: s / CPU s | JSON: CPU s, MB "
        "| process: CPU s / peak MB | load |"
    )
    print("|---|---|---|---|---|---|")
    print(
        f"| {res['src']} | {res['stages']:,} | {res['evaluate_s']} / {res['evaluate_cpu_s']} "
        f"| {res['json_cpu_s']}, {res['json_mb']} | {r['cpu_s']} / {r['peak_mb']} "
        f"| {r['load'][0]}–{r['load'][1]} |"
    )


if __name__ == "__main__":
    main()
