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

from replaygate.dashboard.fmt import GATE_TITLES, md_text
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


def _stages(sample_db) -> list[str]:
    return [s["stage"] for s in _cli(sample_db, "gates", "--all-stages")["stages"]]


def _gate_metrics(at) -> dict[str, str]:
    """Every metric on the page that is a gate's measure, by gate id."""
    by_title = {v: k for k, v in GATE_TITLES.items()}
    return {by_title[m.label]: m.value for m in at.metric if m.label in by_title}


def test_overview_survives_a_stage_the_sidebar_has_not_seen(app, monkeypatch):
    # While `watch` writes, the decision can name a stage the sidebar's window read missed.
    from replaygate.dashboard import data

    real = data.stages
    monkeypatch.setattr(data, "stages", lambda stamp: real(stamp).iloc[0:0])
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    assert any("Canary against baseline" in h.value for h in app.subheader)


def test_overview_headline_equals_cli(app, sample_db):
    # No stage in the URL: the stage that needs attention (here the open one).
    app.run()
    doc = _cli(sample_db, "gates")
    stage = doc["stages"][0]
    text = " ".join(m.value for m in app.markdown)
    assert f"{stage['decision']}]" in text and md_text(stage["stage"]) in text
    assert _gate_metrics(app) == {g["id"]: display_value(g) for g in stage["gates"]}


SAMPLE_STAGES = ["shadow-10pct", "resume-read-25pct", "write-10pct", "write-10pct-v2"]


@pytest.mark.parametrize("stage", SAMPLE_STAGES)
def test_every_page_agrees_with_the_decision_under_a_stage_filter(app, sample_db, stage):
    """Under ?stage=S every gate measure on every page equals `gates --stage S`, the
    Findings page counts what `findings --stage S` lists, and no page errs."""
    assert stage in _stages(sample_db)
    doc = _cli(sample_db, "gates", "--stage", stage)["stages"][0]
    expected = {g["id"]: display_value(g) for g in doc["gates"]}
    n_findings = len(_cli(sample_db, "findings", "--stage", stage)["findings"])
    seen: set[str] = set()
    for page in ["overview", *PAGES]:
        app.query_params.clear()
        app.query_params["stage"] = stage
        if page != "overview":
            app.switch_page(f"views/{page}.py")
        app.run()
        assert not app.exception, (page, [e.message for e in app.exception])
        shown = _gate_metrics(app)
        for gate_id, value in shown.items():
            assert value == expected[gate_id], (page, gate_id, value, expected[gate_id])
        seen |= set(shown)
        if page == "findings":
            assert any(c.value.startswith(f"{n_findings:,} findings") for c in app.caption)
        if page in ("overview", "rollout"):
            text = " ".join(m.value for m in app.markdown)
            assert f"{doc['decision']}]" in text
    # Every gate appears on some page besides the Overview's tiles.
    assert seen == set(expected)


