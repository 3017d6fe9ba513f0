"""Hostile data in every output: the HTML and Markdown reports, CSV downloads, the shell
command that reproduces a report, terminal tables, and report -o safety."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import subprocess

import pytest

from replaygate.queries import escape

from . import hostile
from .conftest import SAMPLE_CONF
from .conftest import run_cli as run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    data = hostile.fleet(root / "data")
    db = root / "hostile.duckdb"
    r = run("ingest", str(data), "--db", str(db), "--config", SAMPLE_CONF)
    assert r.returncode == 0, r.stderr
    return db


def _report(db, tmp_path, fmt, stage=hostile.FORGED_STAGE):
    out = tmp_path / f"report.{fmt}"
    r = run(
        "report", "--db", str(db), "--config", SAMPLE_CONF, "--stage", stage,
        "--format", fmt, "-o", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return out


def test_hostile_data_reaches_the_report(hostile_db, tmp_path):
    """The payloads are really in the data the report shows (else the tests below
    would prove nothing)."""
    doc = json.loads(_report(hostile_db, tmp_path, "json").read_text())
    assert doc["scope"]["stage"] == hostile.FORGED_STAGE
    assert doc["decision"] != "PROCEED"
    paths = [f["path"] for f in doc["inputs"]["files"]]
    assert any(hostile.XSS_FILE in p for p in paths)
    assert hostile.XSS_ORIGIN in json.dumps(doc["findings"], ensure_ascii=False)


def test_markdown_report_cannot_be_forged(hostile_db, tmp_path):
    import markdown_it

    md = _report(hostile_db, tmp_path, "md").read_text()
    lines = md.splitlines()
    assert lines.count("## Decision") == 1
    assert "**PROCEED**" not in lines and "<!--" not in lines
    rendered = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    assert "<img" not in rendered and "<!--" not in rendered
    assert rendered.count("<h2>Decision</h2>") == 1
    assert "<strong>PROCEED</strong>" not in rendered


def test_html_report_escapes_every_payload(hostile_db, tmp_path):
    html = _report(hostile_db, tmp_path, "html").read_text()
    for bad in ("<img", "<!--", "<script>window"):
        assert bad not in html
    assert html.count("<h2>Decision</h2>") == 1
    assert "&lt;img src=x onerror=" in html  # shown as text


def test_reproduce_command_is_shell_quoted(hostile_db, tmp_path):
    doc = json.loads(_report(hostile_db, tmp_path, "json").read_text())
    assert "\n" not in doc["reproduce"]
    # What a shell makes of it: the arguments, one per NUL.
    out = subprocess.run(
        ["bash", "-c", "printf '%s\\0' " + doc["reproduce"]], capture_output=True, check=True
    ).stdout
    argv = out.decode().split("\0")[:-1]
    assert argv[:2] == ["replaygate", "report"]
    assert argv[argv.index("--stage") + 1] == hostile.FORGED_STAGE


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_html_report_runs_no_script_in_chromium(hostile_db, tmp_path):
    from playwright.sync_api import sync_playwright

    html = _report(hostile_db, tmp_path, "html")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        page = browser.new_context(offline=True).new_page()
        page.goto(html.as_uri())
        page.wait_for_selector(".chart svg", timeout=30_000)
        ran = page.evaluate(
            "() => [window.pwned_origin, window.pwned_file, window.pwned_stage]"
            ".filter(x => x !== undefined)"
        )
        dom = page.evaluate(
            """() => ({
                imgs: document.querySelectorAll('img').length,
                handlers: [...document.querySelectorAll('*')]
                    .filter(e => [...e.attributes].some(a => a.name.startsWith('on'))).length,
                decisions: [...document.querySelectorAll('h2')]
                    .filter(h => h.textContent === 'Decision').length,
                badge: document.querySelector('[data-testid=decision]').textContent,
                text: document.body.innerText,
            })"""
        )
        browser.close()
    assert ran == []
    assert dom["imgs"] == 0 and dom["handlers"] == 0
    assert dom["decisions"] == 1 and dom["badge"] in ("HOLD", "ROLLBACK")
    # The payloads are visible as text.
    assert "onerror=window.pwned_file=1" in dom["text"]
    assert "**PROCEED**" in dom["text"]


def test_csv_cells_are_neutralised():
    cells = [hostile.FORMULA_KEY, hostile.FORMULA_DISPATCH, "+1+1", "-1+1", "\tx", "\rx"]
    for c in cells:
        assert escape.csv_cell(c).startswith("'")
    for c in ("-5", "+3.5", "plain", "", "a=b"):
        assert escape.csv_cell(c) == c
    assert escape.csv_cell(7) == 7


def test_findings_download_has_no_formula_cells(hostile_db):
    """The dashboard's findings CSV, built by the same function the page calls."""
    import duckdb
    import pandas as pd

    con = duckdb.connect(str(hostile_db), read_only=True)
    df = pd.DataFrame(
        con.execute("SELECT * FROM findings").fetchall(),
        columns=[d[0] for d in con.description],
    )
    con.close()
    keys = [k for k in df["idempotency_key"].dropna() if k.startswith("=")]
    assert keys, "the hostile fleet must produce findings with formula-looking keys"
    rows = list(csv.reader(io.StringIO(escape.csv_bytes(df).decode())))
    for row in rows:
        for cell in row:
            assert not cell.startswith(("=", "+", "@", "\t", "\r")), cell
            if cell.startswith("-"):
                float(cell)


