"""Terminal tables at 80 columns (every CI log): nothing wider, nothing cut. Ids and
times stay whole (wrapped inside their column where they must be) and `findings` shows
each finding's unit and detail."""

from __future__ import annotations

import json

import pytest

from replaygate.api import GATES, title

from .conftest import SAMPLE_CONF
from .conftest import run_cli as run

WIDTH = {"COLUMNS": "80"}


def _text(sample_db, *args) -> str:
    r = run(*args, "--db", str(sample_db), "--config", SAMPLE_CONF, env=WIDTH)
    assert r.returncode in (0, 2, 3), r.stderr
    return r.stdout


def _columns(out: str) -> list[str]:
    """The text of each column of a table with rules (`│`) between its columns, each
    column's pieces joined across lines: a value the column wrapped reads whole again."""
    cols: list[list[str]] = []
    for line in out.splitlines():
        if "│" not in line:
            continue
        for i, part in enumerate(line.split("│")):
            while len(cols) <= i:
                cols.append([])
            cols[i].append(part.strip())
    return ["".join(c) for c in cols]


def _fits(out: str) -> None:
    lines = out.splitlines()
    assert lines
    too_wide = [ln for ln in lines if len(ln) > 80]
    assert not too_wide, too_wide[:3]
    assert "…" not in out


def test_findings_table_fits_80_columns_with_whole_ids_and_detail(sample_db):
    out = _text(sample_db, "findings", "--limit", "1000")
    _fits(out)
    doc = json.loads(
        run("findings", "--db", str(sample_db), "--config", SAMPLE_CONF, "--json").stdout
    )
    left, right = _columns(out)[:2]
    shown = 0
    for f in doc["findings"]:
        assert f["detector"] in left and f["ts"] in left
        for key in ("session_hmac", "event_id", "dispatch_id", "idempotency_key"):
            if f[key]:
                assert str(f[key]) in right, (key, f[key])
                shown += 1
        # The detail column: every key of the detector's detail, with its value.
        for k, v in f["detail"].items():
            if v is not None and not isinstance(v, (list, dict)):
                assert f"{k}:{v}".replace(" ", "") in right.replace(" ", "")
    assert shown > 50  # the sample's findings carry ids (64-character session HMACs)
    assert any(len(f["session_hmac"] or "") == 64 for f in doc["findings"])


def test_gates_table_fits_80_columns_with_whole_gate_titles(sample_db):
    out = _text(sample_db, "gates", "--all-stages")
    _fits(out)
    doc = json.loads(
        run(
            "gates", "--db", str(sample_db), "--config", SAMPLE_CONF, "--all-stages", "--json"
        ).stdout
    )
    lines = [ln.strip() for ln in out.splitlines()]
    for st in doc["stages"]:
        for g in st["gates"]:
            # One line starts with the whole title (the dashboard's name of the gate),
            # the status next to it; the JSON keeps the id.
            assert any(ln.startswith(title(g["id"]) + " ") for ln in lines), g["id"]
            assert g["id"] not in out, g["id"]
    assert "insufficient" in out or "fail" in out


def test_gates_reasons_name_gates_as_the_tiles_do(sample_db):
    """The reasons, the table and the dashboard's tiles: one name per gate, its title."""
    doc = json.loads(
        run(
            "gates", "--db", str(sample_db), "--config", SAMPLE_CONF, "--all-stages", "--json"
        ).stdout
    )
    ids = {g["id"] for st in doc["stages"] for g in st["gates"]}
    reasons = [r for st in doc["stages"] for r in st["reasons"]]
    assert reasons
    for r in reasons:
        assert r.split(": ", 1)[0] in {title(i) for i in ids}, r
    assert ids == {g.id for g in GATES}


@pytest.mark.parametrize("width", ["80", "100"])
def test_status_table_keeps_times_whole(sample_db, width):
    r = run("status", "--db", str(sample_db), "--config", SAMPLE_CONF, env={"COLUMNS": width})
    assert r.returncode == 0, r.stderr
    _fits(r.stdout)
    doc = json.loads(
        run("status", "--db", str(sample_db), "--config", SAMPLE_CONF, "--json").stdout
    )
    for row in doc["tables"]:
        assert row["record_type"] in r.stdout
        for ts in (row["first"], row["last"]):
            if ts:
                assert ts in r.stdout, ts
    for s in doc["rollout"]:
        assert s["ts"] in r.stdout and s["stage"] in r.stdout
