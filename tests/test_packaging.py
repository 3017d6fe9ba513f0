"""Packaging: one `replaygate` import namespace, and a CLI that never loads the UI."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from .conftest import ROOT


@pytest.mark.slow
def test_wheel_holds_exactly_one_top_level_package(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), "."],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("replaygate-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"replaygate"}
    for must in (
        "replaygate/ingest/load.py",
        "replaygate/queries/sql/detectors/replay_gap.sql",
        "replaygate/dashboard/app.py",
        "replaygate/dashboard/views/overview.py",
        "replaygate/sim/fleet.py",
        "replaygate/recorder/store.py",
    ):
        assert must in names


def test_old_top_level_names_do_not_import(tmp_path):
    # From a neutral folder, so the checkout's own folders are not on sys.path.
    for name in ("ingest", "queries", "dashboard", "sim", "recorder"):
        r = subprocess.run(
            [sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True
        )
        assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr, name


def test_cli_analysis_path_imports_no_ui(tmp_path, sample_db):
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from replaygate.cli import cli\n"
        f"r = CliRunner().invoke(cli, ['gates', '--db', {str(sample_db)!r}, '--json'])\n"
        "assert r.exit_code in (0, 2, 3), r.output\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('streamlit', 'plotly'))\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""
