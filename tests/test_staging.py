"""Staging left by a killed run (ingest/staging.py): `simulate`'s folder inside `--out`,
an ingest batch's folder in the temporary folder, an output's temporary file beside its
name. The next run removes what no live run holds, and never what one does."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from replaygate.audit import outputs
from replaygate.ingest import staging
from replaygate.ingest.load import STAGING_PREFIX
from replaygate.sim import STAGING_PREFIX as SIM_STAGING

from .conftest import ROOT, SAMPLE
from .conftest import run_cli as run


def _kill_simulate_while_it_stages(out: Path) -> Path:
    """Start a fleet too large to finish soon, kill -9 it once it has staged a file."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "simulate", "--out", str(out), "--sessions",
         "20000", "--engine", "python", "--format", "jsonl"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            left = [p for p in out.glob(f"{SIM_STAGING}*") if any(p.glob("*.jsonl"))]
            if left:
                break
            assert proc.poll() is None, "simulate ended before it was killed"
            time.sleep(0.2)
        else:
            raise AssertionError("simulate staged nothing within 120 s")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return left[0]


def test_a_rerun_of_simulate_removes_the_staging_a_killed_run_left(tmp_path):
    out = tmp_path / "fleet"
    left = _kill_simulate_while_it_stages(out)
    assert left.is_dir()
    r = run("simulate", "--out", out, "--sessions", "3", "--faults", "none", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    assert not left.exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]
    # ingest reads the folder recursively: only the fleet's own files, once.
    r = run("ingest", out, "--db", tmp_path / "f.duckdb", "--no-analyse", "--json")
    assert r.returncode == 0, r.stderr
    assert SIM_STAGING not in r.stdout


def test_staging_a_live_run_holds_is_never_removed(tmp_path):
    with staging.folder(tmp_path, ".x-") as live:
        (live / "part").write_text("half")
        assert staging.sweep(tmp_path, ".x-") == []
        # The same process sweeping again (another ingest of it) also keeps it.
        with staging.folder(tmp_path, ".x-") as other:
            assert live.exists() and other.exists()
    assert list(tmp_path.iterdir()) == []


def _dead(parent: Path, name: str) -> Path:
    """A staging folder as a killed run leaves it: its lock file, held by nobody."""
    p = parent / name
    p.mkdir()
    (p / staging.LOCK).touch()
    (p / "scratch.duckdb").write_bytes(b"\0" * 4096)
    return p


def test_ingest_removes_a_batch_folder_a_killed_ingest_left(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    dead = _dead(tmp, f"{STAGING_PREFIX}dead1234")
    # One a live run holds (its lock taken here) and one of someone else stay.
    live = _dead(tmp, f"{STAGING_PREFIX}live1234")
    fd = os.open(live / staging.LOCK, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    (tmp / f"{STAGING_PREFIX}link").symlink_to(dead)
    try:
        logs = tmp_path / "logs"
        shutil.copytree(SAMPLE, logs)
        r = subprocess.run(
            [sys.executable, "-m", "replaygate", "ingest", str(logs), "--db",
             str(tmp_path / "f.duckdb"), "--no-analyse"],
            cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert not dead.exists()
        assert live.exists() and (tmp / f"{STAGING_PREFIX}link").is_symlink()
        # the run's own folder is gone with it
        names = sorted(p.name for p in tmp.iterdir())
        assert names == [f"{STAGING_PREFIX}link", f"{STAGING_PREFIX}live1234"]
    finally:
        os.close(fd)


def test_a_folder_of_a_version_without_the_lock_is_removed_once_old(tmp_path):
    old = tmp_path / ".x-old"
    old.mkdir()
    young = tmp_path / ".x-young"
    young.mkdir()
    hour_ago = time.time() - staging.LEGACY_AGE - 60
    os.utime(old, (hour_ago, hour_ago))
    assert staging.sweep(tmp_path, ".x-") == [old]
    assert young.exists()


def test_an_output_removes_the_temporary_file_a_killed_run_left(tmp_path):
    out = tmp_path / "report.md"
    dead = tmp_path / ".report.md.k1ll3d.tmp"
    dead.write_text("half a report")
    g = outputs.Guard()
    with staging.temp_file(tmp_path, ".report.md.", ".tmp") as held:
        g.write_text(out, "# report\n")
        assert held.exists()  # a run still writing keeps its file
    assert not dead.exists()
    assert out.read_text() == "# report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_new_folder_is_never_swept_before_its_lock_is_held(tmp_path, monkeypatch):
    """Another run's sweep at the moment the folder's lock is being taken: the folder is
    kept (its lock file appears only once held)."""
    flock = fcntl.flock
    swept: list[list[Path]] = []

    def sweep_first(fd, op):
        if not swept:
            swept.append(staging.sweep(tmp_path, "rg-"))
        return flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", sweep_first)
    with staging.folder(tmp_path, "rg-") as path:
        assert swept == [[]] and path.is_dir()
        assert (path / staging.LOCK).exists()


def test_a_new_temporary_file_is_never_swept_before_its_lock_is_held(tmp_path, monkeypatch):
    """Another run's sweep at the moment the file's lock is being taken: the file is kept
    (it has its own name only once held)."""
    flock = fcntl.flock
    swept: list[list[Path]] = []

    def sweep_first(fd, op):
        if not swept:
            swept.append(staging.sweep_files(tmp_path, ".db.", ".publish"))
        return flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", sweep_first)
    with staging.temp_file(tmp_path, ".db.", ".publish") as held:
        assert swept == [[]] and held.is_file()
        assert held.name.endswith(".publish")
        assert staging.sweep_files(tmp_path, ".db.", ".publish") == []
        assert [p.name for p in tmp_path.iterdir()] == [held.name]
    assert list(tmp_path.iterdir()) == []


def test_a_file_left_before_its_lock_is_swept_only_once_old(tmp_path):
    young = tmp_path / ".db.y0ung.publish.new"
    old = tmp_path / ".db.0ld.publish.new"
    for p in (young, old):
        p.write_text("")
    hour_ago = time.time() - staging.LEGACY_AGE - 60
    os.utime(old, (hour_ago, hour_ago))
    assert staging.sweep_files(tmp_path, ".db.", ".publish") == [old]
    assert young.exists()
