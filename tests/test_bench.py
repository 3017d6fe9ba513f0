"""The benchmark scripts start: each parses its arguments and imports what it shares with
bench/run.py (they are run by hand, so nothing else would notice them breaking)."""

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")))
def test_bench_script_starts(script):
    r = subprocess.run(
        [sys.executable, str(BENCH / script), "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout


def test_batches_hold_every_row_once(tmp_path):
    # `--batches`: the 100M fleet is ingested as batches of new files; together they must
    # be the fleet, row for row, or the figures measure something else.
    import duckdb

    sys.path.insert(0, str(BENCH))
    import run

    fleet = tmp_path / "fleet-3000-parquet"
    r = subprocess.run(
        [sys.executable, "-m", "replaygate", "simulate", "--out", str(fleet), "--sessions",
         "300", "--format", "parquet", "--seed", "3"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = run.batched(fleet, 3, small=50)
    assert (out / "truth.json").exists() and run.batched(fleet, 3) == out
    con = duckdb.connect()
    for f in fleet.glob("*.parquet"):
        parts = sorted(out.glob(f"part-*/{f.name}"))
        q = "SELECT * FROM read_parquet($f) ORDER BY ALL"
        whole = con.execute(q, {"f": str(f)}).fetchall()
        split = con.execute(q, {"f": [str(p) for p in parts]}).fetchall()
        assert whole == split, f.name
        assert len(parts) in ((1,) if f.name == "rollout.parquet" else (2, 3)), f.name


def test_analysis_step_times_the_gate_facts(tmp_path):
    # The analysis step reports the gate facts apart (docs/performance.md's row).
    import json

    sys.path.insert(0, str(BENCH))
    import run

    fleet, db = tmp_path / "fleet", tmp_path / "t.duckdb"
    r = subprocess.run(
        [sys.executable, "-m", "replaygate", "simulate", "--out", str(fleet), "--sessions",
         "40", "--format", "jsonl", "--seed", "2"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "replaygate", "ingest", str(fleet), "--db", str(db), "--no-analyse"],
        capture_output=True, text=True, env=run.ENV,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    step = run.run_step([sys.executable, "-c", run.ANALYSE, str(db)])
    assert isinstance(step["page_cache_mb"], int)
    out = json.loads(step["out"])
    assert 0 < out["facts_s"] < out["analyse_s"]
    # the limit the analysis ran under, as DuckDB holds it (the rule's for this database)
    from replaygate.core import db as dbm

    con = dbm.connect(str(db), read_only=True)
    assert (
        out["memory_limit"] == con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
    )
    con.close()
    # bench/analysis_steps.py on the same database: each statement of the analysis counted
    # once, under its detector or the table it makes (the per-step tables of the doc)
    steps_json = tmp_path / "steps.json"
    profiles = tmp_path / "profiles"
    r = subprocess.run(
        [sys.executable, str(BENCH / "analysis_steps.py"), str(db), "--json", str(steps_json),
         "--progress", "--profile", str(profiles)],
        capture_output=True, text=True, env=run.ENV,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(steps_json.read_text())
    steps = res["steps"]
    assert res["mode"] == "full" and res["findings"] > 0
    # the page cache at the start is noted (a 10M run moves ~20 % with it)
    assert isinstance(res["page_cache_mb"], int) and res["page_cache_mb"] >= 0
    assert f"page cache at start {res['page_cache_mb']} MB" in r.stdout.splitlines()[0]
    assert {"a_gate_units", "a_stage_samples", "a_missing", "undelivered_result"} <= set(steps)
    assert sum(s["cpu_s"] for s in steps.values()) <= res["analysis_cpu_s"] + 0.01
    # --progress: every statement on stderr as it ends, under its step's label (a run cut
    # short, such as a 100M analysis stopped, still tells where its time went)
    # (label, CPU s, s, MB, clock, load, and with --profile what it spilled)
    rows = [line.split("\t") for line in r.stderr.splitlines()]
    printed = [row[0] for row in rows if len(row) >= 6 and row[1].endswith(" CPU s")]
    assert sorted(set(printed)) == sorted(steps)
    assert len(printed) == sum(s["n"] for s in steps.values())
    # --profile: DuckDB's profile of each statement that ends within `execute` (a SELECT
    # whose rows are fetched later leaves none), numbered in order, and each step's spill
    kept = sorted(profiles.glob("[0-9]*.json"))
    assert 0 < len(kept) <= len(printed) and kept[0].name.startswith("00001-")
    assert "operator" in json.loads(kept[-1].read_text())
    assert "spill_mb" in steps["a_missing"] and "temp_peak_mb" in steps["a_missing"]
    # and each step's planning, the run's time per optimizer (what disabling one could save)
    assert 0 < steps["a_missing"]["plan_s"] <= res["plan_s"]
    assert "join_order" in res["optimizers"] and "total_time" not in res["optimizers"]
    assert list(res["optimizers"].values()) == sorted(res["optimizers"].values(), reverse=True)
    assert f"planning {res['plan_s']} s as profiled" in r.stdout.splitlines()[1]


def test_append_rounds_start_from_the_same_state(tmp_path):
    # bench/append.py --rounds: each round re-analyses the database as the append's ingest
    # left it (a round on the database the last one analysed from scratch would find
    # nothing to do), and the figures are the medians of the rounds.
    import json
    import statistics

    r = subprocess.run(
        [sys.executable, str(BENCH / "append.py"), "--events", "3000", "--rounds", "2",
         "--out", str(tmp_path)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads((tmp_path / "append-3000.json").read_text())
    assert len(res["rounds"]) == 2
    for one in res["rounds"]:
        assert one["reanalysis"]["mode"] == "incremental"
        assert one["scratch_analysis"]["mode"] == "full"
    for step in ("reanalysis", "scratch_analysis"):
        for k in ("cpu_s", "seconds", "analysis_cpu_s"):
            assert res[step][k] == statistics.median(o[step][k] for o in res["rounds"])
    assert res["analysis_cpu_ratio"] == round(
        res["reanalysis"]["cpu_s"] / res["scratch_analysis"]["cpu_s"], 3
    )
    assert sorted(p.name for p in tmp_path.glob("*.duckdb")) == []  # copies removed
    assert "| rounds (medians below)" in r.stdout


@pytest.mark.slow
def test_a_step_counts_the_cpu_of_the_jvm_it_never_waits_for(tmp_path):
    """Spark's JVM is a child the step's process never reaps, so wait4 misses its CPU:
    run_step samples it (`jvm_cpu_s`), and the load average's range while it ran."""
    import os
    import shutil
    import signal

    if not shutil.which("java"):
        pytest.skip("no java")
    sys.path.insert(0, str(BENCH))
    import run

    spin = tmp_path / "Spin.java"
    spin.write_text(
        "class Spin { public static void main(String[] a) { long t = System.nanoTime(); "
        "long x = 0; while (System.nanoTime() - t < 60_000_000_000L) x++; } }"
    )
    # A JVM started and left running: the step exits once it has used some CPU and
    # been sampled, without waiting for it.
    code = f"""
import os, subprocess, time
p = subprocess.Popen(["java", {str(spin)!r}], stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
print(p.pid, flush=True)
def cpu():
    f = open(f"/proc/{{p.pid}}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
while cpu() < 0.5:
    time.sleep(0.1)
time.sleep(2.5)
"""
    r = run.run_step([sys.executable, "-c", code])
    os.kill(int(r["out"].split()[0]), signal.SIGKILL)
    assert r["jvm_cpu_s"] >= 0.5 > r["cpu_s"]
    assert r["load_range"][0] <= r["load_range"][1]
    assert "jvm_cpu_s" not in run.run_step([sys.executable, "-c", "pass"])


def test_spark_only_measures_the_spark_steps_apart(tmp_path, monkeypatch):
    # `--spark-only ingest` then `--spark-only analysis`: a large fleet's two Spark steps
    # measured at different times, by the bench's own steps, no DuckDB step run; the
    # ingest keeps its lake for the analysis, the driver's heap is the one asked for.
    import json

    sys.path.insert(0, str(BENCH))
    import run

    n = 5
    fleet = run.fleet_dir(tmp_path, n, "parquet")
    fleet.mkdir()
    (fleet / "truth.json").write_text(json.dumps({"events": n}))
    ran = []

    def step(cmd, env=None):  # what a Spark step leaves behind, without Spark
        ran.append((cmd[3], env["PYSPARK_SUBMIT_ARGS"]))
        where = Path(cmd[cmd.index("--lake") + 1])
        if cmd[3] == "ingest":
            (where / "events").mkdir(parents=True)
            (where / "events" / "part-0.parquet").write_bytes(b"x" * 2_000_000)
        else:
            Path(cmd[cmd.index("--db") + 1]).write_bytes(b"x" * 3_000_000)
        return {"seconds": 1.0, "cpu_s": 0.5, "peak_mb": 10, "out": "{}"}

    monkeypatch.setattr(run, "run_step", step)
    lake = tmp_path / f"lake-{n}"
    with pytest.raises(SystemExit, match="no lake"):
        run.bench_size(n, tmp_path, "parquet", False, False, spark_only=("analysis",))
    res = run.bench_size(
        n, tmp_path, "parquet", False, False, spark_only=("ingest",), driver_memory="6g"
    )
    assert [r[0] for r in ran] == ["ingest"] and "--driver-memory 6g " in ran[0][1]
    assert "bare_read" not in res and "ingest" not in res and "spark_analyse" not in res
    assert res["spark_ingest"]["seconds"] == 1.0 and res["lake_mb"] == 2
    assert res["spark_driver_memory"] == "6g" and res["spark_master"] == "local[2]"
    assert lake.is_dir()  # kept for the analysis
    res = run.bench_size(n, tmp_path, "parquet", False, False, spark_only=("analysis",))
    assert [r[0] for r in ran] == ["ingest", "findings"] and "--driver-memory 4g " in ran[1][1]
    assert "spark_ingest" not in res and res["spark_db_mb"] == 3
    assert not lake.exists()  # the analysis alone, not kept: the lake is gone after it


def test_the_results_record_the_limit_the_analysis_ran_under(tmp_path, monkeypatch):
    # Without REPLAYGATE_MEMORY_LIMIT the analysis runs under core/db.py's rule for the
    # events stored (3 GB up to 10M, 12 GB at 100M): the results say which, as the
    # analysis reported it, never "default".
    import json

    sys.path.insert(0, str(BENCH))
    import run

    monkeypatch.delenv("REPLAYGATE_MEMORY_LIMIT", raising=False)
    n = 5
    fleet = run.fleet_dir(tmp_path, n, "parquet")
    fleet.mkdir()
    (fleet / "truth.json").write_text(json.dumps({"events": n}))

    def step(cmd, env=None):  # what each step leaves behind, without running it
        out = "{}"
        if "ingest" in cmd:
            Path(cmd[cmd.index("--db") + 1]).write_bytes(b"x")
        if cmd[1:3] == ["-c", run.ANALYSE]:
            out = json.dumps({"analyse_s": 1.0, "memory_limit": "11.1 GiB"})
        return {"seconds": 1.0, "cpu_s": 1.0, "peak_mb": 10, "load": [0.0, 0.0], "out": out}

    monkeypatch.setattr(run, "run_step", step)
    res = run.bench_size(n, tmp_path, "parquet", False, False)
    assert res["memory_limit"] == "11.1 GiB"


def test_drop_caches_refuses_in_one_line_without_the_right(monkeypatch):
    sys.path.insert(0, str(BENCH))
    import run

    def refuse(self, *a, **kw):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(run.os, "sync", lambda: None)
    monkeypatch.setattr(run.Path, "write_text", refuse)
    with pytest.raises(SystemExit, match="^--drop-caches needs root on Linux: Permission denied$"):
        run.drop_page_cache()