def test_revision_server_and_client_filters_reach_every_figure(app, sample_db):
    import duckdb

    con = duckdb.connect(str(sample_db), read_only=True)
    client = con.execute(
        "SELECT client_name FROM a_sessions GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()[0]
    want = con.execute(
        """SELECT count(*) FROM findings f JOIN a_sessions a USING (session_hmac)
           WHERE a.client_name = $c""",
        {"c": client},
    ).fetchone()[0]
    con.close()
    app.query_params["client"] = client
    app.switch_page("views/findings.py").run()
    assert any(c.value.startswith(f"{want:,} findings") for c in app.caption)
    # The streams page's figures follow the same filter.
    app.switch_page("views/streams.py").run()
    assert not app.exception
    unfiltered = _gate_metrics(app)
    assert unfiltered


def test_reasons_and_tiles_link_to_their_evidence(app, sample_db):
    stage = "write-10pct"
    app.query_params["stage"] = stage
    app.run()
    doc = _cli(sample_db, "gates", "--stage", stage)["stages"][0]
    links = [(p.proto.label, p.proto.query_string) for p in app.get("page_link")]
    from urllib.parse import parse_qs

    for g in doc["gates"]:
        if g["status"] != "fail":
            continue
        dets = g["evidence"]["detectors"]
        hits = [
            q
            for label, q in links
            # The reason names the gate by its title, as its tile does.
            if label.replace("\\", "").removeprefix(":red[").startswith(GATE_TITLES[g["id"]])
        ]
        assert hits, g["id"]
        q = parse_qs(hits[0])
        assert q["stage"] == [stage] and q["det"] == [",".join(dets)]
    # The Findings page opened by such a link shows exactly the evidence.
    g = next(g for g in doc["gates"] if g["status"] == "fail")
    app.query_params.clear()
    app.query_params["stage"] = stage
    app.query_params["det"] = ",".join(g["evidence"]["detectors"])
    app.switch_page("views/findings.py").run()
    assert any(c.value.startswith(f"{g['evidence']['count']:,} findings") for c in app.caption)


def test_time_values_from_the_url_are_validated(app, sample_db):
    app.query_params["from"] = "9999-12-31T23:59:59Z"
    app.switch_page("views/findings.py").run()
    assert not app.exception
    assert any("outside the data" in i.value for i in app.info)
    app.query_params.clear()
    app.query_params["from"] = "2026-11-28T06:00:00Z"
    app.query_params["to"] = "2026-11-28T03:00:00Z"
    app.run()
    assert not app.exception
    assert any("inverted" in i.value for i in app.info)
    caption = [c.value for c in app.caption if "findings" in c.value][0]
    assert int(caption.split()[0].replace(",", "")) > 0


def test_data_page_shows_the_source_matrix(app):
    from replaygate.queries.sources import matrix

    app.run()
    app.switch_page("views/datafiles.py").run()
    assert not app.exception
    (shown,) = [d.value for d in app.dataframe if "recorder + proxy logs" in d.value.columns]
    assert list(shown["detector"]) == [r["detector"] for r in matrix()]
    assert (shown["recorder + proxy logs"] == "yes").sum() == sum(
        r["server_side"] for r in matrix()
    )


def test_findings_page_count_equals_cli(app, sample_db):
    app.switch_page("views/findings.py").run()
    total = len(_cli(sample_db, "findings")["findings"])
    assert any(c.value.startswith(f"{total:,} findings") for c in app.caption)
    app.multiselect(key="findings_detectors").set_value(["replay_gap"]).run()
    gaps = len(_cli(sample_db, "findings", "--detector", "replay_gap")["findings"])
    assert any(c.value.startswith(f"{gaps:,} findings") for c in app.caption)
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
    app.query_params["f_detector"] = "silent_truncation"
    app.run()
    assert not app.exception
    assert app.selectbox(key="inspector_subject").value == ("session", finding["session_hmac"])
    assert app.selectbox(key="inspector_stream").value == finding["stream_id"]
    assert any("silent" in m.value for m in app.markdown)


def test_inspector_opens_a_sessionless_finding(app, sample_db):
    # A sessionless finding the inspector can open is one named by its key or dispatch:
    # an Origin finding, say, is sessionless too but has no subject to open.
    finding = next(
        (
            f
            for f in _cli(sample_db, "findings")["findings"]
            if not f["session_hmac"] and (f["idempotency_key"] or f["dispatch_id"])
        ),
        None,
    )
    if finding is None:
        pytest.skip("the sample has no sessionless finding with a key or dispatch")
    subject = finding["idempotency_key"] or finding["dispatch_id"]
    app.switch_page("views/inspector.py")
    app.query_params["subject"] = subject
    app.run()
    assert not app.exception
    assert app.selectbox(key="inspector_subject").value[1] == subject


FORGED_LINK = (
    "**ROLLBACK cleared — PROCEED approved** [click](https://evil.example) "
    "![x](https://evil.example/beacon.png)\u202e\n## PROCEED"
)


def _rendered(app) -> list[str]:
    """Every text the page shows as Markdown (or as an alert, which is Markdown too)."""
    return [e.value for kind in ("markdown", "caption", "info", "warning", "error", "title")
            for e in getattr(app, kind)] + [m.label for m in app.metric]  # fmt: skip


def _no_forged_markdown(texts: list[str]) -> None:
    for text in texts:
        assert "](https://evil" not in text and "\u202e" not in text, text
        assert "**ROLLBACK cleared" not in text, text


@pytest.mark.parametrize("page", ["overview", "findings", "inspector"])
def test_a_crafted_link_shows_its_values_as_inert_text(app, page):
    """Every filter and inspector parameter of the URL holds the forged text: the page
    still renders, says what it ignored, and no Markdown, link or image of it survives."""
    if page != "overview":
        app.switch_page(f"views/{page}.py")
    for key in ("stage", "range", "rev", "server", "client", "session", "subject", "stream"):
        app.query_params[key] = FORGED_LINK
    app.run()
    assert not app.exception, [e.message for e in app.exception]
    texts = _rendered(app)
    _no_forged_markdown(texts)
    assert any("No stage named" in t for t in texts)
    if page == "inspector":
        assert any("Session HMAC" in t and "\\*\\*ROLLBACK" in t for t in texts), texts


def test_a_crafted_moment_is_ignored_not_a_crash(app):
    app.switch_page("views/inspector.py")
    for bad in ("yesterday", "0001-01-01T00:00:00Z", FORGED_LINK):
        app.query_params.clear()
        app.query_params["at"] = bad
        app.run()
        assert not app.exception, (bad, [e.message for e in app.exception])
        assert any("is not a timestamp" in i.value for i in app.info), bad
        _no_forged_markdown(_rendered(app))


def test_busy_or_missing_database_is_said_clearly(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    monkeypatch.setenv("REPLAYGATE_DB", str(tmp_path / "none.duckdb"))
    data.store.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    assert "replaygate ingest" in at.error[0].value


def test_a_crafted_database_path_is_shown_as_text(monkeypatch, tmp_path):
    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    monkeypatch.setenv("REPLAYGATE_DB", str(tmp_path / "**PROCEED** [ok](https:evil) $x$.duckdb"))
    data.store.clear()
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    shown = at.error[0].value
    assert "replaygate ingest" in shown and "](https:evil)" not in shown
    assert "**PROCEED**" not in shown and "\\$x\\$" in shown, shown


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


# What a gate's measure is, in `gates --stage` and on the dashboard alike: the reading,
# the sample and its minimum, the failures (by cause for a gate with `-- causes: true`),
# the units its detectors cannot tell (a file blind to the fact), the threshold and bound.
MEASURE_FIELDS = (
    "id",
    "status",
    "value",
    "sample",
    "failures",
    "min_sample",
    "no_evidence",
    "cannot_tell",
    "threshold",
    "upper_bound_95",
    "exercised",
    "causes",
)


def test_the_sample_fleet_has_blind_files_that_bear_on_the_gates(sample_db):
    """The measures' equality below is checked on a fleet that includes blind files (a
    gate leaves out what a file cannot show, and the dashboard must too): the sample
    fleet's proxy logs hold files blind to facts others show (`proxy-blind.jsonl` among
    them), some gates have units they cannot tell because of them, reinit_after_404 (the
    gate whose copy once kept blind files) among them; and every stage of it is checked."""
    from replaygate import api
    from replaygate.core import db as dbm

    from .conftest import SAMPLE_CONF

    config = api.load_config(SAMPLE_CONF)
    con = dbm.connect(str(sample_db), read_only=True)
    blind = {r[0] for r in con.execute("SELECT DISTINCT path FROM a_blind_spans").fetchall()}
    stages = [r[0] for r in con.execute("SELECT stage FROM a_stages ORDER BY start_ts").fetchall()]
    doc = api.gates_doc(con, config, all_stages=True)
    con.close()
    assert "sample_data/proxy-blind.jsonl" in blind and len(blind) > 1
    assert stages == SAMPLE_STAGES
    untold = {g["id"] for s in doc["stages"] for g in s["gates"] if g["cannot_tell"]}
    assert "reinit_after_404" in untold


@pytest.mark.parametrize("stage", SAMPLE_STAGES)
def test_gate_measures_from_the_records_equal_the_decision(sample_db, stage):
    # Under a stage alone the dashboard takes the decision's gates as its measures; the
    # measures recomputed from the records (every other filter) must agree with them.
    from replaygate import api
    from replaygate.core import db as dbm
    from replaygate.dashboard import model as dashmodel
    from replaygate.queries import named
    from replaygate.queries.filters import Filters

    from .conftest import SAMPLE_CONF

    config = api.load_config(SAMPLE_CONF)
    con = dbm.connect(str(sample_db), read_only=True)
    named.prepare(con)
    decided = api.gates_doc(con, config, stage=stage)["stages"][0]
    f = Filters(stage=stage)
    recomputed = dashmodel.gate_measures(con, config, f, decided["scope"])
    taken = dashmodel.gate_measures(con, config, f, decided["scope"], decided)
    # a gate's failures by cause (`-- causes: true`) too: its reason counts them
    assert [{k: g.get(k) for k in MEASURE_FIELDS} for g in recomputed] == [
        {k: g.get(k) for k in MEASURE_FIELDS} for g in decided["gates"]
    ]
    assert [g.get("causes") for g in taken] == [g.get("causes") for g in decided["gates"]]
    assert [(g["detectors"], g["findings"]) for g in recomputed] == [
        (g["detectors"], g["findings"]) for g in taken
    ]
    con.close()


def test_unfiltered_measures_count_every_gate_fact(sample_db):
    # With nothing filtered a gate's measure runs over every gate fact, those of no stage
    # too: a gate counting findings (`fails(...)`) counts every gated finding of its
    # detectors.
    from replaygate import api
    from replaygate.core import db as dbm
    from replaygate.queries import gates, named
    from replaygate.queries.filters import Filters

    from .conftest import SAMPLE_CONF

    config = api.load_config(SAMPLE_CONF)
    con = dbm.connect(str(sample_db), read_only=True)
    named.prepare(con)
    m = gates.measures(con, config, Filters()).get(None, {})
    found = dict(
        con.execute(
            "SELECT detector, count(*) FROM findings WHERE gated(detail) GROUP BY ALL"
        ).fetchall()
    )
    from replaygate.queries import catalog

    counted = [
        gates.BY_ID[q.name]
        for q in catalog.load("gates")
        if "count(*) FILTER (WHERE fails(" in q.sql
    ]
    assert counted
    for g in counted:
        failed = m[g.id]["failures" if g.kind.name == "share" else "value"]
        assert failed == sum(found.get(d, 0) for d in g.detectors), g.id
    proxy = con.execute("SELECT count(*) FROM proxy").fetchone()[0]
    assert m["raw_session_ids"]["sample"] >= proxy > 0
    con.close()


def test_previous_rollback_beside_a_proceed_says_it_is_not_part_of_the_decision(app, sample_db):
    """The demo opens on write-10pct-v2 (PROCEED) right after write-10pct's rollback, whose
    hygiene was not verified: the page must say that the check is the rolled-back stage's
    and does not change this decision, and not show it as a red error beside PROCEED."""
    app.run()
    doc = _cli(sample_db, "gates", "--all-stages")
    stage = next(s for s in doc["stages"] if s["window"]["open"])
    rb = next(r for r in doc["rollback_verification"] if not r["verified"])
    assert stage["decision"] == "PROCEED"
    markdown = [m.value for m in app.markdown]
    captions = [c.value for c in app.caption]
    box = [m for m in markdown if "rollback at" in m and md_text(rb["stage"]) in m]
    assert box and not any(":red[" in m for m in box), box
    assert any(":orange[" in m for m in box)
    # Each check that found something is named with its count.
    for det, n in rb["checks"].items():
        if n:
            assert any(str(n) in m for m in box), det
    meaning = [c for c in captions if "does not change the decision above" in c]
    assert meaning and "PROCEED" in meaning[0] and md_text(stage["stage"]) in meaning[0]
    # And the decision says what it is made of.
    assert any(f"{len(stage['gates'])} gates" in c for c in captions)


def test_a_not_applicable_tile_beside_findings_says_they_are_not_gated(app, sample_db):
    """A gate outside the stage's scope that still has findings (write idempotency in
    the sample's read stage shadow-10pct): the tile shows the findings and says they are
    not gated, never a bare "not applicable" beside them."""
    stage = "shadow-10pct"
    doc = _cli(sample_db, "gates", "--stage", stage)["stages"][0]
    beside = [g for g in doc["gates"] if g["status"] == "not_applicable" and g["evidence"]["count"]]
    assert beside, "the sample has a not-applicable gate with findings in this stage"
    app.query_params["stage"] = stage
    app.run()
    assert not app.exception
    captions = [c.value for c in app.caption]
    notes = [c for c in captions if c.endswith("the findings are shown, not gated")]
    assert len(notes) == len(beside), captions
    links = [p.proto.label for p in app.get("page_link")]
    for g in beside:
        n = g["evidence"]["count"]
        assert f"{n:,} finding{'s' if n != 1 else ''} ›" in links, links


def test_rollback_note_words():
    from replaygate.dashboard import fmt

    rb = {
        "stage": "s1",
        "status": "not verified",
        "verified": False,
        "rollback_at": "2026-11-28T05:00:00.000Z",
        "checks": {
            "rollback_resumable_new_stream": 1,
            "rollback_cursor_dropped": 2,
            "rollback_post_storm": 0,
        },
    }
    ok, head, meaning = fmt.rollback_note(rb, "s2", "PROCEED")
    assert not ok
    assert "1 stream opened after the rollback still resumed" in head
    assert "2 older streams' cursors dropped" in head and "POST" not in head
    assert "PROCEED is stage s2's own gates" in meaning
    blind = dict(rb, status="not verifiable", checks=dict.fromkeys(rb["checks"], 0))
    assert "nothing could be checked" in fmt.rollback_note(blind, "s2", "HOLD")[1]
    why = "1 unit its hygiene checks cannot tell (rollback_post_storm)"
    undecided = dict(blind, cannot_tell={"rollback_post_storm": 1}, unverifiable=why)
    head = fmt.rollback_note(undecided, "s2", "HOLD")[1]
    assert f"not verifiable ({why})." in head and "nothing could be checked" not in head
    good = dict(rb, status="verified", verified=True)
    assert fmt.rollback_note(good, "s2", "PROCEED")[0]


def test_findings_table_shows_detail_and_guide_first(app):
    """At 1400x1000 the Findings table's detail and field guide columns are on screen:
    they come right after the finding, at widths that fit beside the sidebar (the
    browser test measures that width)."""
    from replaygate.dashboard.ui import FINDINGS_VISIBLE

    app.run()
    app.switch_page("views/findings.py").run()
    assert not app.exception
    (table,) = [d for d in app.dataframe if "detail" in d.value.columns]
    cols = list(table.value.columns)
    config = json.loads(table.proto.columns)
    shown, used = [], 0
    for c in cols:
        width = config.get(c, {}).get("width")
        if not isinstance(width, int) or used + width > FINDINGS_VISIBLE:
            break
        shown.append(c)
        used += width
    assert {"open", "severity", "detector", "detail", "guide"} <= set(shown), shown
    # The detail is the detector's evidence in words, never raw JSON.
    assert not table.value["detail"].str.startswith("{").any()


def test_data_page_tables_read_as_words(app):
    """Headers in words, counts with separators, times as UTC text, sizes in units."""
    import re

    app.run()
    app.switch_page("views/datafiles.py").run()
    assert not app.exception
    frames = [d.value for d in app.dataframe]
    assert len(frames) >= 5
    for df in frames:
        for c in df.columns:
            assert "_" not in str(c), (c, list(df.columns))
        for c in df.columns:
            for v in df[c].astype(str):
                assert not re.search(r"\d{4}-\d\d-\d\dT\d\d:", v), (c, v)
                assert not re.fullmatch(r"\d{4,}", v), (c, v)
    (types,) = [df for df in frames if "record type" in df.columns and "rows" in df.columns]
    assert types["rows"].str.contains(",").any()
    assert types["last record"].str.endswith("UTC").all()
    (files,) = [df for df in frames if "rows loaded" in df.columns]
    assert files["size"].str.contains("iB|B").all()
