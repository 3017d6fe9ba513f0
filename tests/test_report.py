"""Audit report: golden Markdown and JSON on the sample fleet, self-contained HTML that
renders its charts offline, a PDF with the gate table, and a verifiable bundle."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from replaygate.queries import catalog

from .conftest import ROOT, SAMPLE, SAMPLE_CONF
from .conftest import run_cli as run

GOLDEN = Path(__file__).parent / "golden"
CONF = SAMPLE_CONF
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def db(sample_db):
    return sample_db


def _report(db, tmp_path, fmt, *extra):
    out = tmp_path / f"report.{fmt}"
    r = run("report", "--db", str(db), "--config", CONF, "--format", fmt, "-o", str(out), *extra)
    assert r.returncode == 0, r.stderr
    return out


def _normalise(text: str, db) -> str:
    return text.replace(str(db), "<db>")


@pytest.mark.parametrize("fmt", ["md", "json"])
def test_golden(db, tmp_path, fmt):
    got = _normalise(_report(db, tmp_path, fmt, "--stage", "write-10pct").read_text(), db)
    golden = GOLDEN / f"report-write-10pct.{fmt}"
    # The documentation's example is the same report, as `./dev demo`'s database names it.
    example = ROOT / "docs" / "example-report.md"
    as_documented = got.replace("<db>", ".replaygate/sample.duckdb")
    if os.environ.get("REPLAYGATE_UPDATE_GOLDEN"):
        golden.write_text(got)
        if fmt == "md":
            example.write_text(as_documented)
    assert got == golden.read_text()
    if fmt == "md":
        assert as_documented == example.read_text(), "REPLAYGATE_UPDATE_GOLDEN=1 regenerates it"


def test_example_html_report_is_current_and_small(db, tmp_path):
    """docs/example-report.html is the HTML report of the same stage, as `./dev demo`'s
    database names it: charts as inline SVG, no plotting library, so it stays small."""
    got = _normalise(_report(db, tmp_path, "html", "--stage", "write-10pct").read_text(), db)
    as_documented = got.replace("<db>", ".replaygate/sample.duckdb")
    example = ROOT / "docs" / "example-report.html"
    if os.environ.get("REPLAYGATE_UPDATE_GOLDEN"):
        example.write_text(as_documented)
    assert as_documented == example.read_text(), "REPLAYGATE_UPDATE_GOLDEN=1 regenerates it"
    assert len(as_documented.encode()) < 200_000


def test_deterministic(db, tmp_path):
    a = _report(db, tmp_path / "a", "json").read_bytes()
    b = _report(db, tmp_path / "b", "json").read_bytes()
    assert a == b


def test_json_contents(db, tmp_path):
    doc = json.loads(_report(db, tmp_path, "json", "--stage", "write-10pct").read_text())
    truth = json.loads((SAMPLE / "truth.json").read_text())
    assert doc["decision"] == truth["decisions"]["write-10pct"]["decision"]
    assert {g["id"]: g["status"] for g in doc["gates"]} == truth["decisions"]["write-10pct"][
        "gates"
    ]
    assert [m["detector"] for m in doc["methodology"]] == sorted(catalog.detectors())
    assert all(m["invariant"] for m in doc["methodology"])
    assert {f["path"] for f in doc["inputs"]["files"]} == {
        f"sample_data/{p.name}"
        for p in SAMPLE.iterdir()
        if p.suffix in (".jsonl", ".csv", ".parquet", ".gz")
    }
    assert all(len(f["sha256"]) == 64 for f in doc["inputs"]["files"])
    assert doc["configuration"]["sha256"]
    assert "replaygate report" in doc["reproduce"]
    assert "HMAC" in doc["redaction"]
    raw = [
        json.loads(line)["session_id"]
        for line in (SAMPLE / "proxy-edge.jsonl").read_text().splitlines()
    ]
    text = json.dumps(doc)
    assert not any(r in text for r in raw)


def test_html_is_self_contained(db, tmp_path):
    from html.parser import HTMLParser

    html = _report(db, tmp_path, "html").read_text()
    external = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if (tag in ("script", "img", "iframe") and a.get("src")) or (
                tag == "link" and a.get("href")
            ):
                external.append((tag, a))

    Tags().feed(html)
    assert external == []
    assert "@media print" in html
    # Small: its charts are inline SVG, no plotting library (plotly.js alone is 4.6 MB),
    # and it runs no script at all.
    assert len(html.encode()) < 150_000, len(html.encode())
    assert html.count('<svg class="chart-svg"') == 2
    assert "<script" not in html and "script-src" not in html


def test_chart_geometry():
    from replaygate.dashboard import svgchart
    from replaygate.dashboard.figures import STATUS_COLORS

    gates = [
        {
            "id": "duplicate_dispatches",
            "title": "A gate",
            "status": "fail",
            "kind": "count",
            "value": 2,
            "sample": 10,
            "min_sample": 0,
        },
        {
            "id": "silent_truncations",
            "title": "B",
            "status": "pass",
            "kind": "count",
            "value": 0,
            "sample": 0,
            "min_sample": 0,
        },
    ]
    g = svgchart.gate_rows(gates)
    assert [r["title"] for r in g["rows"]] == ["A gate", "B"]
    assert g["rows"][0]["fill"] == STATUS_COLORS["fail"]
    # Passing on nothing is not exercised: grey, never green.
    assert g["rows"][1]["status"] == "not exercised"
    assert g["rows"][1]["fill"] == STATUS_COLORS["not_applicable"]
    assert g["height"] >= len(gates) * svgchart.ROW
    b = svgchart.bars({"replay_gap": 1, "silent_truncation": 4, "cursor_rejected": 1}, "t")
    assert [r["label"] for r in b["rows"]] == ["silent_truncation", "cursor_rejected", "replay_gap"]
    widths = [r["w"] for r in b["rows"]]
    assert abs(widths[0] - 4 * widths[1]) <= 4 and b["label_w"] + widths[0] + 60 <= b["width"]
    assert svgchart.bars({}, "t")["empty"] == "no findings"


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_html_renders_charts_offline(db, tmp_path):
    from playwright.sync_api import sync_playwright

    html = _report(db, tmp_path, "html")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        ctx = browser.new_context(offline=True)
        page = ctx.new_page()
        page.goto(html.as_uri())
        page.wait_for_selector(".chart svg", timeout=30_000)
        charts = page.query_selector_all(".chart svg")
        assert len(charts) == 2
        # Drawn: each chart has its bars or chips, with a size on the page.
        assert all(c.bounding_box()["height"] >= 40 for c in charts)
        assert len(charts[0].query_selector_all("rect")) >= 10  # one chip per gate
        browser.close()


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed")
def test_pdf_has_the_gate_table(db, tmp_path):
    pdf = _report(db, tmp_path, "pdf", "--stage", "write-10pct")
    assert pdf.read_bytes()[:4] == b"%PDF"
    if shutil.which("pdftotext"):
        text = subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True).stdout
        assert "cross_stream_acceptances" in text and "ROLLBACK" in text


def test_bundle_and_verify(db, tmp_path):
    from .test_bundle import _keypair

    priv, pub = _keypair(tmp_path, "ci")
    out = tmp_path / "bundle"
    r = run("report", "--db", str(db), "--config", CONF, "--bundle", str(out))
    assert r.returncode == 0, r.stderr
    # Unsigned: written, said to be unsigned, and never verified.
    assert "the bundle is not signed, so `report --verify` will not accept it" in r.stderr
    assert run("report", "--verify", str(out), "--public-key", str(pub)).returncode == 1
    r = run("report", "--db", str(db), "--config", CONF, "--bundle", str(out), "--sign-key", priv)
    assert r.returncode == 0, r.stderr
    names = {p.name for p in out.iterdir()}
    assert {
        "report.md",
        "report.json",
        "report.html",
        "findings.parquet",
        "manifest.json",
        "statement.json",
    } <= names
    st = json.loads((out / "statement.json").read_text())
    assert st["_type"] == "https://in-toto.io/Statement/v1"
    assert st["predicate"]["result"] in ("PASSED", "WARNED", "FAILED")
    assert run("report", "--verify", str(out), "--public-key", str(pub)).returncode == 0
    (out / "findings.parquet").write_bytes(b"tampered")
    bad = run("report", "--verify", str(out), "--public-key", str(pub))
    assert bad.returncode == 1 and "findings.parquet: content changed" in bad.stderr
