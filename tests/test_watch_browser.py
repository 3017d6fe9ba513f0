"""The dashboard in a real browser while `replaygate watch` ingests growing logs: through
ten cycles (the data changing in most of them) no page shows an error or a busy notice."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .procs import free_port, wait_port, watch_cycle
from .test_browser import CHROMIUM, FLAGS

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]
SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"
CONF = str(SAMPLE / "replaygate.toml")
STEPS = (0.3, 0.45, 0.6, 0.75, 0.9, 1.0)
HEADING = "[data-testid='stMainBlockContainer'] h1"


def _contents() -> dict[str, bytes]:
    out = {}
    for f in SAMPLE.iterdir():
        if f.name.endswith(".gz"):
            out[f.name[:-3]] = gzip.decompress(f.read_bytes())
        elif f.suffix in (".jsonl", ".csv"):
            out[f.name] = f.read_bytes()
    return out


def _grow(logs: Path, data: dict[str, bytes], frac: float) -> None:
    for name, content in data.items():
        n = int(len(content) * frac)
        with open(logs / name, "ab") as fh:
            fh.write(content[fh.tell() : n])


def test_dashboard_through_ten_watch_cycles(tmp_path):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    env = dict(os.environ, REPLAYGATE_HMAC_KEY="replaygate-demo-key")
    logs = tmp_path / "logs"
    logs.mkdir()
    shutil.copy(SAMPLE / "inbox.parquet", logs / "inbox.parquet")
    data = _contents()
    _grow(logs, data, STEPS[0])
    db = tmp_path / "fleet.duckdb"
    cli = [sys.executable, "-m", "replaygate"]
    subprocess.run(
        [*cli, "ingest", str(logs), "--db", str(db), "--config", CONF],
        env=env,
        check=True,
        capture_output=True,
    )
    port = free_port()
    dash = subprocess.Popen(
        [*cli, "dashboard", "--db", str(db), "--config", CONF, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port, 90)
    watch = subprocess.Popen(
        [*cli, "watch", str(logs), "--db", str(db), "--config", CONF, "--every", "1s"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    done = threading.Event()

    def writer():
        # Paced by watch's cycles, not the clock: each growth waits for a cycle that began
        # after the previous one, so every growth is its own cycle's new rows however slow
        # a loaded machine makes a cycle.
        grown_at = watch_cycle(db)
        for frac in STEPS[1:]:
            while watch_cycle(db) < grown_at + 2:
                if done.wait(0.2):
                    return
            grown_at = watch_cycle(db)
            _grow(logs, data, frac)

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    url = f"http://127.0.0.1:{port}"
    seen_cycles: set[int] = set()
    loads = 0
    slow = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            deadline = time.monotonic() + 600
            pages = ["", "findings", "data", "rollout"]
            while (watch_cycle(db) < 10 or loads < 8) and time.monotonic() < deadline:
                target = f"{url}/{pages[loads % len(pages)]}"
                try:
                    page.goto(target, timeout=60_000)
                    page.wait_for_selector(HEADING, timeout=60_000)
                except PlaywrightTimeout:
                    # Beside the other pytest process and a watch cycle every second, a page's
                    # first render once took over 60 s on a 2-core CI machine with nothing
                    # wrong; one slow page is tolerated, a second one fails the test.
                    slow += 1
                    assert slow <= 1, f"{target} did not render twice"
                    page.goto(target, timeout=60_000)
                    page.wait_for_selector(HEADING, timeout=60_000)
                page.wait_for_function(
                    "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')",
                    timeout=60_000,
                )
                page.wait_for_timeout(300)
                errors = page.query_selector_all(
                    "[data-testid='stException'], [data-testid='stAlertContentError']"
                )
                body = page.inner_text("body")
                assert not errors, [e.inner_text()[:300] for e in errors]
                assert "An ingest is writing the database" not in body
                loads += 1
                seen_cycles.add(watch_cycle(db))
            browser.close()
    finally:
        done.set()
        watch.terminate()
        out, err = watch.communicate(timeout=120)
        dash.terminate()
        dash.wait(timeout=30)
    assert watch.returncode == 0, err
    cycles = [ln for ln in out.splitlines() if " | " in ln]
    assert len(cycles) >= 10, out
    assert sum("no new rows" not in ln for ln in cycles) >= 3, out
    assert not [ln for ln in cycles if "failed:" in ln], out
    assert len(seen_cycles) >= 4 and loads >= 8, (seen_cycles, loads)
