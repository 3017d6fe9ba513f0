"""Packaging: one `replaygate` import namespace, and a CLI that never loads the UI."""

from __future__ import annotations

import subprocess
import sys
import zipfile

import pytest

from .conftest import ROOT


def _folders() -> dict[str, str]:
    """The folders that install as the package, by the name each installs under."""
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["setuptools"]["package-dir"]


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
        "replaygate/audit/decisionlog.py",
        "replaygate/api.py",
        "replaygate/dashboard/app.py",
        "replaygate/dashboard/views/overview.py",
        "replaygate/sim/fleet.py",
        "replaygate/recorder/store.py",
        "replaygate/probe/trials.py",
        "replaygate/spark/transpile.py",
    ):
        assert must in names


def test_old_top_level_names_do_not_import(tmp_path):
    # From a neutral folder, so the checkout's own folders are not on sys.path.
    names = [d for d in _folders().values() if d != "replaygate"]
    assert {"ingest", "queries", "audit", "dashboard"} <= set(names)
    for name in names:
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
        # Nor Spark: pyspark and sqlglot are loaded only for --engine spark.
        "heavy = ('streamlit', 'plotly', 'pyspark', 'sqlglot')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(','.join(bad))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ""


def test_every_third_party_import_is_declared():
    """Each module's imports, by the distribution that provides them, are among the
    dependencies (the recorder's among the recorder extra): the test venv holds more, so
    only this and the plain-install test (test_plain_install.py) see an undeclared one."""
    import ast
    import re
    import tomllib
    from importlib.metadata import packages_distributions

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}

    core = names(project["dependencies"])
    recorder = core | names(project["optional-dependencies"]["recorder"])
    spark = core | names(project["optional-dependencies"]["spark"])
    # `replaygate probe`'s command loads the probe extra (and says which to install when
    # it is missing): its module may import what that extra provides.
    probe = core | names(project["optional-dependencies"]["probe"])
    provided = packages_distributions()
    missing = []
    for folder in (d for d in _folders().values() if d != "probe"):
        allowed = {"recorder": recorder, "spark": spark}.get(folder, core)
        for path in (ROOT / folder).rglob("*.py"):
            here = probe if path == ROOT / "replaygate" / "probe_cli.py" else allowed
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    mods = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    mods = [node.module]
                else:
                    continue
                for mod in mods:
                    top = mod.split(".")[0]
                    if top in sys.stdlib_module_names or top == "replaygate":
                        continue
                    dists = {d.lower().replace("_", "-") for d in provided.get(top, [top])}
                    if not dists & here:
                        missing.append(f"{path.relative_to(ROOT)}: {top} ({', '.join(dists)})")
    assert not missing, missing
