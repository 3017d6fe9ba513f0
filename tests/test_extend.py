"""CONTRIBUTING.md's recipes for a detector and a gate, held true: a toy detector and a toy
gate are each one `.sql` file dropped into a copy of the query folders, and, with nothing
else changed, the toy detector's findings, the toy gate's reading per stage, the stage's
decision, the dashboard's measure and the catalogue all follow.

The package reads its queries from `catalog.SQL_DIR`; a fresh interpreter points it at the
copy before anything loads a query (the gates are read once, when `queries.gates` loads).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from replaygate.queries import catalog, headers
from replaygate.sim import simulate
from replaygate.sim.fleet import ALLOWLIST

# The slowest proxy request of a cohort's sessions: a rule that always finds a unit on a
# fleet with a proxy log and a rollout, in a stage the test reads from the finding.
TOY_DETECTOR = """\
-- name: toy_slowest_request
-- invariant: no request of a cohort is the slowest of them (a toy: one always is)
-- severity: high
-- needs: proxy
-- facts: none
-- unit: proxy request
-- page: sessions
SELECT 'high' AS severity, p.ts, p.session_hmac,
       json_object('duration_ms', p.duration_ms, 'file_id', p.file_id, 'pos', p.pos) AS detail
FROM proxy p JOIN a_sessions a USING (session_hmac)
WHERE a.cohort IS NOT NULL
QUALIFY p.duration_ms = max(p.duration_ms) OVER ()
"""

TOY_GATE = """\
-- name: toy_slowest_requests
-- title: Slowest requests
-- page: sessions
-- kind: count
-- detectors: toy_slowest_request
-- min_sample: 0
-- sample: proxy records
-- unit: slowest requests
-- unit_one: slowest request
-- params: by_stage, flt, detectors
SELECT k AS stage, count(*) FILTER (WHERE fails(fact, detector, $detectors)) AS value,
       count(*) FILTER (WHERE fact = 'proxy_records') AS sample
FROM gate_rows($by_stage, $flt) GROUP BY k
"""

# Run in a fresh interpreter against the copied query folders.
DRIVER = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    from replaygate.queries import catalog
    catalog.SQL_DIR = Path(sys.argv[1])

    from replaygate.core import db as dbm
    from replaygate.core.config import Config
    from replaygate.ingest.load import ingest
    from replaygate.queries import catalogdoc, named
    from replaygate.dashboard import model as dashmodel
    from replaygate import api
    from replaygate.queries.filters import Filters
    from replaygate.sim.fleet import ALLOWLIST

    config = Config(origin_allowlist=ALLOWLIST)
    con = dbm.connect(sys.argv[3])
    ingest(con, [Path(sys.argv[2])], config)
    con.close()
    con = api.open_analysed(sys.argv[3], config)
    found = api.list_findings(con, detectors=["toy_slowest_request"])
    doc = api.gates_doc(con, config, all_stages=True)
    stage = found[0]["stage"]
    named.prepare(con)  # the dashboard's connection macros
    dash = dashmodel.gate_measures(con, config, Filters(stage=stage))
    print(json.dumps({
        "found": found,
        "stages": {s["stage"]: {"decision": s["decision"],
                                "gates": {g["id"]: g["status"] for g in s["gates"]}}
                   for s in doc["stages"]},
        "dashboard": {g["id"]: [g["status"], g["value"]] for g in dash},
        "page": list(dashmodel.detectors_for("sessions")),
        "page_gates": list(dashmodel.gates_for("sessions")),
        "catalogue": "toy_slowest_request" in catalogdoc.render(),
    }, default=str))
    """
)


@pytest.mark.slow
def test_a_toy_detector_and_gate_are_one_file_each(tmp_path):
    sql = tmp_path / "sql"
    shutil.copytree(catalog.SQL_DIR, sql)
    (sql / "detectors" / "toy_slowest_request.sql").write_text(TOY_DETECTOR)
    (sql / "gates" / "99_toy_slowest_requests.sql").write_text(TOY_GATE)
    from replaygate.core.config import Config

    fleet = tmp_path / "fleet"
    simulate(fleet, seed=3, sessions=120, config=Config(origin_allowlist=ALLOWLIST))
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(sql), str(fleet), str(tmp_path / "f.duckdb")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "REPLAYGATE_HMAC_KEY": "test-key-not-secret"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])

    # the detector ran and its findings were attributed to stages
    staged = {f["stage"] for f in out["found"]}
    assert out["found"] and None not in staged
    stage = out["found"][0]["stage"]
    # the gate read its findings: it fails in the stages of a finding and passes in the
    # others, and a failing gate rolls its stage back
    assert set(out["stages"]) - staged, "every stage has a finding: nothing passes"
    for name, st in out["stages"].items():
        expected = "fail" if name in staged else "pass"
        assert st["gates"]["toy_slowest_requests"] == expected, (name, st)
        assert (st["decision"] == "ROLLBACK") >= (name in staged)
    # the dashboard shows the same measure under the stage's filter, on the page its
    # header names, and the catalogue lists the detector
    assert out["dashboard"]["toy_slowest_requests"] == [
        "fail",
        len([f for f in out["found"] if f["stage"] == stage]),
    ]
    assert "toy_slowest_request" in out["page"]
    assert out["page_gates"][-1] == "toy_slowest_requests"
    assert out["catalogue"]


def test_only_the_catalog_finds_query_files():
    # The toy test's copy stands for the package only if every query is read from
    # catalog.SQL_DIR: no other module finds a .sql file of its own.
    root = catalog.SQL_DIR.parent.parent
    for folder in ("queries", "spark", "replaygate", "dashboard", "ingest"):
        for py in (root / folder).rglob("*.py"):
            if py.name == "catalog.py" and py.parent.name == "queries":
                continue
            text = py.read_text()
            assert not re.search(r"/\s*[\"']sql[\"']", text), py


def _recipe(title: str) -> str:
    """A section of CONTRIBUTING.md (`## <title>`), to the next section."""
    text = (catalog.SQL_DIR.parent.parent / "CONTRIBUTING.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize(
    ("title", "folder", "toy"),
    [("Add a detector", "detectors", TOY_DETECTOR), ("Add a gate", "gates", TOY_GATE)],
)
def test_the_recipe_names_every_header_key_and_the_toy_no_other(title, folder, toy):
    # The recipe is the documented place: it names every key the header reader takes for
    # the folder (queries/headers.py KEYS) and none it refuses, and the toy file above
    # writes only keys the recipe names, the required ones among them.
    named = set(re.findall(r"`-- (\w+):", _recipe(title)))
    taken = {k for k, key in headers.KEYS.items() if folder in key.folders}
    required = {k for k, key in headers.KEYS.items() if folder in key.required}
    used = set(re.findall(r"^-- (\w+):", toy, re.M))
    assert taken - named == set(), f"CONTRIBUTING.md's {title!r} does not name them"
    assert named - taken == set(), f"CONTRIBUTING.md's {title!r} names keys the loader refuses"
    assert required <= used <= named
