"""docs/field-guide.md: generated from the detectors' headers, complete, in step."""

from __future__ import annotations

from pathlib import Path

import pytest

from replaygate.queries import catalog, fieldguide

DOC = Path(__file__).resolve().parent.parent / "docs" / "field-guide.md"

# The public reports each detector's entry must name.
REPORTS = {
    "cursor_on_post": ["simonx1/ruby-mcp-client PR 168"],
    "retry_not_honored": ["simonx1/ruby-mcp-client PR 168"],
    "resume_without_cursor": ["modelcontextprotocol/inspector issue 723"],
    "dropped_terminal": ["cloudflare/agents PR 1607"],
    "silent_truncation": ["cloudflare/agents PR 1607"],
    "replay_buffer_exhausted": ["Cocoanetics/SwiftMCP PR 109", "OloEngine"],
    "replay_gap": ["Cocoanetics/SwiftMCP PR 109", "OloEngine"],
    "cursor_rejected": ["Cocoanetics/SwiftMCP PR 109", "OloEngine"],
    "duplicate_dispatch": [
        "smg-project/smg PR 2441",
        "odysseus-dev/odysseus PR 6150",
        "QwenLM/qwen-code issue 5381",
        "intent-hq/intent issue 1530",
    ],
    "missing_idempotency_key": [
        "KeeperHub/keeperhub issue 2207",
        "hostinger/api-mcp-server issue 68",
    ],
}


def test_field_guide_is_current():
    assert DOC.read_text(encoding="utf-8") == fieldguide.render(), (
        "run: python -m replaygate.queries.fieldguide"
    )


@pytest.mark.parametrize("name", sorted(catalog.detectors()))
def test_every_detector_has_an_entry(name):
    e = fieldguide.entry(name)
    for key in ("failure", "dashboard", "fix"):
        assert len(e[key]) > 30, f"{name}: no -- {key}: in its header"
    assert f"\n## `{name}`\n" in fieldguide.render()


def test_public_reports_are_named():
    for name, refs in REPORTS.items():
        reports = fieldguide.entry(name)["reports"]
        for ref in refs:
            assert ref in reports, (name, ref)


def test_header_values_continue_on_indented_comment_lines(tmp_path):
    p = tmp_path / "x.sql"
    p.write_text(
        "-- name: x\n-- invariant: i\n-- severity: low\n-- needs: proxy\n-- fix: one\n--   two\n"
        "-- unit: stream\n-- A comment, not the header.\n--   nor this\nSELECT 1\n"
    )
    q = catalog.parse(p, "detectors")
    assert q.header == {
        "name": "x",
        "invariant": "i",
        "severity": "low",
        "needs": "proxy",
        "fix": "one two",
        "unit": "stream",
    }


# -- linked from every finding: dashboard and report -----------------------------------------
from .test_dashboard import app  # noqa: E402, F401  (the dashboard fixture)


def test_dashboard_findings_link_to_the_guide_page(app):  # noqa: F811
    app.switch_page("views/findings.py").run()
    table = next(d.value for d in app.dataframe if "guide" in d.value.columns)
    assert len(table) and (table["guide"] == "guide?detector=" + table["detector"]).all()
    app.switch_page("views/guide.py")
    app.query_params["detector"] = "replay_buffer_exhausted"
    app.run()
    assert not app.exception
    shown = " ".join(m.value for m in app.markdown)
    assert "`replay_buffer_exhausted`" in shown and "Cocoanetics/SwiftMCP PR 109" in shown
    assert "`replay_gap`" not in shown.split("\n")[0]
    assert app.selectbox(key="guide_detector").value == "replay_buffer_exhausted"


def test_report_links_each_detector_to_its_guide_entry(sample_db, tmp_path):
    from .conftest import SAMPLE_CONF, run_cli

    md, html = tmp_path / "r.md", tmp_path / "r.html"
    for out, fmt in ((md, "md"), (html, "html")):
        r = run_cli(
            "report",
            "--db",
            str(sample_db),
            "--config",
            SAMPLE_CONF,
            "--stage",
            "write-10pct",
            "--format",
            fmt,
            "-o",
            str(out),
        )
        assert r.returncode == 0, r.stderr
    text, page = md.read_text(), html.read_text()
    detectors = [line.split("`")[1] for line in text.splitlines() if line.startswith("### `")]
    assert detectors
    for d in detectors:
        assert f"[field guide](#field-guide-{d})" in text
        assert f"### Field guide: `{d}`" in text
        assert f'id="field-guide-{d}"' in page and f'href="#field-guide-{d}"' in page
