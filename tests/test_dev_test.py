"""`./dev test` runs every test in two pytest processes at once, the tests marked spark, slow
or browser beside the others: both outputs reach the log, the exit code fails when either
fails, the process beside does not outlive the command, and the two take ports of halves of
their own. Shown with a stub python in place of pytest, on the function of `dev` that
starts them (`run_tests`); that the two selections together hold every test once, with
pytest's own collection of the suite."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from .conftest import ROOT


def _run_tests_function() -> str:
    text = (ROOT / "dev").read_text()
    (body,) = re.findall(r"^run_tests\(\) \{\n.*?^\}\n", text, re.S | re.M)
    return body


def _stub(tmp_path: Path, others: str, beside: str) -> Path:
    """A python whose `-m pytest` runs the shell `beside` for the tests beside the others
    (`-m EXPR`) and `others` for the rest (`-m not (EXPR)`, or no `-m`), and writes down
    each call and the half of the ports it was given."""
    py = tmp_path / "python"
    py.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>"{tmp_path}/calls"\n'
        f'echo "${{REPLAYGATE_TEST_PORT_HALF-}}" >>"{tmp_path}/halves"\n'
        'case "$*" in\n'
        f"  *' -m not '*) {others} ;;\n"
        f"  *' -m '*) echo $$ >\"{tmp_path}/beside.pid\"; {beside} ;;\n"
        f"  *) {others} ;;\n"
        "esac\n"
    )
    py.chmod(0o755)
    return py


def _start(tmp_path: Path, py: Path, *args: str) -> subprocess.Popen:
    script = f'set -euo pipefail\nPY="{py}"\n{_run_tests_function()}\nrun_tests "$@"\n'
    # Ctrl-C comes from a terminal, where SIGINT is not ignored; a test run started in the
    # background (nohup, a runner without job control) ignores it, bash cannot undo that
    # for itself, and the interrupt test would time out.
    return subprocess.Popen(
        ["env", "--default-signal=INT", "bash", "-c", script, "dev", *args],
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


def _calls(tmp_path: Path) -> list[str]:
    """The stub's calls: the one beside the others first."""
    calls = (tmp_path / "calls").read_text().splitlines()
    return sorted(calls, key=lambda c: " -m not " in c)


def test_both_halves_run_and_both_outputs_are_in_the_log(tmp_path):
    py = _stub(tmp_path, "echo others ran; exit 0", "sleep 1; echo beside ran; exit 0")
    p = _start(tmp_path, py)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    beside, others = (c.split(" -m ", 1)[1] for c in _calls(tmp_path))
    assert "spark" in beside and others == f"not ({beside})", (beside, others)
    # the others' output as it comes, the tests' beside after it (kept in a file till then)
    assert out.index("others ran") < out.index("beside ran"), out
    assert not list(tmp_path.glob("replaygate-tests-beside.*"))
    # each with a half of the ports of its own (tests/procs.py)
    assert sorted((tmp_path / "halves").read_text().split()) == ["0", "1"]


def test_either_half_failing_fails_the_run(tmp_path):
    for others, beside, code in [("exit 1", "exit 0", 1), ("exit 0", "exit 1", 1),
                                ("exit 2", "exit 1", 2)]:  # fmt: skip
        p = _start(tmp_path, _stub(tmp_path, others, f"echo beside said; {beside}"))
        out, _ = p.communicate(timeout=60)
        assert p.returncode == code, (others, beside, out)
        assert "beside said" in out


def test_named_tests_run_in_one_process_as_given(tmp_path):
    p = _start(tmp_path, _stub(tmp_path, "echo one; exit 0", "exit 9"), "tests/x.py", "-x")
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert (tmp_path / "calls").read_text().splitlines() == [
        "-m pytest --durations=25 tests/x.py -x"
    ]


def test_an_interrupt_ends_the_tests_beside_too(tmp_path):
    """Ctrl-C (SIGINT to the command's process group) while the others run: the process
    beside them, which a background job of a script does not get SIGINT in, is ended too."""
    py = _stub(tmp_path, "exec sleep 60", "exec sleep 60")
    p = _start(tmp_path, py)
    pid_file = tmp_path / "beside.pid"
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert time.monotonic() < deadline, "the tests beside did not start"
        time.sleep(0.05)
    beside = int(pid_file.read_text())
    time.sleep(0.3)  # both started
    os.killpg(p.pid, signal.SIGINT)
    p.communicate(timeout=30)
    assert p.returncode != 0
    deadline = time.monotonic() + 10
    while _alive(beside) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(beside), "the tests beside outlived ./dev test"


def _collect(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "--collect-only", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_two_processes_run_every_test_once(tmp_path):
    """The marker expressions `./dev test` gives its two processes, applied by pytest to the
    suite itself: no test is in both, and together they are every test there is."""
    p = _start(tmp_path, _stub(tmp_path, "exit 0", "exit 0"))
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    beside, others = (c.split(" -m ", 1)[1] for c in _calls(tmp_path))
    runs = [_collect("tests"), _collect("-m", beside, "tests"), _collect("-m", others, "tests")]
    every, *halves = [_ids(r) for r in runs]
    a, b = halves
    assert a and b and not a & b, sorted(a & b)[:10]
    assert a | b == every, sorted(every - (a | b))[:10]


def _ids(run: subprocess.Popen) -> set[str]:
    out, _ = run.communicate(timeout=600)
    assert run.returncode == 0, out[-3000:]
    # the node ids, one a line, then a blank line and pytest's summary
    ids = out.split("\n\n", 1)[0].splitlines()
    assert all("::" in i for i in ids), out[-3000:]
    return set(ids)
