"""The output guard (audit/outputs.py): no file replaygate writes lands on the
database, its history, its lock, the configuration or an ingested input, none is
written through a symbolic link, and each is replaced whole by a rename."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import pytest

from replaygate.audit import outputs
from replaygate.core.config import Config
from replaygate.core.lock import lock_path
from replaygate.watch import Cycle, Watcher, heartbeat_path

from .conftest import SAMPLE
from .conftest import run_cli as run


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The sample fleet ingested from its own folder by a relative path (`logs`), with a
    recorded decision: outputs below are given from other folders."""
    home = tmp_path_factory.mktemp("outputs")
    shutil.copytree(SAMPLE, home / "logs")
    r = run("ingest", "logs", "--db", "fleet.duckdb", "--config", "logs/replaygate.toml", cwd=home)
    assert r.returncode == 0, r.stderr
    r = run(
        "gates", "--db", "fleet.duckdb", "--config", "logs/replaygate.toml", "--all-stages",
        "--record", cwd=home,
    )  # fmt: skip
    assert r.returncode == 3, r.stderr
    db = home / "fleet.duckdb"
    return {
        "home": home,
        "db": db,
        "conf": home / "logs" / "replaygate.toml",
        "history": Path(f"{db}.history.jsonl"),
        "input": home / "logs" / "sessions.jsonl",
    }


def _writers(fleet, target: Path, elsewhere: Path) -> dict[str, list[str]]:
    """Every command-line option that writes a file, pointed at target (run elsewhere)."""
    base = ["--db", str(fleet["db"]), "--config", str(fleet["conf"])]
    return {
        "gates --junit": ["gates", *base, "--stage", "write-10pct", "--junit", str(target)],
        "report -o (md)": ["report", *base, "--format", "md", "-o", str(target)],
        "report -o (json)": ["report", *base, "--format", "json", "-o", str(target)],
        "report -o (html)": ["report", *base, "--format", "html", "-o", str(target)],
        "rollout --to": [
            "rollout",
            "hold",
            "--release",
            "-",
            "--stage",
            "x",
            "--db",
            str(fleet["db"]),
            "--config",
            str(fleet["conf"]),
            "--to",
            str(target),
        ],  # fmt: skip
    }


PROTECTED = {
    "db": "database",
    "history": "decision history",
    "conf": "configuration",
    "input": "ingested input",
}


@pytest.mark.parametrize("what", sorted(PROTECTED))
@pytest.mark.parametrize(
    "option", ["gates --junit", "report -o (md)", "report -o (json)", "report -o (html)"]
)
def test_no_output_lands_on_what_replaygate_reads(fleet, tmp_path, option, what):
    target = fleet[what]
    before = target.read_bytes()
    # Run from another folder: the input was recorded by a path relative to the fleet's.
    argv = _writers(fleet, target, tmp_path)[option]
    r = run(*argv, cwd=tmp_path)
    assert r.returncode == 1, (option, what, r.stderr)
    assert PROTECTED[what] in r.stderr and "refusing to overwrite" in r.stderr, r.stderr
    assert target.read_bytes() == before


@pytest.mark.parametrize("what", ["db", "history", "conf"])
def test_a_rollout_log_is_never_the_database_its_history_or_the_configuration(
    fleet, tmp_path, what
):
    target = fleet[what]
    before = target.read_bytes()
    r = run(*_writers(fleet, target, tmp_path)["rollout --to"], cwd=tmp_path)
    assert r.returncode == 1 and PROTECTED[what] in r.stderr, r.stderr
    assert target.read_bytes() == before


