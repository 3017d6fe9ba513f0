"""The running dashboard in a real headless chromium (Debian's) at 1400x1000: every page
loads with no error element, and the README's screenshots are made by the script that
`./dev screenshots` runs (the test writes its own into a temporary folder)."""

from __future__ import annotations

import csv
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from replaygate.dashboard.report import CHROMIUM_FLAGS
from replaygate.dashboard.ui import FINDINGS_VISIBLE

from .conftest import ROOT, SAMPLE
from .procs import free_port, wait_port
from .screenshots import VIEWPORT

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]
PAGES = ["overview", "rollout", "streams", "dispatch", "sessions", "findings", "inspector", "data"]
# The flags of a headless chromium on a machine with no network, as reports use them.
FLAGS = [f for f in CHROMIUM_FLAGS if f not in ("--headless", "--no-pdf-header-footer")]


@pytest.fixture(scope="module")
def server(sample_db):
    proc, url = _start(sample_db)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def _start(db, **env_extra):
    env = dict(os.environ, REPLAYGATE_HMAC_KEY="replaygate-demo-key", **env_extra)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "replaygate",
            "dashboard",
            "--db",
            str(db),
            "--config",
            str(SAMPLE / "replaygate.toml"),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_port(port, 60)
    except RuntimeError:
        proc.kill()
        pytest.fail("dashboard did not start")
    return proc, url


def test_every_page_in_a_real_browser(server, sample_db, tmp_path):
    import duckdb
    from playwright.sync_api import sync_playwright

    # The inspector's screenshot shows a replay gap with its missing seqs marked.
    con = duckdb.connect(str(sample_db), read_only=True)
    session, stream = con.execute(
        "SELECT session_hmac, stream_id FROM findings WHERE detector = 'replay_gap' LIMIT 1"
    ).fetchone()
    con.close()
    urls = {
        "overview": "/?stage=write-10pct",
        "inspector": f"/inspector?session={session}&stream={stream}&f_detector=replay_gap",
    }

    shots = tmp_path / "screenshots"
    shots.mkdir()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        for name in PAGES:
            # The overview is the default page, served at the root.
            page.goto(server + urls.get(name, f"/{name}"))
            page.wait_for_selector("[data-testid='stMainBlockContainer'] h1", timeout=60_000)
            # Let every element of the run arrive (the app signals it by going idle).
            page.wait_for_function(
                "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=60_000
            )
            page.wait_for_timeout(1500)
            errors = page.query_selector_all(
                "[data-testid='stException'], [data-testid='stAlertContentError']"
            )
            assert not errors, (name, [e.inner_text()[:300] for e in errors])
            assert "Page not found" not in page.inner_text("body"), name
            title = page.inner_text("[data-testid='stMainBlockContainer'] h1")
            assert title.strip(), name
            page.screenshot(path=str(shots / f"{name}.png"))
            _charts_are_legible(page, name)
            _labels_are_whole(page, name)
            if name == "findings":
                # The findings table (the second frame, after the per-detector summary)
                # has room for its first columns: the finding, its detail, its guide entry.
                box = page.locator("[data-testid='stDataFrame']").nth(1).bounding_box()
                assert box and box["width"] >= FINDINGS_VISIBLE, box
        browser.close()
    assert (shots / "overview.png").stat().st_size > 10_000


# Each text of a drawn chart: its words, what it is (legend entry, rollout label,
# title, ...) and its box, with the box of the chart's SVG.
CHART_TEXTS = """(el) => {
  const svg = el.querySelector('.main-svg').getBoundingClientRect();
  const kind = (t) => t.closest('.legend') ? 'legend' : t.closest('.annotation') ? 'label'
    : t.closest('.g-gtitle') ? 'title' : t.closest('.slice') ? 'slice' : 'other';
  return {svg: [svg.left, svg.top, svg.right, svg.bottom],
    texts: [...el.querySelectorAll('.main-svg text')].filter((t) => t.textContent)
      .map((t) => { const r = t.getBoundingClientRect();
        return [t.textContent, kind(t), r.left, r.top, r.right, r.bottom]; })
      .filter((t) => t[4] > t[2] && t[5] > t[3])};
}"""


def _charts_are_legible(page, name: str) -> None:
    """Every text of every chart lies inside the chart (nothing cut off), and no legend
    entry, rollout label or title covers another text."""
    charts = page.locator("[data-testid='stPlotlyChart']")
    for i in range(charts.count()):
        chart = charts.nth(i)
        chart.scroll_into_view_if_needed()
        chart.locator(".main-svg text").first.wait_for(timeout=60_000)
        drawn = chart.evaluate(CHART_TEXTS)
        left, top, right, bottom = drawn["svg"]
        texts = drawn["texts"]
        for text, kind, x0, y0, x1, y1 in texts:
            # 2 px: a glyph's box may reach past the line it is set on.
            inside = x0 >= left - 2 and y0 >= top - 2 and x1 <= right + 2 and y1 <= bottom + 2
            assert inside, (name, i, text, kind, (x0, y0, x1, y1), drawn["svg"])
        for j, a in enumerate(texts):
            for b in texts[j + 1 :]:
                if "other" in (a[1], b[1]) and {a[1], b[1]} <= {"other", "slice"}:
                    continue  # ticks and marker labels among themselves: plotly's own
                overlap_x = min(a[4], b[4]) - max(a[2], b[2])
                overlap_y = min(a[5], b[5]) - max(a[3], b[3])
                assert overlap_x <= 1 or overlap_y <= 1, (name, i, a, b)


