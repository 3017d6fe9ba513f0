"""First run: `./dev demo` and the dashboard command as a new operator meets them."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
import urllib.request

import click
import pytest

from replaygate.core import config as cfg
from replaygate.core.errors import ReplaygateError

from .conftest import ROOT, SAMPLE
from .conftest import run_cli as run
from .procs import free_port, stop


def test_a_taken_port_is_one_line_naming_the_option(sample_db):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run("dashboard", "--db", str(sample_db), "--port", str(port))
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "--port" in lines[0], r.stderr
    assert "http://" not in r.stderr  # no URL printed for a dashboard that will not start


def _health(port: int, timeout: float) -> float:
    """Seconds until the dashboard on the port answers its health endpoint."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return time.monotonic() - t0
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"the demo did not answer on {port} within {timeout} s")


@pytest.mark.slow
def test_demo_reruns_without_reinstall_or_reingest(tmp_path):
    env = dict(os.environ, REPLAYGATE_DEMO_DIR=str(tmp_path))
    env.pop("PYTHONPATH", None)
    times = []
    outputs = []
    for _ in range(2):
        port = free_port()
        p = subprocess.Popen(
            [str(ROOT / "dev"), "demo", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            times.append(_health(port, timeout=600))
        finally:
            stop([p])
        outputs.append(p.stdout.read() if p.stdout else "")
    assert (tmp_path / "sample.duckdb").exists() and (tmp_path / "sample.stamp").exists()
    # The rerun neither installs nor ingests: it starts the dashboard on what is there.
    assert "loaded" not in outputs[1] and "pip" not in outputs[1].lower(), outputs[1]
    assert f"http://127.0.0.1:{port}" in outputs[1]
    assert times[1] < 20, times


def _stub_venv(tmp_path):
    """A venv for `./dev` whose python and replaygate only write down how they were
    called (and `ingest` makes its database), so a test sees what a run of `./dev demo`
    does without installing, ingesting or serving anything."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    calls = tmp_path / "calls"
    head = f'#!/bin/sh\nC="{calls}"\n'
    stubs = {
        "python": 'echo "python $*" >>"$C"\n',
        # An ingest says so when its database already exists, and makes it.
        "replaygate": 'echo "replaygate $*" >>"$C"\n'
        'if [ "$1" = ingest ]; then\n'
        '  [ -e "$4" ] && echo "into old" >>"$C"\n'
        '  touch "$4"\n'
        "fi\n",
    }
    for name, body in stubs.items():
        stub = venv / "bin" / name
        stub.write_text(head + body)
        stub.chmod(0o755)
    return venv, calls


def _demo(venv, calls, demo_dir) -> list[str]:
    """The calls one `./dev demo --port 8765` makes, in order."""
    calls.write_text("")
    env = dict(os.environ, REPLAYGATE_VENV=str(venv), REPLAYGATE_DEMO_DIR=str(demo_dir))
    r = subprocess.run(
        [str(ROOT / "dev"), "demo", "--port", "8765"], cwd=ROOT, env=env, capture_output=True
    )
    assert r.returncode == 0, r.stderr
    return [line.split()[0] + " " + line.split()[1] for line in calls.read_text().splitlines()]


def test_a_demo_rerun_only_starts_the_dashboard(tmp_path):
    """What the first run of `./dev demo` did is recorded (the install's stamp in the
    venv, the sample database's stamp beside it): a rerun with nothing changed installs
    nothing and ingests nothing; without its stamp (code or sample changed) the database
    is made again from nothing, not ingested into the old one."""
    venv, calls = _stub_venv(tmp_path)
    demo = tmp_path / "demo"
    first = _demo(venv, calls, demo)
    assert first[0] == "python -m" and "replaygate ingest" in first, first
    assert first[-1] == "replaygate dashboard"
    assert _demo(venv, calls, demo) == ["replaygate dashboard"]
    (demo / "sample.stamp").unlink()
    assert _demo(venv, calls, demo) == ["replaygate ingest", "replaygate dashboard"]


def test_the_dashboard_command_does_not_analyse_a_current_database(sample_db, monkeypatch):
    """`replaygate dashboard` refreshes findings only when the data or configuration
    changed since the analysis recorded its stamp: on a current database no detector
    runs before the dashboard starts."""
    from replaygate.queries import runner

    conf = str(SAMPLE / "replaygate.toml")
    assert run("findings", "--db", str(sample_db), "--config", conf).returncode in (0, 2)

    def refuse(*a, **k):
        raise AssertionError("a detector ran on a current database")

    monkeypatch.setattr(runner, "_run_detector", refuse)
    started = []
    monkeypatch.setattr(os, "execve", lambda *a: started.append(a[1]))
    r = run("dashboard", "--db", str(sample_db), "--config", conf, "--port", str(free_port()))
    assert r.returncode == 0, r.stderr
    assert started and "streamlit" in started[0]


def test_opening_the_overview_makes_no_report(sample_db, monkeypatch):
    """The overview's report downloads are made when clicked (Streamlit calls them then),
    not on every run of the page: opening the dashboard builds no report, and the
    Findings page writes no CSV or Parquet file."""
    from pathlib import Path

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from replaygate.audit import reportdoc
    from replaygate.dashboard import data

    monkeypatch.setenv("REPLAYGATE_DB", str(sample_db))
    monkeypatch.setenv("REPLAYGATE_CONFIG", str(SAMPLE / "replaygate.toml"))
    data.store.clear()
    st.cache_data.clear()
    made = []
    monkeypatch.setattr(reportdoc, "build", lambda *a, **k: made.append(a))
    monkeypatch.setattr(data.escape, "csv_bytes", lambda *a, **k: made.append(a))
    app = str(Path(data.__file__).parent / "app.py")
    at = AppTest.from_file(app, default_timeout=120).run()
    assert not at.exception, [e.message for e in at.exception]
    assert [b.label for b in at.get("download_button")][:1] == ["Download HTML"]
    at.switch_page("views/findings.py").run()
    assert not at.exception, [e.message for e in at.exception]
    assert [b.label for b in at.get("download_button")] == ["Download CSV", "Download Parquet"]
    assert made == []


# One configuration: what the analysis ran with is what every reader uses.


def _gates(db, *args, cwd):
    r = run("gates", "--db", str(db), "--all-stages", "--json", *args, cwd=cwd)
    assert r.returncode in (0, 2, 3), r.stderr
    return r, {s["stage"]: s for s in json.loads(r.stdout)["stages"]}


def test_readers_use_the_configuration_the_analysis_ran_with(sample_db, tmp_path):
    given, with_conf = _gates(sample_db, "--config", str(SAMPLE / "replaygate.toml"), cwd=ROOT)
    # In a folder without replaygate.toml, and without --config: the stored one.
    stored, without = _gates(sample_db, cwd=tmp_path)
    assert with_conf == without
    assert "configuration: " in stored.stderr and "stored with the analysis" in stored.stderr
    digest = cfg.load(SAMPLE / "replaygate.toml").digest()
    assert digest[:12] in stored.stderr
    assert "write-10pct-v2" in without  # the stage the defaults would HOLD


def test_a_different_local_file_is_named_not_silently_used(sample_db, tmp_path):
    (tmp_path / "replaygate.toml").write_text("reconnect_budget_qps = 1.5\n")
    r, _ = _gates(sample_db, cwd=tmp_path)
    assert "replaygate.toml differs: pass --config replaygate.toml" in r.stderr


def test_the_stored_configuration_round_trips_and_is_checked(tmp_path):
    from replaygate.core import db as dbm
    from replaygate.queries import runner

    conf = cfg.load(SAMPLE / "replaygate.toml")
    con = dbm.connect(str(tmp_path / "x.duckdb"))
    runner.store_config(con, conf)
    back = runner.stored_config(con)
    assert back is not None and back.digest() == conf.digest() and back == conf
    doc = json.loads(dbm.get_meta(con, runner.CONFIG_META) or "")
    doc["settings"]["reconnect_budget_qps"] = 99.0
    dbm.set_meta(con, runner.CONFIG_META, json.dumps(doc))
    with pytest.raises(ReplaygateError, match="does not match its digest"):
        runner.stored_config(con)


def test_status_takes_config_and_says_whether_findings_are_current(sample_db, tmp_path):
    r = run("status", "--db", str(sample_db), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["configuration"]["findings_current"] is True
    other = tmp_path / "other.toml"
    other.write_text("reconnect_budget_qps = 1.5\n")
    r = run("status", "--db", str(sample_db), "--config", str(other), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)["configuration"]
    assert doc["findings_current"] is False and doc["source"] == str(other)


def test_every_command_takes_config():
    from replaygate.cli import cli

    def walk(cmd, name):
        if isinstance(cmd, click.Group):
            for sub_name, sub in cmd.commands.items():
                yield from walk(sub, f"{name} {sub_name}".strip())
        else:
            yield name, cmd

    missing = [
        name
        for name, cmd in walk(cli, "")
        if not any("--config" in p.opts for p in cmd.params if isinstance(p, click.Option))
    ]
    # The rollout log's writers and the decision history's reader do not analyse.
    assert set(missing) <= {f"rollout {v}" for v in ROLLOUT_WRITERS} | {"history"}, missing
    assert "status" not in missing


ROLLOUT_WRITERS = ("start", "proceed", "hold", "rollback", "finish", "import")


@pytest.mark.parametrize("given", [False, True])
def test_the_dashboards_same_as_command_reproduces_its_evaluation(
    sample_db, tmp_path, monkeypatch, given
):
    import importlib.util
    import re
    import shlex
    from pathlib import Path

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data
    from replaygate.dashboard.fmt import GATE_TITLES
    from replaygate.queries.gates import display_value

    monkeypatch.setenv("REPLAYGATE_DB", str(sample_db))
    if given:
        monkeypatch.setenv("REPLAYGATE_CONFIG", str(SAMPLE / "replaygate.toml"))
    else:
        monkeypatch.delenv("REPLAYGATE_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)  # no replaygate.toml here: the stored one, or the given
    data.store.clear()
    st.cache_data.clear()  # cached by data version: another database may share it
    spec = importlib.util.find_spec("replaygate.dashboard")
    at = AppTest.from_file(str(Path(spec.origin).parent / "app.py"), default_timeout=120)
    for stage in ("write-10pct", "write-10pct-v2"):
        at.query_params["stage"] = stage
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        (caption,) = [c.value for c in at.caption if c.value.startswith("The same evaluation")]
        command = shlex.split(re.search(r"`([^`]+)`", caption).group(1))
        assert command[:2] == ["replaygate", "gates"] and "--db" in command
        assert ("--config" in command) == given
        r = run(*command[1:], "--json", cwd=tmp_path)
        assert r.returncode in (0, 2, 3), r.stderr
        doc = json.loads(r.stdout)["stages"][0]
        text = " ".join(m.value for m in at.markdown)
        assert f"{doc['decision']}] stage" in text, (stage, doc["decision"])
        by_title = {v: k for k, v in GATE_TITLES.items()}
        shown = {by_title[m.label]: m.value for m in at.metric if m.label in by_title}
        assert shown == {g["id"]: display_value(g) for g in doc["gates"]}