def test_the_same_file_by_another_name_is_refused(fleet, tmp_path):
    """A relative path from another folder, a linked folder, a hard link: all the input."""
    before = fleet["input"].read_bytes()
    (tmp_path / "via").symlink_to(fleet["home"] / "logs", target_is_directory=True)
    os.link(fleet["input"], tmp_path / "hard.jsonl")
    rel = os.path.relpath(fleet["input"], tmp_path)
    for out in (rel, "via/sessions.jsonl", "hard.jsonl"):
        for option, argv in _writers(fleet, Path(out), tmp_path).items():
            if option == "rollout --to":
                continue  # a rollout log is an input by design
            r = run(*argv, cwd=tmp_path)
            assert r.returncode == 1 and "ingested input" in r.stderr, (option, out, r.stderr)
    assert fleet["input"].read_bytes() == before


@pytest.mark.parametrize("option", sorted(["gates --junit", "report -o (md)", "rollout --to"]))
def test_no_output_is_written_through_a_link(fleet, tmp_path, option):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    link = tmp_path / "out.file"
    link.symlink_to(victim)
    r = run(*_writers(fleet, link, tmp_path)[option], cwd=tmp_path)
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "untouched" and link.is_symlink()
    # A link to nothing would create its target: refused the same way.
    dangling = tmp_path / "dangling.file"
    dangling.symlink_to(tmp_path / "nowhere")
    r = run(*_writers(fleet, dangling, tmp_path)[option], cwd=tmp_path)
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("option", ["gates --junit", "report -o (md)"])
def test_an_output_is_replaced_whole_by_a_rename(fleet, tmp_path, option):
    """The old file's bytes stay with its other names (a rename, not a write in place),
    and no temporary file is left beside it."""
    out = tmp_path / "out.file"
    out.write_text("an earlier report")
    os.link(out, tmp_path / "earlier.copy")
    r = run(*_writers(fleet, out, tmp_path)[option], cwd=tmp_path)
    assert r.returncode in (0, 2, 3), r.stderr
    assert (tmp_path / "earlier.copy").read_text() == "an earlier report"
    assert out.read_text() != "an earlier report" and out.stat().st_size > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == ["earlier.copy", "out.file"]


def test_a_bundle_refuses_a_link_among_its_files(fleet, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    out = tmp_path / "evidence"
    out.mkdir()
    (out / "report.html").symlink_to(victim)
    r = run(
        "report", "--db", fleet["db"], "--config", fleet["conf"], "--bundle", out, cwd=tmp_path
    )  # fmt: skip
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "untouched"
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]  # nothing half written


def test_watch_heartbeat_never_follows_a_link(tmp_path):
    db = tmp_path / "fleet.duckdb"
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    beat = heartbeat_path(str(db))
    # The fixed temporary name it used to write through, and the name itself.
    beat.with_name(f".{beat.name}.tmp").symlink_to(victim)
    w = Watcher([], str(db), Config())
    w._heartbeat(Cycle(n=1, at=dt.datetime.now(dt.UTC)))
    assert victim.read_text() == "untouched"
    assert beat.exists() and not beat.is_symlink()
    beat.unlink()
    beat.symlink_to(victim)
    w._heartbeat(Cycle(n=2, at=dt.datetime.now(dt.UTC)))
    assert victim.read_text() == "untouched"


def test_the_guard_protects_the_lock_and_wal_and_refuses_non_files(tmp_path):
    db = tmp_path / "x.duckdb"
    g = outputs.for_database(db)
    for p in (lock_path(db), Path(f"{db}.wal"), db):
        with pytest.raises(outputs.OutputRefused, match="the database"):
            g.check(p)
    (tmp_path / "fifo").mkdir()
    with pytest.raises(outputs.OutputRefused, match="not a regular file"):
        g.check(tmp_path / "fifo")
    assert g.check(tmp_path / "new.md") == tmp_path.resolve() / "new.md"


def test_simulate_writes_no_file_through_a_link(tmp_path):
    out = tmp_path / "fleet"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    (out / "sessions.jsonl").symlink_to(victim)
    r = run("simulate", "--out", out, "--sessions", "3", "--faults", "none", "--format", "jsonl")
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "untouched"
    # Nothing half written is left behind: no file of the fleet, no staging folder.
    assert [p.name for p in out.iterdir()] == ["sessions.jsonl"]
    (out / "sessions.jsonl").unlink()
    r = run("simulate", "--out", out, "--sessions", "3", "--faults", "none", "--format", "jsonl")
    assert r.returncode == 0, r.stderr
    names = sorted(p.name for p in out.iterdir())
    assert "sessions.jsonl" in names and "truth.json" in names
    assert not [n for n in names if n.startswith(".")]