def _labels_are_whole(page, name: str) -> None:
    """No label shown on the page is cut short with an ellipsis (a tile's title)."""
    cut = page.evaluate(
        """() => [...document.querySelectorAll("[data-testid='stMetricLabel'] *")]
        .filter((e) => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden')
        .filter((e) => e.scrollWidth > e.clientWidth + 1).map((e) => e.textContent)"""
    )
    assert not cut, (name, cut)


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_readme_screenshot_is_made_by_the_script_from_the_demo(server, tmp_path):
    """`./dev screenshots` makes the README's image: the demo's landing page (no filter,
    so the stage that needs attention), at 1400x1000."""
    from . import screenshots

    readme = (ROOT / "README.md").read_text()
    assert "](docs/screenshots/overview.png)" in readme and "./dev screenshots" in readme
    assert "screenshots)" in (ROOT / "dev").read_text()
    assert screenshots.PAGES["overview"] == "/"
    (made,) = screenshots.capture(server, tmp_path, {"overview": screenshots.PAGES["overview"]})
    assert made == tmp_path / "overview.png"
    assert _png_size(made) == (1400, 1000)
    assert made.stat().st_size > 30_000


def test_downloads_are_made_when_clicked(server):
    """The overview's report and the Findings page's CSV are made on the click (not on
    every run of the page): the click gives the file."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT, accept_downloads=True)
        page.goto(f"{server}/?stage=write-10pct")
        button = page.get_by_role("button", name="Download Markdown")
        button.wait_for(timeout=90_000)
        with page.expect_download(timeout=90_000) as got:
            button.click()
        assert got.value.suggested_filename == "replaygate-write-10pct.md"
        text = Path(got.value.path()).read_text(encoding="utf-8")
        assert text.startswith("# Rollout audit: write-10pct — ROLLBACK"), text[:200]
        page.goto(f"{server}/findings?stage=write-10pct")
        button = page.get_by_role("button", name="Download CSV")
        button.wait_for(timeout=90_000)
        with page.expect_download(timeout=90_000) as got:
            button.click()
        with open(got.value.path(), encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and {r["stage"] for r in rows} == {"write-10pct"}, rows[:2]
        browser.close()


def test_a_reason_leads_to_its_evidence(server, sample_db):
    """On the rolled-back stage, click a failing reason: the Findings page opens on that
    gate's detectors in that stage, and lists exactly the findings behind the reason."""
    import json

    from playwright.sync_api import sync_playwright

    from replaygate.api import title

    stage = "write-10pct"
    conf = str(SAMPLE / "replaygate.toml")
    out = subprocess.run(
        [sys.executable, "-m", "replaygate", "gates", "--db", str(sample_db), "--config", conf]
        + ["--stage", stage, "--json"],
        capture_output=True,
        text=True,
    ).stdout
    gate = next(g for g in json.loads(out)["stages"][0]["gates"] if g["status"] == "fail")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
        page = browser.new_page(viewport={"width": 1440, "height": 1000})
        page.goto(f"{server}/?stage={stage}")
        # The reason's link names the gate by its title, as the tiles do.
        reason = page.locator("[data-testid='stPageLink'] a", has_text=title(gate["id"]) + ":")
        link = reason.first
        link.wait_for(timeout=60_000)
        link.click()
        page.wait_for_url("**/findings?**", timeout=60_000)
        page.wait_for_selector("[data-testid='stMainBlockContainer'] h1:has-text('Findings')")
        want = f"{gate['evidence']['count']:,} findings · {stage}"
        page.wait_for_selector(f"text={want}", timeout=60_000)
        assert f"stage={stage}" in page.url
        assert "det=" + "%2C".join(gate["evidence"]["detectors"]) in page.url.replace(",", "%2C")
        browser.close()


def test_the_page_refreshes_itself_when_the_data_changes(sample_db, tmp_path):
    """A new data version reruns the open page (here: the findings become out of date and
    it says so) while the filters in the URL stay."""
    import duckdb
    from playwright.sync_api import sync_playwright

    db = tmp_path / "live.duckdb"
    shutil.copy(sample_db, db)
    proc, url = _start(db, REPLAYGATE_REFRESH_SECONDS="1")
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.goto(f"{url}/streams?stage=write-10pct&range=stage")
            page.wait_for_selector("[data-testid='stMainBlockContainer'] h1", timeout=60_000)
            page.wait_for_timeout(2000)
            assert "older than the data" not in page.inner_text("body")
            for _ in range(50):  # the dashboard's reads hold the file for moments
                try:
                    con = duckdb.connect(str(db))
                    break
                except duckdb.IOException:
                    time.sleep(0.2)
            version = int(
                con.execute("SELECT value FROM meta WHERE key = 'data_version'").fetchone()[0]
            )
            con.execute(
                "UPDATE meta SET value = $v WHERE key = 'data_version'", {"v": str(version + 1)}
            )
            con.close()
            page.wait_for_selector("text=older than the data", timeout=60_000)
            assert "stage=write-10pct" in page.url and "range=stage" in page.url
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
