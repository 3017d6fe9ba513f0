"""Per-source freshness: a source far behind the others or the stage window is a
warning wherever the decision is shown, and a record from the future dates nothing."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from .conftest import SAMPLE
from .conftest import run_cli as run

LINE = (
    '{{"ts":"{ts}","method":"POST","status":200,"path":"/mcp","duration_ms":30.0,'
    '"origin":"http://localhost:6274","jsonrpc_method":"initialize","request_id":"0",'
    '"principal":"user-0161","client_addr":"10.3.94.113","user_agent":"probe/1",'
    '"upstream":"mcp-b-1"}}\n'
)


@pytest.fixture(scope="module")
def late(tmp_path_factory):
    """The sample fleet whose ledgers stopped on 2026-11-28 07:45 while the proxy log
    goes on 3.6 days later (a dead recorder behind a live proxy), plus one proxy line
    dated 2099 and a fresh rollout record."""
    tmp = tmp_path_factory.mktemp("late")
    logs = tmp / "logs"
    shutil.copytree(SAMPLE, logs)
    (logs / "proxy-late.jsonl").write_text(
        "".join(LINE.format(ts=f"2026-12-01T22:0{i}:00.000Z") for i in range(4))
        + LINE.format(ts="2099-01-01T00:00:00.000Z")
    )
    with (logs / "rollout.csv").open("a") as fh:
        fh.write("2026-12-01T22:03:30.000Z,write-10pct-v2,,hold,,,deploy-bot,\n")
    db = tmp / "late.duckdb"
    r = run("ingest", logs, "--db", db, "--config", logs / "replaygate.toml")
    assert r.returncode == 0, r.stderr
    return {"db": db, "logs": logs, "tmp": tmp}


def _gates(late, *args):
    r = run("gates", "--db", late["db"], "--json", *args)
    assert r.returncode in (0, 2, 3), r.stderr
    return r, json.loads(r.stdout)


def test_a_source_behind_the_others_is_a_warning_of_the_open_stage(late):
    _, doc = _gates(late, "--stage", "write-10pct-v2")
    (st,) = doc["stages"]
    warned = " ".join(st["warnings"])
    for source in ("session ledger", "event log", "client inbox", "dispatch records"):
        # The sample fleet's records end at about 07:45-07:46 on the 28th.
        assert re.search(rf"{source} stale: newest record 2026-11-28T07:4[56]", warned), warned
    assert "3.6 days behind" in warned
    assert "proxy log stale" not in warned  # the proxy log is the live one
    assert "rollout log" not in warned  # written at stage changes only
    assert len(st["warnings"]) == len(set(st["warnings"]))


def test_an_insufficient_gate_names_the_stale_source_it_reads(late, tmp_path):
    # Minimum samples out of reach: the gates that read the stale client inbox are short.
    db = tmp_path / "copy.duckdb"
    shutil.copy(late["db"], db)
    conf = tmp_path / "big.toml"
    conf.write_text("[min_samples]\ncross_stream_acceptances = 1000000\n")
    r = run("gates", "--db", db, "--json", "--stage", "write-10pct-v2", "--config", conf)
    assert r.returncode == 2, r.stderr
    (gate,) = [g for g in json.loads(r.stdout)["stages"][0]["gates"] if g["id"].startswith("cross")]
    assert gate["status"] == "insufficient"
    assert "client inbox stale (newest 2026-11-28T07:45" in gate["reason"], gate["reason"]
    assert gate["reason"] in json.loads(r.stdout)["stages"][0]["reasons"]


def test_the_cli_prints_the_warnings(late):
    r = run("gates", "--db", late["db"], "--stage", "write-10pct-v2")
    assert "warning: session ledger stale" in r.stdout


def test_a_closed_stage_is_judged_against_its_window_not_against_today(late):
    # write-10pct closed at 05:00 and every source covers it: nothing stale for it.
    _, doc = _gates(late, "--stage", "write-10pct")
    assert not [w for w in doc["stages"][0]["warnings"] if "stale" in w]


def test_a_record_from_the_future_dates_nothing(late):
    _, doc = _gates(late, "--stage", "write-10pct-v2")
    st = doc["stages"][0]
    assert st["window"]["data_end"].startswith("2026-12-01T22:03")
    assert any(
        "1 record dated after the last ingest (newest 2099-01-01" in w for w in st["warnings"]
    )
    out = late["tmp"] / "r.json"
    r = run("report", "--db", late["db"], "--format", "json", "-o", out)
    assert r.returncode == 0, r.stderr
    assert json.loads(out.read_text())["as_of"].startswith("2026-12-01T22:03")


def test_aligned_sources_give_no_warning(sample_db):
    r = run("gates", "--db", sample_db, "--all-stages", "--json")
    assert all(not s["warnings"] for s in json.loads(r.stdout)["stages"])


def test_the_dashboard_sidebar_warns_of_the_stale_sources(late, monkeypatch):
    import importlib.util
    from pathlib import Path

    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    monkeypatch.setenv("REPLAYGATE_DB", str(late["db"]))
    monkeypatch.delenv("REPLAYGATE_CONFIG", raising=False)
    data.store.clear()
    st.cache_data.clear()  # cached by data version: another database may share it
    spec = importlib.util.find_spec("replaygate.dashboard")
    at = AppTest.from_file(str(Path(spec.origin).parent / "app.py"), default_timeout=120)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    warned = " ".join(w.value for w in at.sidebar.warning)
    assert "session ledger stale" in warned and "3.6 days behind" in warned
    assert "2099-01-01" in warned  # the record from the future is named ...
    captions = " ".join(c.value for c in at.sidebar.caption)
    assert "Newest record 2099" not in captions and "2099" not in captions  # ... not used


def test_watchs_cycle_line_names_the_stale_sources(late, tmp_path):
    db = tmp_path / "w.duckdb"
    r = run(
        "watch", late["logs"], "--db", db, "--config", late["logs"] / "replaygate.toml",
        "--cycles", "1",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "(stale: " in out and "session ledger 3.6 days" in out, out
