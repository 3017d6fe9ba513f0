"""Simulator: determinism, the committed sample data, the fault catalogue."""

from __future__ import annotations

import json

import pytest

from replaygate.core import config as cfg
from replaygate.sim import simulate
from replaygate.sim.faults import CATALOGUE

from .conftest import FLEET_CONFIG, SAMPLE, digests


@pytest.mark.parametrize("fmt", ["mixed", "jsonl", "csv", "parquet"])
def test_same_seed_same_bytes(tmp_path, fmt):
    simulate(tmp_path / "a", seed=3, sessions=120, fmt=fmt)
    simulate(tmp_path / "b", seed=3, sessions=120, fmt=fmt)
    assert digests(tmp_path / "a") == digests(tmp_path / "b")


def test_other_seed_other_bytes(tmp_path):
    simulate(tmp_path / "a", seed=3, sessions=120)
    simulate(tmp_path / "b", seed=4, sessions=120)
    assert digests(tmp_path / "a") != digests(tmp_path / "b")


def test_sample_data_regenerates_identically(tmp_path, monkeypatch):
    recipe = json.loads((SAMPLE / "recipe.json").read_text())
    monkeypatch.setenv("REPLAYGATE_HMAC_KEY", recipe["hmac_key"])
    config = cfg.load(SAMPLE / "replaygate.toml")
    simulate(
        tmp_path / "s",
        seed=recipe["seed"],
        sessions=recipe["sessions"],
        fmt=recipe["format"],
        config=config,
    )
    committed = {
        k: v
        for k, v in digests(SAMPLE).items()
        if k not in ("replaygate.toml", "recipe.json", "README.md")
    }
    assert digests(tmp_path / "s") == committed


def test_truth_lists_every_fault_with_its_findings(tmp_path):
    simulate(tmp_path / "t", seed=9, sessions=150, config=FLEET_CONFIG)
    truth = json.loads((tmp_path / "t" / "truth.json").read_text())
    assert {f["fault"] for f in truth["faults"]} == set(CATALOGUE)
    for f in truth["faults"]:
        # a fault whose input cannot show a fact expects units no detector can judge
        assert f["expect"] or f.get("cannot_tell"), f["fault"]
        for e in f["expect"]:
            assert e["severity"] in ("critical", "high", "medium", "low")
            assert e["unit"]
        for u in f.get("cannot_tell", []):
            assert set(u) == {"detector", "missing", "file", "stage"}, u
    assert set(truth["decisions"]) == {s["stage"] for s in truth["stages"]}


def test_fault_selection(tmp_path):
    simulate(tmp_path / "t", seed=9, sessions=50, faults="lossy_resume,reinit_missing")
    truth = json.loads((tmp_path / "t" / "truth.json").read_text())
    assert sorted(f["fault"] for f in truth["faults"]) == ["lossy_resume", "reinit_missing"]


def test_unknown_fault_is_an_error(tmp_path):
    from replaygate.core.errors import ReplaygateError

    with pytest.raises(ReplaygateError, match="unknown fault"):
        simulate(tmp_path / "t", faults="no_such_fault")


def test_events_option_scales_the_fleet(tmp_path):
    small = simulate(tmp_path / "a", seed=1, events=5_000, faults="none")
    big = simulate(tmp_path / "b", seed=1, events=20_000, faults="none")
    assert 0.5 < small["events"] / 5_000 < 2
    assert 0.5 < big["events"] / 20_000 < 2


def test_a_format_is_declared_once_offered_written_and_named(tmp_path, monkeypatch):
    """The simulator's output formats are one declaration (sim/writers.py LAYOUTS): a
    format added there is a choice of `simulate --format`, what is written and what
    truth.json names; its help lists the formats without any other command importing
    the simulator."""
    import subprocess
    import sys

    from click.testing import CliRunner

    from replaygate.cli import cli
    from replaygate.sim import writers

    layout = {table: (f"{table}-late.jsonl.gz", "epoch") for table in writers.LAYOUTS["jsonl"]}
    monkeypatch.setitem(writers.LAYOUTS, "late", layout)
    out = tmp_path / "f"
    args = ["simulate", "--out", str(out), "--sessions", "4", "--faults", "none"]
    r = CliRunner().invoke(cli, [*args, "--format", "late"])
    assert r.exit_code == 0, r.output
    assert json.loads((out / "truth.json").read_text())["format"] == "late"
    written = sorted(p.name for p in out.iterdir() if p.name != "truth.json")
    assert written == sorted(name for name, _ in layout.values())
    r = CliRunner().invoke(cli, [*args, "--format", "nope"])
    assert r.exit_code == 2 and "'late'" in r.output and "'mixed'" in r.output
    help_text = CliRunner().invoke(cli, ["simulate", "--help"]).output
    assert "[jsonl|csv|parquet|mixed|late]" in help_text
    code = "import sys, replaygate.cli; print('replaygate.sim' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout == (
        "False\n"
    )
