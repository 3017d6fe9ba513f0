"""Benchmark: a 1 % append to a live fleet against a full load, and re-analysis after it
against a from-scratch analysis.

    python bench/append.py --events 1000000 --out bench/out

The fleet (simulator, JSON Lines) is cut at 99 % of every file (at a line end), loaded
whole into a fresh database; then the last 1 % is appended to each file and ingested
again. Every step runs in its own process (wall seconds, peak RSS); the steps:

- full load: `replaygate ingest --no-analyse` of the 99 % files into a fresh database
- append load: the same command after the append (reads only what is new)
- analysis from scratch: `runner.analyse(force=True)` on the grown database
- re-analysis: `runner.analyse()` of the database analysed at 99 %, after the append
  was ingested into it (what `watch` pays per cycle)

Wall seconds are those of `runner.analyse()` inside the step's process; CPU seconds are
given twice: the whole process's (its start, imports and the database's opening included,
about 0.3 CPU s on either side at 1M) and `runner.analyse()`'s own, the same span as the
wall seconds (what `watch` pays per cycle, its process already running).

With `--rounds N` the re-analysis and the analysis from scratch run N times in turn, each
round on a fresh copy of the database as the append's ingest left it (built once): on a
shared machine one pair moves by several points of the ratio. The figures are then each
measure's median over the rounds, the ratios those of the medians, and every round is kept
(`rounds` in the JSON, with its own ratios and the load average).

Results go to <out>/append-<events>.json and a markdown table on standard output.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import PY  # noqa: E402
from run import run_step as timed  # noqa: E402

ANALYSE = """
import json, sys, time
from replaygate.core import db, config
from replaygate.queries import runner
con = db.connect(sys.argv[1])
t0, c0 = time.perf_counter(), time.process_time()
runner.analyse(con, config.Config(), force=sys.argv[2] == "force")
secs, cpu = time.perf_counter() - t0, time.process_time() - c0
# (what ran: a re-analysis that found nothing to do leaves the last mode standing)
mode = con.execute("SELECT value FROM meta WHERE key = 'analysis_mode'").fetchone()[0]
print(json.dumps({"seconds": secs, "cpu_s": cpu, "mode": mode}))
"""


def cut(src: Path, dst: Path, frac: float) -> bytes:
    """Write the first `frac` of src (up to a line end) to dst; return the rest.
    Streamed: a child's peak RSS (wait4) starts at the bench's own RSS when it forks, so
    the bench must not hold the files."""
    size = src.stat().st_size
    with open(src, "rb") as fh, open(dst, "wb") as out:
        n = size
        if frac < 1:
            fh.seek(int(size * frac))
            while (window := fh.read(1 << 16)) and b"\n" not in window:
                pass
            n = fh.tell() - len(window) + window.index(b"\n") + 1 if window else size
        fh.seek(0)
        left = n
        while left > 0 and (chunk := fh.read(min(1 << 24, left))):
            out.write(chunk)
            left -= len(chunk)
        return fh.read()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--share", type=float, default=0.01, help="appended share (0.01 = 1 %%)")
    ap.add_argument("--out", default="bench/out")
    ap.add_argument(
        "--rounds", type=int, default=1, help="re-analysis and from scratch N times in turn"
    )
    args = ap.parse_args()
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    fleet = work / f"fleet-{args.events}"
    if not (fleet / "truth.json").exists():
        shutil.rmtree(fleet, ignore_errors=True)
        timed(
            [PY, "-m", "replaygate", "simulate", "--out", str(fleet), "--events"]
            + [str(args.events), "--format", "jsonl", "--seed", "1", "--json"]
        )
    live = work / f"live-{args.events}"
    shutil.rmtree(live, ignore_errors=True)
    live.mkdir()
    rest = {f.name: cut(f, live / f.name, 1 - args.share) for f in sorted(fleet.glob("*.jsonl"))}
    db = work / f"append-{args.events}.duckdb"
    db.unlink(missing_ok=True)
    ingest = [PY, "-m", "replaygate", "ingest", str(live), "--no-analyse", "--json"]
    res: dict = {"events": json.loads((fleet / "truth.json").read_text())["events"]}
    res["input_mb"] = round(sum(f.stat().st_size for f in live.glob("*.jsonl")) / 1e6)
    r = timed([*ingest, "--db", str(db)])
    res["full_load"] = {k: r[k] for k in ("seconds", "cpu_s", "peak_mb")}
    timed([PY, "-c", ANALYSE, str(db), "once"])  # analysed at 99 %
    for name, tail in rest.items():
        with open(live / name, "ab") as fh:
            fh.write(tail)
    res["appended_mb"] = round(sum(len(t) for t in rest.values()) / 1e6, 1)
    r = timed([*ingest, "--db", str(db)])
    res["append_load"] = {k: r[k] for k in ("seconds", "cpu_s", "peak_mb")}
    res["append_files"] = [f["status"] for f in json.loads(r["out"])["files"]]
    appended = work / f"append-{args.events}-appended.duckdb"
    if args.rounds > 1:  # every round starts from the same state
        shutil.copy(db, appended)
    rounds = []
    for n in range(args.rounds):
        if n:
            shutil.copy(appended, db)
        one: dict = {}
        for step, how in (("reanalysis", "incremental"), ("scratch_analysis", "force")):
            r = timed([PY, "-c", ANALYSE, str(db), how])
            inside = json.loads(r["out"])
            one[step] = {"seconds": inside["seconds"], "cpu_s": r["cpu_s"], "peak_mb": r["peak_mb"]}
            one[step]["analysis_cpu_s"] = round(inside["cpu_s"], 3)
            one[step]["load"], one[step]["mode"] = r["load"], inside["mode"]
        one["analysis_cpu_ratio"] = round(
            one["reanalysis"]["cpu_s"] / one["scratch_analysis"]["cpu_s"], 3
        )
        rounds.append(one)
    appended.unlink(missing_ok=True)
    for step in ("reanalysis", "scratch_analysis"):
        res[step] = {
            k: statistics.median(r[step][k] for r in rounds)
            for k in ("seconds", "cpu_s", "peak_mb", "analysis_cpu_s")
        }
    if args.rounds > 1:
        res["rounds"] = rounds
    res["load_ratio"] = round(res["append_load"]["seconds"] / res["full_load"]["seconds"], 3)
    res["analysis_ratio"] = round(
        res["reanalysis"]["seconds"] / res["scratch_analysis"]["seconds"], 3
    )
    # CPU seconds of the whole process (its start and the database's opening included):
    # on a shared machine the wall ratios move with the load, these less.
    res["load_cpu_ratio"] = round(res["append_load"]["cpu_s"] / res["full_load"]["cpu_s"], 3)
    res["analysis_cpu_ratio"] = round(
        res["reanalysis"]["cpu_s"] / res["scratch_analysis"]["cpu_s"], 3
    )
    # The CPU seconds of runner.analyse() alone, as the wall seconds above: what `watch`
    # pays per cycle. The process's start, imports, the database's opening and its exit
    # (about 0.3 CPU s on either side at 1M) are in the ratio above, not in this one.
    res["analysis_own_cpu_ratio"] = round(
        res["reanalysis"]["analysis_cpu_s"] / res["scratch_analysis"]["analysis_cpu_s"], 3
    )
    (work / f"append-{args.events}.json").write_text(json.dumps(res, indent=1))
    db.unlink(missing_ok=True)
    print(f"| measure | {res['events']:,} events ({res['input_mb']:,} MB) |\n|---|---|")
    print(f"| full load (99 %): s / peak MB | {res['full_load']['seconds']} / "
          f"{res['full_load']['peak_mb']} |")  # fmt: skip
    print(f"| append load ({res['appended_mb']} MB): s / peak MB | "
          f"{res['append_load']['seconds']} / {res['append_load']['peak_mb']} |")  # fmt: skip
    print(
        f"| append ÷ full load (wall; CPU) | {res['load_ratio']:.1%}; {res['load_cpu_ratio']:.1%} |"
    )
    if args.rounds > 1:
        each = ", ".join(f"{r['analysis_cpu_ratio']:.1%}" for r in rounds)
        print(f"| rounds (medians below); re-analysis ÷ from scratch, CPU, each | "
              f"{args.rounds}; {each} |")  # fmt: skip
    print(f"| analysis from scratch: s | {res['scratch_analysis']['seconds']:.2f} |")
    print(f"| re-analysis after the append: s | {res['reanalysis']['seconds']:.2f} |")
    print(f"| re-analysis ÷ from scratch (wall; CPU) | {res['analysis_ratio']:.1%}; "
          f"{res['analysis_cpu_ratio']:.1%} |")  # fmt: skip
    print(f"| the analysis' own CPU, without the process around it (again ÷ from scratch) | "
          f"{res['analysis_own_cpu_ratio']:.1%} |")  # fmt: skip


if __name__ == "__main__":
    main()
