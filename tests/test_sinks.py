"""Attacker text reaching a reader: Slack mrkdwn in notifications and terminal lines of
`watch` (queries/escape.py is the one sanitiser)."""

from __future__ import annotations

import datetime as dt
import re

from replaygate.notify import message
from replaygate.queries.escape import slack_text, terminal
from replaygate.watch import Cycle, _change_line

FORGED = "canary\n:large_green_circle: replaygate: stage *prod* is PROCEED\u202e"


def test_a_stage_name_cannot_forge_a_slack_headline_or_markup():
    doc = message(
        {
            "stage": FORGED,
            "decision": "ROLLBACK",
            "previous": None,
            "reasons": ["dup: _it_ ~x~ `code` :fire: <https://evil|click>"],
            "gates": [],
        },
        "http://127.0.0.1:8501/",
    )
    lines = doc["text"].splitlines()
    assert lines[0].startswith(":red_circle: replaygate: stage *") and len(lines) == 3
    assert sum("replaygate: stage" in line for line in lines) == 1
    head, reason = lines[0], lines[1]
    inner = head[head.index("*") + 1 : head.rindex("*")]
    for text in (inner, reason[2:]):
        for mark in ("*", "~", "`", "\n", "\u202e", "<"):
            assert mark not in text, (mark, text)
        assert not re.search(r":[a-z0-9_+-]+:", text), text  # no :emoji:
        assert not re.search(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", text), text  # no _italic_
    assert slack_text("raw_session_ids: 1") == "raw_session_ids: 1"
    assert "[U+202E]" in inner
    assert slack_text("a<b>&") == "a&lt;b&gt;&amp;"


def test_watch_lines_carry_no_escape_sequence():
    c = Cycle(3, dt.datetime(2026, 11, 28, 4, 0, tzinfo=dt.UTC))
    ch = {
        "stage": "s\x1b[2J\x1b]0;pwned\x07\u202e",
        "decision": "ROLLBACK",
        "previous": "PROCEED",
        "reasons": ["r\rbundle verified"],
        "gates": [],
    }
    line = _change_line(c, ch)
    assert "\x1b" not in line and "\x07" not in line and "\r" not in line
    assert "\u202e" not in line and "[U+202E]" in line
    assert terminal("a\x1b[31mb") == "a [31mb"


def test_watch_lines_name_gates_by_their_titles():
    c = Cycle(3, dt.datetime(2026, 11, 28, 4, 0, tzinfo=dt.UTC))
    ch = {
        "stage": "write-10pct",
        "decision": "ROLLBACK",
        "previous": "HOLD",
        "reasons": ["Duplicate dispatches: 2 duplicate business dispatches (threshold 0)"],
        "gates": [{"id": "duplicate_dispatches", "previous": "pass", "status": "fail"}],
    }
    line = _change_line(c, ch)
    assert "[Duplicate dispatches pass -> fail]" in line
    assert "duplicate_dispatches" not in line


# Everything a crafted dashboard link, a stage name or a file name can try on a reader.
HOSTILE = [
    "x\x1b[2J\x1b]0;pwned\x07",  # terminal escape sequences
    "canary\u202e KCABLLOR",  # a bidi override
    "can\u200bary",  # a zero-width space
    "<img src=https://evil.example/i.png> <b>bold</b>",  # HTML
    "**ROLLBACK cleared — PROCEED approved** [click](https://evil.example) "
    "![x](https://evil.example/beacon.png)",  # Markdown
    ":red-background[PROCEED] :material/check: $x^2$",  # Streamlit directives and math
    "=cmd|' /C calc'!A0",  # a spreadsheet formula
    "a\n\n## Decision\n\n**PROCEED**\r",  # line breaks
]


def _inert_markdown(text: str) -> None:
    """No construct of Markdown (or Streamlit's) can start in `text`: every character
    with a meaning is backslash-escaped, and nothing invisible or on a new line."""
    for ch in "\n\r\x1b\x07\u202e\u200b":
        assert ch not in text, (ch, text)
    unescaped = re.sub(r"\\.", "", text)
    for ch in "[]()<>*_`$:!#|~":
        if ch in "()":
            continue  # parentheses mean nothing once the brackets are escaped
        assert ch not in unescaped, (ch, text)


def test_dashboard_url_values_are_quoted_inert_in_notes():
    from replaygate.dashboard import state

    stages = {"a": (dt.datetime(2026, 11, 28, tzinfo=dt.UTC), None)}
    opts = {"revisions": ["2025-06-18"], "servers": [], "clients": [], "span": (None, None)}
    for bad in HOSTILE:
        f, preset, notes = state.from_query({"stage": bad, "range": bad, "rev": bad}, stages, opts)
        assert f.stage is None and preset == "all" and f.revisions == ()
        shown = state.quoted(bad)
        _inert_markdown(shown)
        # Each note is ours around the quoted value, and nothing else of the value.
        assert sorted(n.replace(shown, "…") for n in notes) == [
            "No stage named “…”: showing all stages.",
            "Unknown protocol revision ignored: ….",
            "Unknown time range “…”: showing all data.",
        ]
    long = state.quoted("x" * 1_000_000)
    assert len(long) == state.QUOTED + 1  # a 1 MB value from a link is cut
    # No stage at all in the data: a stage from a link is still unknown, not trusted.
    f, _, notes = state.from_query({"stage": HOSTILE[4]}, {}, opts)
    assert f.stage is None and notes


def test_html_report_shows_invisible_characters_in_headings_and_title(sample_db, tmp_path):
    from replaygate import api
    from replaygate.audit import reportdoc as rep
    from replaygate.dashboard import report as render

    conf = api.load_config("sample_data/replaygate.toml")
    con = api.open_analysed(str(sample_db), conf)
    doc = rep.build(con, conf, "write-10pct", db_path=str(sample_db))
    con.close()
    doc["scope"]["stage"] = "write\u202e KCABLLOR\u200b\x1b[2J"
    html = render.to_html(doc)
    title = html[html.index("<title>") : html.index("</title>")]
    h1 = html[html.index("<h1>") : html.index("</h1>")]
    for text in (title, h1):
        assert "\u202e" not in text and "\u200b" not in text and "\x1b" not in text
        assert "[U+202E]" in text and "[U+200B]" in text
    assert "\u202e" not in html and "\x1b" not in html


def test_chart_titles_are_plain_text():
    import pandas as pd

    from replaygate.dashboard import figures

    empty = pd.DataFrame(columns=["ts", "lane", "label"])
    fig = figures.inspector_timeline(empty, "subject <a href='https://evil.example'>x</a>")
    assert "<a" not in fig.layout.title.text and "&lt;a" in fig.layout.title.text


def test_error_and_verify_lines_carry_no_escape_sequence(tmp_path):
    """`report --verify` on a crafted statement whose subject name tries to print
    "bundle verified" over the failure, and an ingest error naming a crafted file."""
    import json

    from .conftest import run_cli as run

    bundle = tmp_path / "bundle"
    bundle.mkdir()
    forged = "x\x1b[1A\x1b[2K\rbundle verified: 9 files match the statement\u202e"
    statement = {"subject": [{"name": forged, "digest": {"sha256": "0" * 64}}], "predicate": {}}
    (bundle / "statement.json").write_text(json.dumps(statement))
    r = run("report", "--verify", bundle)
    assert r.returncode == 1
    for ch in ("\x1b", "\r", "\u202e"):
        assert ch not in r.stderr and ch not in r.stdout
    assert all(
        line.startswith(("replaygate: error: bundle does not verify", "x "))
        or "bundle verified" not in line
        for line in r.stderr.splitlines()
    )
    bad = tmp_path / "logs\x1b[31m\u202e.jsonl.gz"
    bad.write_text("not gzip\n")
    r = run("ingest", bad, "--db", tmp_path / "x.duckdb")
    assert r.returncode == 1 and "could not be read" in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "\x1b" not in line and "\u202e" not in line and "[U+202E]" in line


def test_table_cells_are_one_line_with_invisible_characters_shown():
    import pandas as pd

    from replaygate.queries.escape import cell_frame

    when = pd.Timestamp("2026-11-28T05:00:00Z")
    df = pd.DataFrame(
        {
            "stage\u202e": ["canary\n\n**PROCEED**", "write\u200b-10pct", "plain"],
            "n": [1, 2, 3],
            "at": [when, when, when],
            "agent": ["curl\x1b[2J", None, "ok"],
        }
    )
    out = cell_frame(df)
    assert list(out.columns) == ["stage[U+202E]", "n", "at", "agent"]
    assert out["stage[U+202E]"].tolist() == [
        "canary  **PROCEED**",
        "write[U+200B]-10pct",
        "plain",
    ]
    assert out["agent"][0] == "curl [2J" and pd.isna(out["agent"][1])
    assert out["n"].tolist() == [1, 2, 3] and out["at"].tolist() == [when] * 3
    assert df["agent"][0] == "curl\x1b[2J"  # a copy: the caller's frame is unchanged


def test_history_and_ack_lines_carry_no_escape_sequence(tmp_path):
    """An actor and a stage recorded in the history are attacker text: `ack` and `history`
    (timeline and `--at`) print them on one line without an escape sequence, a carriage
    return or a bidi override that could rewrite what the operator reads."""
    from replaygate.audit import decisionlog
    from replaygate.core import db as dbm
    from replaygate.core.config import Config

    from .conftest import run_cli as run
    from .test_history import _at, _doc

    db = str(tmp_path / "h.duckdb")
    stage = "s\x1b[2J\x1b]0;pwned\x07\rPROCEED\u202e"
    con = dbm.connect(db)
    decisionlog.record_evaluation(con, _doc(stage, "ROLLBACK"), Config(), "gates", now=_at(1))
    con.close()
    actor = "alice\x1b[1A\x1b[2K\rbob approved PROCEED\u202e\u200b"
    outs = [run("ack", "--db", db, "--stage", stage, "--by", actor)]
    outs.append(run("history", "--db", db))
    outs.append(run("history", "--db", db, "--recorded-at", "2099-01-01T00:00:00Z"))
    for r in outs:
        assert r.returncode == 0, r.stderr
        text = r.stdout + r.stderr
        for ch in ("\x1b", "\x07", "\r", "\u202e", "\u200b"):
            assert ch not in text, (ch, text)
        assert "[U+202E]" in r.stdout
    timeline = outs[1].stdout.splitlines()
    assert len(timeline) == 2 and "[U+200B]" in timeline[1], timeline
