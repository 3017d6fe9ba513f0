"""Detectors against the simulator's ground truth: exact precision and recall."""

from __future__ import annotations

from collections import Counter

import pytest

from replaygate.queries import catalog
from replaygate.sim.faults import CATALOGUE

from .conftest import build, findings_of, match_truth


def _per_detector(pairs, missed, extra):
    tp = Counter(e["detector"] for e, _ in pairs)
    fn = Counter(e["detector"] for e in missed)
    fp = Counter(f["detector"] for f in extra)
    out = {}
    for d in catalog.detectors():
        p = tp[d] / (tp[d] + fp[d]) if tp[d] + fp[d] else 1.0
        r = tp[d] / (tp[d] + fn[d]) if tp[d] + fn[d] else 1.0
        out[d] = (p, r)
    return out


def _assert_exact(con, truth):
    pairs, missed, extra = match_truth(findings_of(con), truth)
    scores = _per_detector(pairs, missed, extra)
    bad = {d: s for d, s in scores.items() if s != (1.0, 1.0)}
    assert not bad, f"precision/recall off: {bad}; missed {missed[:3]}; extra {extra[:3]}"
    for e, f in pairs:
        assert f["severity"] == e["severity"], (e, f)
        assert f["stage"] == e["stage"], (e, f)


def test_default_fleet_is_exact(fleet):
    con, truth, _ = fleet
    _assert_exact(con, truth)


def test_every_detector_is_exercised(fleet):
    con, truth, _ = fleet
    expected = {e["detector"] for f in truth["faults"] for e in f["expect"]}
    assert expected == set(catalog.detectors())


def test_every_fault_is_in_truth(fleet):
    _, truth, _ = fleet
    assert {f["fault"] for f in truth["faults"]} == set(CATALOGUE)


@pytest.mark.parametrize(
    ("seed", "sessions", "fmt"),
    [(1, 200, "jsonl"), (2, 250, "csv"), (3, 250, "parquet"), (11, 600, "mixed")],
)
def test_other_seeds_sizes_and_formats(tmp_path, seed, sessions, fmt):
    con, truth, _ = build(tmp_path, seed=seed, sessions=sessions, fmt=fmt)
    _assert_exact(con, truth)


@pytest.mark.slow
def test_larger_fleet_with_repeated_faults(tmp_path):
    con, truth, _ = build(tmp_path, seed=5, sessions=4500)
    assert len({f["id"] for f in truth["faults"]}) > len(CATALOGUE)  # two rounds
    _assert_exact(con, truth)


def test_normal_traffic_yields_no_findings(tmp_path):
    con, truth, _ = build(tmp_path, seed=21, sessions=800, faults="none")
    assert truth["faults"] == []
    assert findings_of(con) == []
