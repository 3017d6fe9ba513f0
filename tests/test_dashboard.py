"""Dashboard pages under Streamlit's AppTest: no exceptions, headline numbers equal the
CLI's JSON, filters change what is shown."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from replaygate.queries.gates import display_value

from .conftest import SAMPLE

APP = str(Path(importlib.util.find_spec("replaygate.dashboard").origin).parent / "app.py")
PAGES = ["rollout", "streams", "dispatch", "sessions", "findings", "inspector", "datafiles"]
CONF = str(SAMPLE / "replaygate.toml")


@pytest.fixture
def app(sample_db, monkeypatch):
    from streamlit.testing.v1 import AppTest

    # Findings current for the sample's settings before the (read-only) app opens it.
    assert _cli(sample_db, "findings")["findings"]
    monkeypatch.setenv("REPLAYGATE_DB", str(sample_db))
    monkeypatch.setenv("REPLAYGATE_CONFIG", CONF)
    from replaygate.dashboard import data

    data.store.clear()
    at = AppTest.from_file(APP, default_timeout=120)
    return at


def _cli(sample_db, *args):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "replaygate",
            *args,
            "--db",
            str(sample_db),
            "--config",
            CONF,
            "--json",
        ],
        capture_output=True,
        text=True,
    )
    return json.loads(r.stdout)


def test_every_page_renders_without_exception(app):
    app.run()
    assert not app.exception
    for page in PAGES:
        app.switch_page(f"views/{page}.py").run()
        assert not app.exception, (page, [e.message for e in app.exception])
        assert not app.error, (page, [e.value for e in app.error])


def test_overview_headline_equals_cli(app, sample_db):
    app.run()
    doc = _cli(sample_db, "gates")
    stage = doc["stages"][0]
    html = " ".join(m.value for m in app.markdown)
    assert f"{stage['decision']} " in html and stage["stage"] in html
    shown = {m.label: m.value for m in app.metric}
    cli_values = {g["id"]: display_value(g) for g in stage["gates"]}
    assert shown == cli_values


def test_overview_follows_the_stage_filter(app, sample_db):
    app.query_params["stage"] = "write-10pct"
    app.run()
    html = " ".join(m.value for m in app.markdown)
    assert "ROLLBACK" in html and "write-10pct" in html
    reasons = _cli(sample_db, "gates", "--stage", "write-10pct")["stages"][0]["reasons"]
    for r in reasons:
        assert any(r in m.value for m in app.markdown), r


def test_findings_page_count_equals_cli(app, sample_db):
    app.switch_page("views/findings.py").run()
    total = len(_cli(sample_db, "findings")["findings"])
    assert any(f"{total:,} findings" in c.value for c in app.caption)
    app.multiselect(key="findings_detectors").set_value(["replay_gap"]).run()
    gaps = len(_cli(sample_db, "findings", "--detector", "replay_gap")["findings"])
    assert any(f"{gaps:,} findings" in c.value for c in app.caption)
    assert gaps < total


def test_stage_filter_is_kept_in_the_url(app):
    app.switch_page("views/findings.py").run()
    app.sidebar.selectbox(key="flt_stage").set_value("write-10pct").run()
    assert (
        app.query_params["stage"] == ["write-10pct"] or app.query_params["stage"] == "write-10pct"
    )
    caption = [c.value for c in app.caption if "findings" in c.value][0]
    n = int(caption.split()[0].replace(",", ""))
    total = len(_cli_findings_all(app))
    assert n < total


def _cli_findings_all(app):
    db = os.environ["REPLAYGATE_DB"]
    return _cli(db, "findings")["findings"]


def test_inspector_opens_the_linked_session(app, sample_db):
    finding = next(
        f for f in _cli(sample_db, "findings")["findings"] if f["detector"] == "silent_truncation"
    )
    app.switch_page("views/inspector.py")
    app.query_params["session"] = finding["session_hmac"]
    app.query_params["stream"] = finding["stream_id"]
    app.run()
    assert not app.exception
    assert app.selectbox(key="inspector_session").value == finding["session_hmac"]
    assert app.selectbox(key="inspector_stream").value == finding["stream_id"]


def test_busy_or_missing_database_is_said_clearly(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    monkeypatch.setenv("REPLAYGATE_DB", str(tmp_path / "none.duckdb"))
    data.store.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert "replaygate ingest" in at.error[0].value


def test_overview_offers_the_audit_report(app, sample_db):
    app.run()
    assert not app.exception
    labels = [b.label for b in app.get("download_button")]
    assert labels == ["Download HTML", "Download Markdown", "Download JSON"]


def test_while_an_ingest_writes_the_dashboard_says_so(monkeypatch, sample_db, tmp_path):
    import shutil as sh
    import time as t

    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    db = tmp_path / "busy.duckdb"
    sh.copy(sample_db, db)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); "
                "print('ready', flush=True); time.sleep(60)"
            ),
            str(db),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "ready"
        monkeypatch.setenv("REPLAYGATE_DB", str(db))
        data.store.clear()
        start = t.monotonic()
        at = AppTest.from_file(APP, default_timeout=60).run()
        assert not at.exception
        assert any("An ingest is writing the database" in i.value for i in at.info)
        assert t.monotonic() - start < 30
    finally:
        holder.kill()
        holder.wait()