def test_probe_writes_no_file_through_a_link_nor_over_the_configuration(tmp_path):
    pytest.importorskip("httpx2")
    from replaygate import probe
    from replaygate.probe.discover import Discovery
    from replaygate.probe.trials import Probe, Settings

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    conf = tmp_path / "replaygate.toml"
    conf.write_text("")
    out = tmp_path / "probes"
    out.mkdir()
    guard = outputs.for_database(None, config_source=conf)
    s = Settings(url="http://127.0.0.1:9/mcp", out=out, run_id="t", key=b"k", sink=guard)
    # The summary's name is judged before the endpoint sees a request.
    (out / "probe-t.json").symlink_to(victim)
    with pytest.raises(outputs.OutputRefused, match="symbolic link"):
        probe.run(s, deadline=5)
    (out / "probe-t.json").unlink()
    # Evidence grows row by row: a link planted after the run started is refused at the
    # append, and so is a second name of the configuration.
    ev = Probe(s, Discovery("2025-11-25", "x", [], False)).ev
    (out / "inbox-probe-t.jsonl").symlink_to(victim)
    with pytest.raises(outputs.OutputRefused, match="symbolic link"):
        ev.receipt("raw", 1, stream_id="s", event_id="e", seq=1)
    os.link(conf, out / "streams-probe-t.jsonl")
    with pytest.raises(outputs.OutputRefused, match="the configuration"):
        ev.stream("raw", 1, "s", "opened")
    assert victim.read_text() == "untouched" and conf.read_text() == ""
    ev.session("raw", 1, "initialized")
    (row,) = (out / "sessions-probe-t.jsonl").read_text().splitlines()
    assert '"mcpHttpSession.v1"' in row


def test_an_append_judges_what_it_opened(tmp_path):
    """A name that passes the check but is swapped before the open (a link, a FIFO) is
    not written through and does not block."""
    g = outputs.Guard()
    target = tmp_path / "evidence.jsonl"
    g.append_bytes(target, b"a\n")
    g.append_bytes(target, b"b\n")
    assert target.read_bytes() == b"a\nb\n"
    os.mkfifo(tmp_path / "fifo")
    # The check passed before the swap: what the open finds is judged again.
    g.check = lambda out: Path(out)  # type: ignore[method-assign]
    # A FIFO without a reader fails the open at once (it would block for ever).
    with pytest.raises(outputs.OutputRefused, match="fifo: cannot write there"):
        g.append_bytes(tmp_path / "fifo", b"x")
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    (tmp_path / "link").symlink_to(victim)
    with pytest.raises(outputs.OutputRefused, match="cannot write there"):
        g.append_bytes(tmp_path / "link", b"x")
    assert victim.read_text() == "untouched"


def test_rollout_to_never_appends_through_a_link_planted_after_the_check(tmp_path, monkeypatch):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    log = tmp_path / "rollout.jsonl"
    check = outputs.Guard.check

    def check_then_swap(self, out):
        real = check(self, out)
        if Path(out) == log and not log.is_symlink():
            log.symlink_to(victim)  # what a racing writer in the folder does
        return real

    monkeypatch.setattr(outputs.Guard, "check", check_then_swap)
    r = run("rollout", "hold", "--release", "-", "--stage", "x", "--db", tmp_path / "x.duckdb",
            "--to", log)  # fmt: skip
    assert r.returncode == 1 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "untouched\n"
    log.unlink()
    monkeypatch.undo()
    r = run("rollout", "hold", "--release", "-", "--stage", "x", "--db", tmp_path / "x.duckdb",
            "--to", log)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert '"action":"hold"' in log.read_text().replace(" ", "")