def test_terminal_tables_render_data_as_text(hostile_db):
    r = run("gates", "--db", str(hostile_db), "--config", SAMPLE_CONF, "--all-stages")
    assert r.returncode in (2, 3), r.stderr
    assert "write-10pct`<img src=x onerror=window.pwned_stage=1>" in r.stdout


def test_report_refuses_to_overwrite_the_database_or_an_input(hostile_db, tmp_path):
    # Last in this module: on a regression it overwrites the database.
    before = hostile_db.read_bytes()
    r = run("report", "--db", str(hostile_db), "--config", SAMPLE_CONF, "-o", str(hostile_db))
    assert r.returncode == 1 and "database" in r.stderr
    assert hostile_db.read_bytes() == before
    doc = json.loads(_report(hostile_db, tmp_path, "json").read_text())
    inp = doc["inputs"]["files"][0]["path"]
    r = run("report", "--db", str(hostile_db), "--config", SAMPLE_CONF, "-o", inp)
    assert r.returncode == 1 and "input" in r.stderr
    r = run("report", "--db", str(hostile_db), "--config", SAMPLE_CONF, "-o", SAMPLE_CONF)
    assert r.returncode == 1 and "configuration" in r.stderr


def test_dashboard_renders_hostile_data_as_text(hostile_db, monkeypatch):
    """Streamlit's AppTest on the hostile database: no page passes data as HTML, and the
    stage name with its payload is shown escaped."""
    import importlib.util
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from replaygate.dashboard import data

    r = run("findings", "--db", str(hostile_db), "--config", SAMPLE_CONF, "--json")
    assert r.returncode == 0, r.stderr
    monkeypatch.setenv("REPLAYGATE_DB", str(hostile_db))
    monkeypatch.setenv("REPLAYGATE_CONFIG", SAMPLE_CONF)
    data.store.clear()
    # Cached results are keyed by data version, not by database: drop other tests' ones.
    import streamlit as st

    st.cache_data.clear()
    app_py = Path(importlib.util.find_spec("replaygate.dashboard").origin).parent / "app.py"
    try:
        at = AppTest.from_file(str(app_py), default_timeout=120)
        at.query_params["stage"] = hostile.FORGED_STAGE
        at.run()
        assert not at.exception, [e.message for e in at.exception]
        shown = [m.value for m in at.markdown]
        assert any(escape.md_text(hostile.FORGED_STAGE, streamlit=True) in v for v in shown)
        # The stage filter lists data: each option on one line, what it holds visible.
        options = at.selectbox(key="flt_stage").options
        assert escape.one_line(hostile.FORGED_STAGE) in options
        assert not [o for o in options if "\n" in o or "\u202e" in o], options
        cells = _table_cells(at)
        for page in ("rollout", "findings", "datafiles", "dispatch", "sessions", "streams"):
            at.switch_page(f"views/{page}.py").run()
            assert not at.exception, (page, [e.message for e in at.exception])
            for m in at.markdown:
                assert not m.allow_html, (page, m.value)
                # Only as an escaped \\< (literal text), never as a tag.
                assert not re.search(r"(?<!\\)<img", m.value), (page, m.value)
            cells += _table_cells(at)
        # Table cells: logged text reaches them (the stage, the Origin, a tool's name),
        # each on one line with its bidi, zero-width and control characters made visible.
        hidden = [c for c in cells if _HIDDEN.search(c)]
        assert hidden == [], hidden[:5]
        assert escape.one_line(hostile.FORGED_STAGE) in cells
        assert any(escape.one_line(hostile.BIDI_ORIGIN) in c for c in cells), cells
        assert any("[U+202E]" in c for c in cells)
    finally:
        # Leave no cached result of this database for other tests' databases.
        st.cache_data.clear()
        data.store.clear()


# What a table cell must never hold: control characters (a line break, an escape
# sequence), bidi controls and zero-width characters.
_HIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def _table_cells(at) -> list[str]:
    """Every text cell and column name of the page's tables (st.dataframe)."""
    out = []
    for t in at.dataframe:
        frame = t.value
        out += [str(c) for c in frame.columns]
        for col in frame.columns:
            out += [v for v in frame[col].tolist() if isinstance(v, str)]
    return out


def test_every_dashboard_table_goes_through_the_cell_sanitiser():
    """`ui.table` is the one way to a table on screen: no other st.dataframe or st.table."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "dashboard"
    calls = {
        p.relative_to(root).as_posix(): len(
            re.findall(r"st\.(?:dataframe|table|data_editor)\(", p.read_text())
        )
        for p in root.rglob("*.py")
    }
    assert {p: n for p, n in calls.items() if n} == {"ui.py": 1}


def test_no_dashboard_code_allows_html():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "dashboard"
    offenders = [p.name for p in root.rglob("*.py") if "unsafe_allow_html" in p.read_text()]
    assert offenders == []
