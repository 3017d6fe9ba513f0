"""One vocabulary and one number format for gates, whatever the surface and whatever
the gate: formats follow the gate's kind (its SQL header), never its id."""

from __future__ import annotations

import json
import re

import pytest

from replaygate.queries import gates

from .conftest import run_cli as run

KIND_OF = {g.id: g.kind.name for g in gates.GATES}


def _a(kind: str) -> str:
    return next(g.id for g in gates.GATES if g.kind.name == kind)


def _gate(kind, **kw):
    base = {"id": _a(kind), "status": "pass", "value": 0, "threshold": 0, "sample": 10}
    return base | kw


@pytest.mark.parametrize(
    ("bound", "shown"),
    [(0.0048, "< 0.48 %"), (0.3, "< 30.0 %"), (0.05, "< 5 %"), (1.0, "—"), (None, "—")],
)
def test_bounds_are_percentages_and_a_bound_of_everything_is_none(bound, shown):
    assert gates.display_bound(_gate("count", upper_bound_95=bound)) == shown


def test_values_and_thresholds_by_kind():
    assert gates.display_threshold(_gate("share", threshold=1.0)) == "100 % handled"
    assert gates.display_value(_gate("share", value=1.0)) == "100 %"
    assert gates.display_value(_gate("share", value=0.9876)) == "98.8 %"
    assert gates.display_threshold(_gate("p99", threshold=5.0)) == "< 5 s"
    assert gates.display_value(_gate("peak", value=0.1)) == "0.10/s"
    assert gates.display_value(_gate("peak", value=3.0)) == "3/s"


def test_a_pass_on_nothing_is_not_exercised():
    assert gates.display_status(_gate("peak", sample=0)) == "not exercised"
    assert gates.display_status(_gate("peak", sample=3)) == "pass"
    assert gates.display_status(_gate("count", status="not_applicable")) == "not applicable"


def test_cli_table_and_reasons_use_the_same_numbers(sample_db):
    r = run("gates", "--db", sample_db, "--all-stages", "--json")
    doc = json.loads(r.stdout)
    text = run("gates", "--db", sample_db, "--all-stages").stdout
    assert not re.search(r"\d\.\d+e[-+]\d\d", text), text  # no scientific notation
    for st in doc["stages"]:
        for g in st["gates"]:
            if g["status"] in ("fail", "pass") and g["value"] is not None and g["sample"]:
                if KIND_OF[g["id"]] in ("p99", "peak"):
                    assert gates.display_value(g) in g["reason"], g["reason"]
                assert gates.display_threshold(g) in g["reason"], g["reason"]


def test_report_bounds_are_percentages(sample_db, tmp_path):
    out = tmp_path / "r.md"
    r = run("report", "--db", sample_db, "--format", "md", "-o", out)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert not re.search(r"\d\.\d+e[-+]\d\d", text)
    assert "Re-initialize after 404" in text  # the header's title beside the id


def test_gates_without_a_rollout_log_is_a_setup_error(tmp_path):
    proxy = tmp_path / "proxy.jsonl"
    proxy.write_text(
        '{"ts":"2026-11-28T00:00:07.179Z","method":"POST","status":200,"path":"/mcp",'
        '"duration_ms":39.0,"jsonrpc_method":"initialize","request_id":"0"}\n'
    )
    db = tmp_path / "p.duckdb"
    assert run("ingest", proxy, "--db", db).returncode == 0
    r = run("gates", "--db", db, cwd=tmp_path)
    assert r.returncode == 1
    assert "no rollout log" in r.stderr and "replaygate rollout start" in r.stderr
    assert r.stderr.strip().count("\n") == 0


def test_plurals_of_one(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "notes.txt").write_text("x\n")
    (logs / "proxy.jsonl").write_text(
        '{"ts":"2026-11-28T00:00:07.179Z","method":"POST","status":200,"path":"/mcp",'
        '"duration_ms":39.0,"jsonrpc_method":"initialize","request_id":"0"}\n'
    )
    r = run("ingest", logs, "--db", tmp_path / "q.duckdb")
    assert "skipped 1 file that is not an input file" in r.stdout, r.stdout
    assert " 1 units" not in r.stdout


def test_a_plain_text_access_log_gets_a_hint_naming_the_docs(tmp_path):
    from .conftest import ROOT

    log = ROOT / "tests/fixtures/proxy/captured/nginx-combined.log"
    r = run("ingest", log, "--db", tmp_path / "n.duckdb", "--source", "nginx")
    assert r.returncode == 0, r.stderr
    (hint,) = [w for w in r.stderr.splitlines() if "plain-text access log" in w]
    assert "combined" in hint and "docs/sources.md" in hint
    # A JSON log of the configured format gets none.
    ok = ROOT / "tests/fixtures/proxy/nginx-access.log"
    r = run("ingest", ok, "--db", tmp_path / "m.duckdb", "--source", "nginx")
    assert "plain-text access log" not in r.stderr


def test_a_tile_says_when_its_count_and_its_findings_differ():
    from replaygate.dashboard import ui

    gid = _a("count")
    g = next(x for x in gates.GATES if x.id == gid)
    note = ui.count_differs({"id": gid, "value": 2}, 3)
    assert note == f"2 {g.failure_noun} in 3 findings: a finding per observation"
    assert ui.count_differs({"id": gid, "value": 3}, 3) is None
    assert ui.count_differs({"id": _a("share"), "value": 0.5}, 3) is None
