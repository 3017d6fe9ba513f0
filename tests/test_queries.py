"""The query files themselves: headers, declared parameters, one file per detector."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from replaygate.core.contract import BY_TABLE
from replaygate.queries import catalog
from replaygate.queries.gatedefs import GATES

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
DETECTORS = sorted(catalog.detectors())


def _strings_in_tests(path: Path) -> set[str]:
    """The string literals in the bodies of a test module's test functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            for stmt in node.body:
                found |= {
                    n.value
                    for n in ast.walk(stmt)
                    if isinstance(n, ast.Constant) and isinstance(n.value, str)
                }
    return found


def _expected_by_faults() -> set[str]:
    """Detectors named by an expected finding in sim/faults.py: `X(f, "<detector>", ...)`
    in a fault's body, or `("<detector>", severity)` in a `one_call(...)` declaration or an
    `on_stream(...)` call."""
    tree = ast.parse((ROOT / "sim" / "faults.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)]
    named = [n.args[1] for n in calls if n.func.id == "X" and len(n.args) > 1]
    named += [
        a.elts[0]
        for n in calls
        if n.func.id in ("one_call", "on_stream")
        for a in n.args
        if isinstance(a, ast.Tuple) and a.elts
    ]
    return {a.value for a in named if isinstance(a, ast.Constant)}


# The focused tests: test_detectors_focused.py and its topical siblings; the truth test
# runs the simulator and is the other half of the recipe.
FOCUSED = [
    p for p in sorted(TESTS.glob("test_detectors_*.py")) if p.name != "test_detectors_truth.py"
]


def test_detectors_are_found_by_file_name():
    assert DETECTORS, "no detectors found"
    for name, q in catalog.detectors().items():
        assert q.path.stem == name == q.header.get("name"), q.path


@pytest.mark.parametrize("name", DETECTORS)
def test_detector_has_a_focused_test(name):
    named = set().union(*(_strings_in_tests(p) for p in FOCUSED))
    assert name in named, f"{name}: no test in tests/test_detectors_focused.py names it"


@pytest.mark.parametrize("name", DETECTORS)
def test_detector_has_a_simulator_fault(name):
    if "decision_history" in catalog.detectors()[name].needs:
        pytest.skip("reads what replaygate recorded, not the fleet's logs (test_history.py)")
    assert name in _expected_by_faults(), f"{name}: no fault in sim/faults.py expects it"


@pytest.mark.parametrize("name", DETECTORS)
def test_header(name):
    q = catalog.detectors()[name]
    for key in ("name", "invariant", "severity", "needs", "unit"):
        assert q.header.get(key), f"{name}: no -- {key}:"
    assert set(q.severities) <= {"critical", "high", "medium", "low"}
    # Besides record types, a detector may read the decisions replaygate recorded.
    assert {t for need in q.needs for t in need.split("|")} <= {*BY_TABLE, "decision_history"}


@pytest.mark.parametrize("kind", ["detectors", "gates", "prep"])
def test_declared_params_are_the_used_params(kind):
    for q in catalog.load(kind):
        assert set(q.params) == q.used_params(), q.name


def test_no_values_formatted_into_sql():
    # Parameters are bound; the only Python-side formatting is of our own identifiers.
    for kind in ("detectors", "gates", "prep"):
        for q in catalog.load(kind):
            assert not re.search(r"\{[a-z_]+\}", q.sql), q.name


def test_severities_in_results_are_declared(fleet):
    con, _, _ = fleet
    for name, sev in con.execute("SELECT DISTINCT detector, severity FROM findings").fetchall():
        assert sev in catalog.detectors()[name].severities


def test_every_gate_has_a_measure_file():
    assert {q.name for q in catalog.load("gates")} == {g.id for g in GATES}


def test_contract_doc_is_current():
    from pathlib import Path

    from replaygate.ingest.contractdoc import render

    doc = Path(__file__).resolve().parent.parent / "docs" / "contract.md"
    assert doc.read_text() == render(), "run: python -m replaygate.ingest.contractdoc"


def test_catalogue_doc_is_current():
    from pathlib import Path

    from replaygate.queries.catalogdoc import render

    doc = Path(__file__).resolve().parent.parent / "docs" / "catalogue.md"
    assert doc.read_text() == render(), "run: python -m replaygate.queries.catalogdoc"


def test_every_gate_header_is_complete():
    for q in catalog.load("gates"):
        for key in ("title", "kind", "detectors", "min_sample", "sample", "unit"):
            assert q.header.get(key), f"{q.name}: no -- {key}:"
        assert q.header["kind"] in ("count", "share", "p99", "peak")
        assert set(catalog.split(q.header["detectors"])) <= set(catalog.detectors())


def test_sources_matrix_in_docs_is_current():
    from pathlib import Path

    from replaygate.queries.sources import matrix, render_markdown

    doc = (Path(__file__).resolve().parent.parent / "docs" / "sources.md").read_text()
    body = doc.split("<!-- sources-matrix:start -->\n", 1)[1]
    body = body.split("<!-- sources-matrix:end -->")[0]
    assert body == render_markdown(), "run: python -m replaygate.queries.sources"
    rows = {r["detector"]: r for r in matrix()}
    # A detector of the decisions replaygate recorded reads no log source at all.
    rows = {d: r for d, r in rows.items() if "decision_history" not in catalog.detectors()[d].needs}
    # Only the client sees acceptance; everything else runs on a server's own records.
    assert [d for d, r in rows.items() if not r["server_side"]] == ["duplicate_delivery_accepted"]
    assert all(r["with_inbox"] for r in rows.values())
