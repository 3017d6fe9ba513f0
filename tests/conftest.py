"""Shared fixtures: simulated fleets with a fixed seed, ingested into DuckDB."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

# One HMAC key for the whole run, set before anything reads the environment.
os.environ["REPLAYGATE_HMAC_KEY"] = "test-key-not-secret"
os.environ.pop("REPLAYGATE_DB", None)

from replaygate.core import db as dbm  # noqa: E402
from replaygate.core.config import Config  # noqa: E402
from replaygate.ingest.load import ingest  # noqa: E402
from replaygate.queries import runner  # noqa: E402
from replaygate.sim import simulate  # noqa: E402
from replaygate.sim.fleet import ALLOWLIST  # noqa: E402

# The configuration simulated fleets are judged by: their Origin allow-list configured.
FLEET_CONFIG = Config(origin_allowlist=ALLOWLIST)

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "sample_data"


def build(
    tmp: Path,
    seed: int = 7,
    sessions: int = 300,
    fmt: str = "mixed",
    faults: str = "all",
    config: Config | None = None,
    server_only: bool = False,
    engine: str = "auto",
):
    config = config or FLEET_CONFIG
    name = f"fleet-{seed}-{fmt}-{sessions}-{faults.replace(',', '_')[:20]}-{engine}"
    out = tmp / (name + ("-server" if server_only else ""))
    simulate(
        out,
        seed=seed,
        sessions=sessions,
        fmt=fmt,
        faults=faults,
        config=config,
        server_only=server_only,
        engine=engine,
    )
    con = dbm.connect(str(tmp / f"{out.name}.duckdb"))
    ingest(con, [out], config)
    runner.analyse(con, config)
    truth = json.loads((out / "truth.json").read_text())
    return con, truth, out


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """The default small fleet: seed 7, 300 sessions, every fault, mixed formats."""
    return build(tmp_path_factory.mktemp("fleet"))


@pytest.fixture(scope="session")
def fleet_db_path(fleet):
    con, truth, out = fleet
    return str(out.parent / f"{out.name}.duckdb")


def digests(folder: Path) -> dict[str, str]:
    """The SHA-256 of each file directly in `folder`, by name."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.iterdir())
        if p.is_file()
    }


def findings_of(con) -> list[dict]:
    cur = con.execute("SELECT * FROM findings")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for r in rows:
        r["detail"] = json.loads(r["detail"]) if r["detail"] else {}
    return rows


def unit_value(finding: dict, key: str):
    if key.startswith("detail."):
        return finding["detail"].get(key[len("detail.") :])
    if key == "ts":
        return int(finding["ts"].timestamp() * 1000)
    return finding[key]


def match_truth(findings: list[dict], truth: dict):
    """Pair expected findings with actual ones: (matched pairs, missed, extra)."""
    expected = [e for f in truth["faults"] for e in f["expect"]]
    used: set[int] = set()
    pairs, missed = [], []
    for e in expected:
        hits = [
            i
            for i, f in enumerate(findings)
            if i not in used
            and f["detector"] == e["detector"]
            and all(unit_value(f, k) == v for k, v in e["unit"].items())
        ]
        if len(hits) == 1:
            used.add(hits[0])
            pairs.append((e, findings[hits[0]]))
        else:
            missed.append(e)
    extra = [f for i, f in enumerate(findings) if i not in used]
    return pairs, missed, extra


SAMPLE_CONF = "sample_data/replaygate.toml"


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, cwd=ROOT, env=None) -> CliResult:
    """The real command line (`replaygate.cli.main`, its error handling included), run in
    this process with the sample fleet's HMAC key: what a subprocess would show, without
    starting Python again for every call."""
    import contextlib
    import traceback

    from click.testing import CliRunner

    from replaygate.cli import main

    e = {"REPLAYGATE_HMAC_KEY": "replaygate-demo-key", **(env or {})}
    runner = CliRunner()
    with runner.isolation(env=e) as (out, err, _), contextlib.chdir(cwd):
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except Exception:  # --debug lets errors through, as Python would print them
            traceback.print_exc()
            code = 1
        finally:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        stdout, stderr = out.getvalue(), err.getvalue()
    return CliResult(code, stdout.decode(), stderr.decode())


@pytest.fixture(scope="session")
def sample_db(tmp_path_factory):
    """The committed sample fleet, ingested from the repository root as the README does
    (so file paths read sample_data/...), with findings for the sample configuration."""
    path = tmp_path_factory.mktemp("sample") / "sample.duckdb"
    r = run_cli("ingest", "sample_data", "--db", str(path), "--config", SAMPLE_CONF)
    assert r.returncode == 0, r.stderr
    return path


@pytest.fixture(scope="session")
def spark():
    """One SparkSession in local mode for every Spark test of the run (starting one costs
    about a minute here), with the small-data settings of spark/runtime.py; skipped, with
    the reason, where pyspark or Java is missing."""
    pytest.importorskip("pyspark", reason="the spark extra (pyspark)")
    from replaygate.spark import runtime

    why = runtime.java_missing()
    if why:
        pytest.skip(f"Spark tests need Java: {why}")
    s = runtime.get("local[2]", runtime.SMALL_LOCAL)
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()
