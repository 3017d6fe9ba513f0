"""Benchmarks side by side: simulate, bare DuckDB read vs replaygate ingest, analysis
(prepare step and detectors), gates, dashboard pages, for one or more fleet sizes.

Each step runs in its own process so wall time, CPU time and peak memory (max RSS) are
its own; the 1-minute load average is noted before and after each step, because on a
shared machine the same step can take twice as long from one run to the next (compare
the ratios, which are measured in the same run).

    ./dev bench 1000000 10000000             # or: python bench/run.py 1000000 ...
    ./dev bench 100000000 --format parquet --batches 10   # 100M: Parquet, in 10 ingest runs
    ./dev bench 100000 1000000 --spark --no-pages   # and the Spark path, local[2]

Fleets are simulated once into <out>/fleet-<n>[-<format>] and reused. Results go to
<out>/results.json and a markdown table on standard output (docs/performance.md). Not
a timed test: numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
# Every step runs as an installed product runs: Python reads and writes its bytecode
# caches (an editable install under PYTHONDONTWRITEBYTECODE=1 compiled every module of
# replaygate in every process: about 0.08 CPU s of each `replaygate ingest`, paid ten
# times by a load in ten batches and once by the bare read's few imports).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["REPLAYGATE_HMAC_KEY"] = "bench-key"


def _communicate_without_reaping(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """Read a child's output to the end without waiting for it (wait4 reaps it)."""
    chunks: dict[str, bytes] = {}

    def drain(name, stream):
        chunks[name] = stream.read()

    threads = [
        threading.Thread(target=drain, args=("out", proc.stdout)),
        threading.Thread(target=drain, args=("err", proc.stderr)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return chunks["out"], chunks["err"]


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _jvm_cpu(root: int) -> dict[int, float]:
    """CPU seconds so far of each Java process below `root` (/proc; empty elsewhere)."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        parents[int(d.name)] = int(fields[1])
        if name == "java":
            cpu[int(d.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    out = {}
    for pid, secs in cpu.items():
        p = pid
        while p > 1 and p != root:
            p = parents.get(p, 1)
        if p == root:
            out[pid] = secs
    return out


class _Watch(threading.Thread):
    """While a step runs: the CPU of its Java processes (Spark's JVM, which the step
    never waits for, so wait4 does not count it) and the range of the load average."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.jvm, self.loads = pid, {}, [os.getloadavg()[0]]
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(1.0):
            self.jvm.update(_jvm_cpu(self.pid))
            self.loads.append(os.getloadavg()[0])


def page_cache_mb() -> int | None:
    """The kernel's page cache now (MB, /proc/meminfo's Cached), or None off Linux.

    On the 2-core VMs these figures come from, the same 10M analysis took 29 s right after
    the cache was dropped and 36-39 s with ~8 GB of it left by earlier runs (the kernel
    reclaiming pages while DuckDB allocates): every timed step notes it, so two figures
    are compared only at like cache states."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("Cached:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return None


def drop_page_cache() -> None:
    """Write dirty pages out and drop the page cache (Linux, root only): a like start for
    a timed step. Refuses with one line rather than measure from an unknown state."""
    os.sync()
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError as e:
        raise SystemExit(f"--drop-caches needs root on Linux: {e.strerror}") from None


def run_step(cmd: list[str], env: dict | None = None) -> dict:
    """Run a command: wall and CPU seconds and peak RSS (MB), from wait4 of that child,
    the load average before and after and its range while it ran, and the CPU seconds
    of the Java processes it started (`jvm_cpu_s`, when there were any)."""
    load0, cache0 = os.getloadavg()[0], page_cache_mb()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env={**ENV, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    watch = _Watch(proc.pid)
    watch.start()
    out_b, err_b = _communicate_without_reaping(proc)
    watch.done.set()
    watch.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err_b.decode()[-2000:]}")
    return {
        "seconds": round(secs, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_mb": round(usage.ru_maxrss / 1024),
        "load": [round(load0, 1), round(os.getloadavg()[0], 1)],
        "load_range": [round(min(watch.loads), 1), round(max(watch.loads), 1)],
        "page_cache_mb": cache0,
        **({"jvm_cpu_s": round(sum(watch.jvm.values()), 2)} if watch.jvm else {}),
        "out": out_b.decode(),
    }


def _keep(r: dict) -> dict:
    return {k: v for k, v in r.items() if k != "out"}


# The bare read: DuckDB's own readers with the contract's column types given
# (auto-detection fails on these files, whose null fields are absent), straight into a
# table of an on-disk database; the same files ingest finds (load.discover). Rows its
# typed readers cannot take (epoch-ms timestamps in a small proxy log) are skipped.
BARE = """
import duckdb, sys
from replaygate.ingest.load import discover
con = duckdb.connect(sys.argv[1])
con.execute("SET TimeZone = 'UTC'")
con.execute("SET enable_progress_bar = false")
sources, _ = discover([sys.argv[2]])
for i, src in enumerate(sources):
    if src.default_type is None or src.path.stat().st_size == 0:
        continue
    cols = {x.name: x.sql_type for x in src.default_type.fields}
    if src.format == "jsonl":
        read = (f"read_json($f, columns = {cols!r}, format = 'newline_delimited', "
                "ignore_errors = true)")
    elif src.format == "csv":
        read = (f"read_csv($f, header = true, columns = {cols!r}, auto_detect = false, "
                "ignore_errors = true)")
    else:
        read = "read_parquet($f)"
    con.execute(f"CREATE TABLE t{i} AS SELECT * FROM {read}", {"f": str(src.path)})
con.close()
"""

# The bare read of a load in batches, as DuckDB alone would load them as they arrive: each
# batch in a process of its own, appended to one table per record type and format (the
# bare read above reads every batch in one process, into a table per file).
BARE_APPEND = BARE.replace(
    """    con.execute(f"CREATE TABLE t{i} AS SELECT * FROM {read}", {"f": str(src.path)})""",
    """    t = f"{src.default_type.table}_{src.format}"
    old = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $t", {"t": t})
    if old.fetchone()[0]:
        con.execute(f"INSERT INTO {t} BY NAME SELECT * FROM {read}", {"f": str(src.path)})
    else:
        con.execute(f"CREATE TABLE {t} AS SELECT * FROM {read}", {"f": str(src.path)})""",
)
assert BARE_APPEND != BARE

# Analysis as `replaygate analyse` runs it, with the prepare step timed apart: the
# runner executes the prep statements in order, so the span from the first to the last
# request for one is the prepare step.
ANALYSE = """
import json, sys, time
from replaygate.core import db, config
from replaygate.queries import runner, gates
marks = {}
load = runner.catalog.load
def timed_load(kind):
    queries = load(kind)
    if kind != "prep":
        return queries
    def spans():
        marks["start"] = time.perf_counter()
        yield from queries
        marks["end"] = time.perf_counter()
    return spans()
runner.catalog.load = timed_load
gate_facts = runner._gate_facts
def timed_facts(*args):  # the gate facts (queries/sql/facts) and a_stage_samples
    t = time.perf_counter(); gate_facts(*args)
    marks["facts_s"] = marks.get("facts_s", 0.0) + time.perf_counter() - t
runner._gate_facts = timed_facts
con = db.connect(sys.argv[1])
conf = config.Config()
t0 = time.perf_counter(); runner.analyse(con, conf, force=True); t1 = time.perf_counter()
gates.evaluate(con, conf, all_stages=True); gates.rollback_verification(con)
t2 = time.perf_counter()
per = dict(con.execute("SELECT detector, seconds FROM coverage").fetchall())
print(json.dumps({"analyse_s": t1 - t0, "prep_s": marks["end"] - marks["start"],
                  "detect_s": sum(v or 0 for v in per.values()), "gates_s": t2 - t1,
                  "facts_s": marks.get("facts_s"),
                  # the limit the analysis ran under: the override, or core/db.py's rule
                  # for the events stored (set on the connection as the analysis starts)
                  "memory_limit": con.execute(
                      "SELECT current_setting('memory_limit')").fetchone()[0],
                  "per_detector": per,
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

PAGE_NAMES = (
    "overview",
    "rollout",
    "streams",
    "dispatch",
    "sessions",
    "findings",
    "inspector",
    "datafiles",
)


def _commit() -> str:
    r = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return r.stdout.strip() or "unknown"


def fleet_dir(work: Path, n: int, fmt: str) -> Path:
    return work / (f"fleet-{n}" if fmt == "jsonl" else f"fleet-{n}-{fmt}")


def batched(d: Path, batches: int, small: int = 10_000) -> Path:
    """The Parquet fleet `d` as `batches` folders part-00 ... of consecutive rows of every
    file (how a week of rotated logs arrives), truth.json beside them; made once."""
    out = d.with_name(f"{d.name}-{batches}batches")
    if (out / "truth.json").exists():
        return out
    if not any(d.glob("*.parquet")):
        raise SystemExit("--batches needs a Parquet fleet (--format parquet)")
    import duckdb

    shutil.rmtree(out, ignore_errors=True)
    first = out / "part-00"
    first.mkdir(parents=True)
    con = duckdb.connect()
    for f in sorted(d.iterdir()):
        rows = (
            con.execute("SELECT count(*) FROM read_parquet($f)", {"f": str(f)}).fetchall()[0][0]
            if f.suffix == ".parquet"
            else 0
        )
        if rows < small:  # truth.json beside the batches; the rollout log, small logs whole
            shutil.copy(f, out / f.name if f.name == "truth.json" else first / f.name)
            continue
        tmp = out / f"tmp-{f.stem}"
        # One pass per file: every row goes to the batch of its position in the file.
        con.execute(
            f"""COPY (SELECT * EXCLUDE (file_row_number),
                             file_row_number * {batches} // {max(rows, 1)} AS batch
                      FROM read_parquet($f, file_row_number = true))
                TO '{tmp}' (FORMAT parquet, PARTITION_BY (batch), COMPRESSION zstd)""",
            {"f": str(f)},
        )
        for part in tmp.iterdir():
            target = out / f"part-{int(part.name.split('=')[1]):02d}"
            target.mkdir(exist_ok=True)
            (written,) = part.iterdir()
            written.rename(target / f.name)
        shutil.rmtree(tmp)
    return out


def ingest_step(d: Path, db: Path, batches: int, env: dict | None = None) -> dict:
    """`replaygate ingest --no-analyse` of the fleet, or of its batches one after the other
    into the same database (each an append of new files): summed times, highest peak."""
    parts = sorted(p for p in d.iterdir() if p.is_dir()) if batches > 1 else [d]
    steps = []
    for part in parts:
        cmd = [PY, "-m", "replaygate", "ingest", str(part), "--db", str(db), "--no-analyse"]
        steps.append(_keep(run_step(cmd + ["--json"], env)))
    out = {
        "seconds": round(sum(s["seconds"] for s in steps), 2),
        "cpu_s": round(sum(s["cpu_s"] for s in steps), 2),
        "peak_mb": max(s["peak_mb"] for s in steps),
        "load": [steps[0]["load"][0], steps[-1]["load"][1]],
    }
    if batches > 1:
        out["batches"] = steps
    return out


def bare_in_batches(d: Path, db: Path) -> dict:
    """BARE_APPEND of each batch of `d` in turn into `db`: summed times, highest peak."""
    steps = [
        _keep(run_step([PY, "-c", BARE_APPEND, str(db), str(part)]))
        for part in sorted(p for p in d.iterdir() if p.is_dir())
    ]
    return {
        "seconds": round(sum(s["seconds"] for s in steps), 2),
        "cpu_s": round(sum(s["cpu_s"] for s in steps), 2),
        "peak_mb": max(s["peak_mb"] for s in steps),
        "load": [steps[0]["load"][0], steps[-1]["load"][1]],
    }


# The Spark path's driver (Spark in local mode runs its executors in the driver's JVM):
# the analysis brings the record tables through it into the DuckDB file. Spark's 200
# shuffle partitions are a cluster's: on two cores each is a task of its own to schedule.
SPARK_DRIVER_MEMORY = "4g"


def spark_env(driver_memory: str = SPARK_DRIVER_MEMORY) -> dict:
    return dict(
        ENV,
        PYSPARK_SUBMIT_ARGS=f"--driver-memory {driver_memory} "
        "--conf spark.sql.shuffle.partitions=8 pyspark-shell",
    )


SPARK_STEPS = ("ingest", "analysis")


def _megabytes(path: Path) -> int:
    return round(sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6)


def spark_steps(
    d: Path,
    work: Path,
    n: int,
    master: str,
    res: dict,
    save,
    steps: tuple[str, ...] = SPARK_STEPS,
    driver_memory: str = SPARK_DRIVER_MEMORY,
    keep: bool = False,
) -> None:
    """`replaygate ingest --engine spark` of the fleet into a lake, then `replaygate
    findings --engine spark` of the lake into a DuckDB file, each a process of its own
    (its time includes starting Spark). CPU seconds are the Python process's and its
    waited children's: the JVM's own CPU is counted only where it is a child reaped.
    `steps`: one of the two alone (a large fleet's ingest and analysis measured at
    different times): the ingest alone keeps its lake, the analysis alone analyses the
    lake an earlier ingest left in `work`."""
    lake, db = work / f"lake-{n}", work / f"spark-{n}.duckdb"
    env = spark_env(driver_memory)
    res["spark_master"], res["spark_driver_memory"] = master, driver_memory
    spark = ["--engine", "spark", "--lake", str(lake), "--spark-master", master]
    if "ingest" in steps:
        shutil.rmtree(lake, ignore_errors=True)
        print(f"{n:,} events: Spark ingest ({master}) ...", file=sys.stderr, flush=True)
        cmd = [PY, "-m", "replaygate", "ingest", str(d), *spark, "--json"]
        res["spark_ingest"] = _keep(run_step(cmd, env))
        res["lake_mb"] = _megabytes(lake)
        save(res)
    elif not lake.is_dir():
        raise SystemExit(f"no lake at {lake}: run the Spark ingest first (--spark-only ingest)")
    if "analysis" in steps:
        db.unlink(missing_ok=True)
        print(f"{n:,} events: Spark analysis ({master}) ...", file=sys.stderr, flush=True)
        cmd = [PY, "-m", "replaygate", "findings", *spark, "--db", str(db), "--json"]
        res["spark_analyse"] = _keep(run_step(cmd, env))
        res["spark_db_mb"] = round(db.stat().st_size / 1e6)
        res["lake_mb"] = _megabytes(lake)  # with the prepared tables under _analysis/
        save(res)
    if not keep and "analysis" in steps:
        shutil.rmtree(lake, ignore_errors=True)
        db.unlink(missing_ok=True)


def bench_size(
    n: int,
    work: Path,
    fmt: str,
    keep: bool,
    pages: bool,
    save=None,
    batches: int = 1,
    load_only: bool = False,
    spark: str | None = None,
    spark_only: tuple[str, ...] = (),
    driver_memory: str = SPARK_DRIVER_MEMORY,
) -> dict:
    """Measure one size; `save(res)` is called after every step, so a long run that is
    stopped or breaks keeps what it measured. `load_only`: the bare read and the ingest,
    the ingest again with every file staged (REPLAYGATE_DIRECT_READS=0: none read
    straight into its table), then (a fleet with JSON Lines) with every file read line
    by line (REPLAYGATE_FAST_READS=0), no analysis."""
    d = fleet_dir(work, n, fmt)
    if batches > 1 and (d.with_name(f"{d.name}-{batches}batches") / "truth.json").exists():
        d = d.with_name(f"{d.name}-{batches}batches")  # the original may be gone: disk
    res: dict = {
        "events_target": n,
        "format": fmt,
        "commit": _commit(),
    }
    save = save or (lambda r: None)
    if not (d / "truth.json").exists():
        shutil.rmtree(d, ignore_errors=True)
        cmd = [PY, "-m", "replaygate", "simulate", "--out", str(d), "--events", str(n)]
        r = run_step(cmd + ["--format", fmt, "--seed", "1", "--json"])
        res["simulate"] = _keep(r)
        res["events"] = json.loads(r["out"])["events"]
    else:
        res["events"] = json.loads((d / "truth.json").read_text())["events"]
    if batches > 1:
        if not d.name.endswith(f"-{batches}batches"):
            # In a process of its own: a child's peak RSS (wait4) starts at the bench's
            # RSS when it forks, and the split holds gigabytes.
            split = multiprocessing.get_context("spawn").Process(target=batched, args=(d, batches))
            split.start()
            split.join()
            if split.exitcode:
                raise SystemExit(f"splitting {d} into batches failed")
            d = d.with_name(f"{d.name}-{batches}batches")
        res["batches"] = batches
    res["input_mb"] = _megabytes(d)
    if spark_only:  # the Spark path alone, on a fleet whose DuckDB figures exist
        spark_steps(d, work, n, spark or "local[2]", res, save, spark_only, driver_memory, keep)
        return res
    bare_db, ours_db = work / f"bare-{n}.duckdb", work / f"ours-{n}.duckdb"
    for p in (bare_db, ours_db):
        p.unlink(missing_ok=True)
        Path(f"{p}.wal").unlink(missing_ok=True)
    print(f"{n:,} events: bare read ...", file=sys.stderr, flush=True)
    res["bare_read"] = _keep(run_step([PY, "-c", BARE, str(bare_db), str(d)]))
    save(res)
    bare_db.unlink(missing_ok=True)
    if batches > 1:
        print(f"{n:,} events: bare read in batches ...", file=sys.stderr, flush=True)
        res["bare_batches"] = bare_in_batches(d, bare_db)
        save(res)
        for p in (bare_db, Path(f"{bare_db}.wal")):
            p.unlink(missing_ok=True)
    print(f"{n:,} events: ingest ...", file=sys.stderr, flush=True)
    res["ingest"] = ingest_step(d, ours_db, batches)
    res["ingest_ratio"] = round(res["ingest"]["seconds"] / res["bare_read"]["seconds"], 2)
    res["ingest_cpu_ratio"] = round(res["ingest"]["cpu_s"] / res["bare_read"]["cpu_s"], 2)
    if "bare_batches" in res:
        res["batches_cpu_ratio"] = round(res["ingest"]["cpu_s"] / res["bare_batches"]["cpu_s"], 2)
    res["db_mb"] = round(ours_db.stat().st_size / 1e6)
    save(res)
    if load_only:
        for p in (ours_db, Path(f"{ours_db}.wal")):
            p.unlink(missing_ok=True)
        print(f"{n:,} events: ingest, every file staged ...", file=sys.stderr, flush=True)
        staged = ingest_step(d, ours_db, batches, {"REPLAYGATE_DIRECT_READS": "0"})
        res["ingest_staged"] = staged
        res["staged_cpu_ratio"] = round(staged["cpu_s"] / res["bare_read"]["cpu_s"], 2)
        save(res)
    if load_only and fmt == "parquet":  # the fast reads are JSON Lines' alone
        ours_db.unlink(missing_ok=True)
        return res
    if load_only:
        for p in (ours_db, Path(f"{ours_db}.wal")):
            p.unlink(missing_ok=True)
        print(f"{n:,} events: ingest, line by line ...", file=sys.stderr, flush=True)
        slow = ingest_step(d, ours_db, batches, {"REPLAYGATE_FAST_READS": "0"})
        res["ingest_line_exact"] = slow
        res["line_exact_cpu_ratio"] = round(slow["cpu_s"] / res["bare_read"]["cpu_s"], 2)
        ours_db.unlink(missing_ok=True)
        return res
    print(f"{n:,} events: analysis ...", file=sys.stderr, flush=True)
    r = run_step([PY, "-c", ANALYSE, str(ours_db)])
    res["analyse"] = {**json.loads(r["out"]), **_keep(r)}
    # What the analysis ran under, as its process reports it: the environment says only
    # whether an override was set, not the limit the rule gave for the events stored.
    res["memory_limit"] = res["analyse"]["memory_limit"]
    save(res)
    if pages:
        print(f"{n:,} events: dashboard pages ...", file=sys.stderr, flush=True)
        r = run_step([PY, "-c", PAGES, str(ours_db), str(ROOT / "dashboard" / "app.py")])
        res["pages"] = json.loads(r["out"])
    if spark:
        spark_steps(d, work, n, spark, res, save, driver_memory=driver_memory, keep=keep)
    if not keep:
        ours_db.unlink(missing_ok=True)
    return res


def _step(r: dict) -> str:
    return f"{r['seconds']} / {r['cpu_s']} / {r['peak_mb']:,}"


def table(results: list[dict]) -> str:
    lines = [
        "| measure | " + " | ".join(f"{r['events']:,} events" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]

    def row(label, f):
        cells = []
        for r in results:
            try:
                cells.append(f(r))
            except (KeyError, TypeError, ValueError):
                cells.append("–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    def step(label, key):
        """A measured step's row: wall seconds, CPU seconds and peak memory."""
        row(f"{label}: s / CPU s / peak MB", lambda r: _step(r[key]))

    def megabytes(label, key):
        row(f"{label}, MB", lambda r: f"{r[key]:,}")

    row("input: format, MB", lambda r: f"{r['format']}, {r['input_mb']:,}")
    step("simulate", "simulate")
    step("bare DuckDB read", "bare_read")
    step("`replaygate ingest`", "ingest")
    row(
        "— ingested as: batches, s each (fastest–slowest)",
        lambda r: "{} runs, {}–{}".format(
            len(r["ingest"]["batches"]),
            min(b["seconds"] for b in r["ingest"]["batches"]),
            max(b["seconds"] for b in r["ingest"]["batches"]),
        ),
    )
    row(
        "**ingest ÷ bare** (wall; CPU)",
        lambda r: f"{r['ingest_ratio']}x; {r['ingest_cpu_ratio']}x",
    )
    step("bare DuckDB read in the same batches, appended", "bare_batches")
    row("— ingest ÷ it, CPU", lambda r: f"{r['batches_cpu_ratio']}x")
    megabytes("database", "db_mb")
    step("ingest, every file staged", "ingest_staged")
    row("— ÷ bare, CPU", lambda r: f"{r['staged_cpu_ratio']}x")
    step("ingest, every file line by line", "ingest_line_exact")
    row("— ÷ bare, CPU", lambda r: f"{r['line_exact_cpu_ratio']}x")
    row(
        "**analysis**: s / CPU s / peak MB",
        lambda r: (
            f"{r['analyse']['analyse_s']:.1f} / {r['analyse']['cpu_s']} / "
            f"{r['analyse']['peak_mb']:,}"
        ),
    )
    row("— prepare step: s", lambda r: f"{r['analyse']['prep_s']:.1f}")
    row("— detectors: s", lambda r: f"{r['analyse']['detect_s']:.1f}")
    row(
        "— gate facts (`a_gate_sessions`, `a_gate_units`, `a_gate_requests`, `a_gate_findings`, "
        "`a_stage_samples`): s",
        lambda r: f"{r['analyse']['facts_s']:.1f}",
    )
    row(
        "— slowest detector",
        lambda r: "`{}` {:.1f} s".format(
            *max(r["analyse"]["per_detector"].items(), key=lambda kv: kv[1] or 0)
        ),
    )
    row("gates, all stages, rollback verification: s", lambda r: f"{r['analyse']['gates_s']:.2f}")
    for page in PAGE_NAMES:
        row(
            f"page {page}: s (cold / cached)",
            lambda r, p=page: (
                f"{r['pages'][p]:.2f}"
                if isinstance(r["pages"][p], float)
                else f"{r['pages'][p]['cold']:.2f} / {r['pages'][p]['cached']:.2f}"
            ),
        )
    step("Spark ingest into a lake (`--engine spark`)", "spark_ingest")
    megabytes("— lake", "lake_mb")
    step("Spark analysis into a DuckDB file", "spark_analyse")
    megabytes("— DuckDB file", "spark_db_mb")
    row(
        "— Spark's JVM, CPU s: ingest / analysis",
        lambda r: f"{r['spark_ingest']['jvm_cpu_s']} / {r['spark_analyse']['jvm_cpu_s']}",
    )
    row(
        "— load average (1 min) while Spark ran: ingest / analysis",
        lambda r: "{}–{} / {}–{}".format(
            *r["spark_ingest"]["load_range"], *r["spark_analyse"]["load_range"]
        ),
    )
    row(
        "**Spark ÷ DuckDB** (wall: ingest; analysis)",
        lambda r: "{:.1f}x; {:.1f}x".format(
            r["spark_ingest"]["seconds"] / r["ingest"]["seconds"],
            r["spark_analyse"]["seconds"] / r["analyse"]["analyse_s"],
        ),
    )
    row(
        "load average (1 min) around ingest / analysis",
        lambda r: "{}–{} / {}–{}".format(*r["ingest"]["load"], *r["analyse"]["load"]),
    )
    return "\n".join(lines)


def growth(results: list[dict]) -> str:
    """Each step's time (and peak memory) from one size to the next."""
    out = []
    for a, b in zip(results, results[1:], strict=False):
        scale = b["events"] / a["events"]
        parts = []
        for label, get in (
            ("bare read", lambda r: r["bare_read"]["seconds"]),
            ("ingest", lambda r: r["ingest"]["seconds"]),
            ("analysis", lambda r: r["analyse"]["analyse_s"]),
            ("analysis peak MB", lambda r: r["analyse"]["peak_mb"]),
            ("Spark ingest", lambda r: r["spark_ingest"]["seconds"]),
            ("Spark analysis", lambda r: r["spark_analyse"]["seconds"]),
        ):
            try:
                parts.append(f"{label} x{get(b) / get(a):.1f}")
            except KeyError:
                continue
        out.append(f"{a['events']:,} -> {b['events']:,} events (x{scale:.1f}): " + ", ".join(parts))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, help="events per fleet (default 1M and 10M)")
    ap.add_argument("--sizes", dest="sizes_opt", nargs="+", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--format", default="jsonl", choices=["jsonl", "csv", "parquet", "mixed"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--keep", action="store_true", help="keep the databases")
    ap.add_argument("--no-pages", action="store_true", help="skip the dashboard pages")
    ap.add_argument(
        "--load-only",
        action="store_true",
        help="the load alone: bare read, ingest, and ingest with every file read line by line",
    )
    ap.add_argument(
        "--batches",
        type=int,
        default=1,
        help="ingest a Parquet fleet as N batches of new files, one run each (100M events "
        "staged in one run need more temporary disk than the database itself)",
    )
    ap.add_argument(
        "--spark",
        nargs="?",
        const="local[2]",
        default=None,
        metavar="MASTER",
        help="also the Spark path (`--engine spark` ingest and analysis) on this master "
        "(default local[2]: Spark in local mode on this machine)",
    )
    ap.add_argument(
        "--spark-only",
        nargs="?",
        const="both",
        choices=["ingest", "analysis", "both"],
        help="the Spark path alone, no DuckDB steps; `ingest` keeps its lake in --out for "
        "a later `analysis` (a large fleet's two steps measured apart)",
    )
    ap.add_argument(
        "--spark-driver-memory",
        default=SPARK_DRIVER_MEMORY,
        help=f"the Spark driver's heap (local mode: the executors' too; default "
        f"{SPARK_DRIVER_MEMORY})",
    )
    args = ap.parse_args()
    spark_only = (
        SPARK_STEPS if args.spark_only == "both" else (args.spark_only,) if args.spark_only else ()
    )
    sizes = args.sizes or args.sizes_opt or [1_000_000, 10_000_000]
    work = Path(args.out)
    work.mkdir(parents=True, exist_ok=True)
    results = []

    def save(res: dict) -> None:  # the sizes done so far and the one being measured
        (work / "results.json").write_text(json.dumps([*results, res], indent=1))

    for n in sizes:
        results.append(
            bench_size(
                n,
                work,
                args.format,
                args.keep,
                not args.no_pages,
                save,
                args.batches,
                args.load_only,
                args.spark,
                spark_only,
                args.spark_driver_memory,
            )
        )
        (work / "results.json").write_text(json.dumps(results, indent=1))
    print(f"machine: {os.cpu_count()} cores, load average now {os.getloadavg()[0]:.1f}")
    print(table(results))
    if not args.load_only and not spark_only:
        print(growth(results))


if __name__ == "__main__":
    main()
