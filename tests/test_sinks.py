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
