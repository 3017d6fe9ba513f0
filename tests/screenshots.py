"""The README's screenshots, made again from the demo: `./dev screenshots`.

Starts the dashboard on the demo's database (the one `./dev demo` makes) on a free port,
opens each page as the demo opens it (the overview at `/`, no filter) in a headless
chromium at 1400x1000, and writes `docs/screenshots/<page>.png`. Needs Debian's chromium
and playwright (the `test` extra); nothing here runs in the product.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from replaygate.dashboard.report import CHROMIUM_FLAGS

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

VIEWPORT: ViewportSize = {"width": 1400, "height": 1000}
# Each page as it opens from the navigation; the overview is the demo's landing page.
PAGES = {
    "overview": "/",
    "rollout": "/rollout",
    "streams": "/streams",
    "dispatch": "/dispatch",
    "sessions": "/sessions",
    "findings": "/findings",
    "inspector": "/inspector",
    "data": "/data",
    "guide": "/guide",
}
# The flags of a headless chromium on a machine with no network (reports use the same).
FLAGS = [f for f in CHROMIUM_FLAGS if f not in ("--headless", "--no-pdf-header-footer")]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise SystemExit("screenshots need Debian's chromium (apt-get install chromium)")
    return found


def wait_idle(page) -> None:
    """Until the page's title is drawn and the app has finished its run."""
    page.wait_for_selector("[data-testid='stMainBlockContainer'] h1", timeout=90_000)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=90_000
    )
    # Plotly draws after the run has ended.
    page.wait_for_timeout(1500)


def capture(base_url: str, out: Path, pages: dict[str, str] | None = None) -> list[Path]:
    """Screenshot each page (name -> path under `base_url`) into `out`; the files written."""
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=FLAGS, headless=True)
        page = browser.new_page(viewport=VIEWPORT)
        for name, path in (pages or PAGES).items():
            page.goto(base_url + path)
            wait_idle(page)
            target = out / f"{name}.png"
            # The first screen, as a reader of the page sees it before scrolling.
            page.screenshot(path=str(target), timeout=180_000)
            written.append(target)
        browser.close()
    return written


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(db: Path, config: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`replaygate dashboard` on the database, on a free port: the process and its URL."""
    port = _free_port()
    env = dict(os.environ)
    env.setdefault("REPLAYGATE_HMAC_KEY", "replaygate-demo-key")
    proc = subprocess.Popen(
        [sys.executable, "-m", "replaygate", "dashboard", "--db", str(db)]
        + ["--config", str(config), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("the dashboard did not start")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=Path(".replaygate/sample.duckdb"))
    ap.add_argument("--config", type=Path, default=Path("sample_data/replaygate.toml"))
    ap.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    args = ap.parse_args(argv)
    if not args.db.exists():
        raise SystemExit(f"{args.db} does not exist: `./dev screenshots` makes it")
    proc, url = serve(args.db, args.config)
    try:
        for path in capture(url, args.out):
            print(path)
    finally:
        proc.terminate()
        proc.wait(timeout=20)


if __name__ == "__main__":
    main()
