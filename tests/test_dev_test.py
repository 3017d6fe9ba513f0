"""`./dev test` runs every test in two pytest processes at once, the Spark tests beside the
others: both outputs reach the log, the exit code fails when either fails, and the Spark
process does not outlive the command. Shown with a stub python in place of pytest, on the
function of `dev` that starts them (`run_tests`)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from .conftest import ROOT


def _run_tests_function() -> str:
    text = (ROOT / "dev").read_text()
    (body,) = re.findall(r"^run_tests\(\) \{\n.*?^\}\n", text, re.S | re.M)
    return body


def _stub(tmp_path: Path, others: str, spark: str) -> Path:
    """A python whose `-m pytest` runs the shell `spark` for the Spark tests (`-m spark`)
    and `others` for the rest, and writes down each call."""
    py = tmp_path / "python"
    py.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>"{tmp_path}/calls"\n'
        'case "$*" in\n'
        f"  *'-m spark'*) echo $$ >\"{tmp_path}/spark.pid\"; {spark} ;;\n"
        f"  *) {others} ;;\n"
        "esac\n"
    )
    py.chmod(0o755)
    return py


def _start(tmp_path: Path, py: Path, *args: str) -> subprocess.Popen:
    script = f'set -euo pipefail\nPY="{py}"\n{_run_tests_function()}\nrun_tests "$@"\n'
    return subprocess.Popen(
        ["bash", "-c", script, "dev", *args],
        cwd=ROOT,
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_both_halves_run_and_both_outputs_are_in_the_log(tmp_path):
    py = _stub(tmp_path, "echo others ran; exit 0", "sleep 1; echo spark ran; exit 0")
    p = _start(tmp_path, py)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    calls = (tmp_path / "calls").read_text().splitlines()
    assert sorted(c.split(" -m ")[-1] for c in calls) == ["not spark", "spark"]
    # the others' output as it comes, the Spark tests' after it (kept in a file till then)
    assert out.index("others ran") < out.index("spark ran"), out
    assert not list(tmp_path.glob("replaygate-spark-tests.*"))


def test_either_half_failing_fails_the_run(tmp_path):
    for others, spark, code in [("exit 1", "exit 0", 1), ("exit 0", "exit 1", 1),
                                ("exit 2", "exit 1", 2)]:  # fmt: skip
        p = _start(tmp_path, _stub(tmp_path, others, f"echo spark said; {spark}"))
        out, _ = p.communicate(timeout=60)
        assert p.returncode == code, (others, spark, out)
        assert "spark said" in out


def test_named_tests_run_in_one_process_as_given(tmp_path):
    p = _start(tmp_path, _stub(tmp_path, "echo one; exit 0", "exit 9"), "tests/x.py", "-x")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-m pytest --durations=25 tests/x.py -x"
    ]


def test_an_interrupt_ends_the_spark_tests_too(tmp_path):
    """Ctrl-C (SIGINT to the command's process group) while the others run: the Spark
    process, which a background job of a script does not get SIGINT in, is ended too."""
    py = _stub(tmp_path, "exec sleep 60", "exec sleep 60")
    p = _start(tmp_path, py)
    pid_file = tmp_path / "spark.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the Spark tests did not start"
        time.sleep(0.05)
    spark = int(pid_file.read_text())
    time.sleep(0.3)  # both started
    os.killpg(p.pid, signal.SIGINT)
    p.communicate(timeout=30)
    assert p.returncode != 0
    deadline = time.monotonic() + 10
    while _alive(spark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(spark), "the Spark tests outlived ./dev test"
