"""The outcome enums are the keys of every map that shows a status, decision or severity,
in the dashboard and the CLI: each such map is keyed by the enum's members, all of them,
so a spelling of a value cannot drift from the one JSON carries and a new member cannot
go unshown."""

from __future__ import annotations

import ast
from enum import StrEnum
from pathlib import Path

import pytest

from replaygate import notify, render
from replaygate.audit import attest
from replaygate.dashboard import figures, fmt, report, ui
from replaygate.queries.outcome import TONE, Decision, Severity, Status, Tone

MAPS = {
    "figures.STATUS_COLORS": (figures.STATUS_COLORS, Status),
    "figures.STATUS_CODE": (figures.STATUS_CODE, Status),
    "figures.DECISION_COLORS": (figures.DECISION_COLORS, Decision),
    "ui.DECISION_ELEMENT": (ui.DECISION_ELEMENT, Decision),
    "ui.DECISION_ICON": (ui.DECISION_ICON, Decision),
    "ui.DECISION_COLOR": (ui.DECISION_COLOR, Decision),
    "ui.STATUS_BADGE": (ui.STATUS_BADGE, Status),
    "ui.STATUS_ICON": (ui.STATUS_ICON, Status),
    "fmt.STATUS_WORDS": (fmt.STATUS_WORDS, Status),
    "report.STATUS_WORD": (report.STATUS_WORD, Status),
    "render.SEVERITY_STYLE": (render.SEVERITY_STYLE, Severity),
    "render.DECISION_STYLE": (render.DECISION_STYLE, Decision),
    "render.STATUS_STYLE": (render.STATUS_STYLE, Status),
    "notify.ICON": (notify.ICON, Decision),
    "attest.STATUS_WORD": (attest.STATUS_WORD, Status),
}


@pytest.mark.parametrize("name", sorted(MAPS))
def test_a_map_is_keyed_by_every_member_of_its_enum(name):
    mapping, enum = MAPS[name]
    assert all(type(k) is enum for k in mapping), f"{name}: keyed by strings"
    assert set(mapping) == set(enum), name


def test_a_value_read_from_json_finds_its_entry():
    # Documents carry the plain values; StrEnum keys are found by them.
    assert issubclass(Status, StrEnum)
    assert figures.STATUS_COLORS["fail"] == figures.STATUS_COLORS[Status.FAIL]
    assert render.DECISION_STYLE["HOLD"] == render.DECISION_STYLE[Decision.HOLD]


def test_every_outcome_has_one_tone_and_the_surfaces_follow_it():
    members = [m for e in (Decision, Severity, Status) for m in e]
    assert len(TONE) == len(members) and all(m.tone in Tone for m in members)
    # the worst of each is bad news, the mildest decision and a pass good news
    assert Status.FAIL.tone == Decision.ROLLBACK.tone == Severity.CRITICAL.tone == Tone.BAD
    assert Status.PASS.tone == Decision.PROCEED.tone == Tone.GOOD
    for m in members:
        colours = figures.STATUS_COLORS if m in Status else figures.DECISION_COLORS
        if m not in Severity:
            assert colours[m] == figures.TONE_COLORS[m.tone]
        styles = {Status: render.STATUS_STYLE, Decision: render.DECISION_STYLE}
        style = styles.get(type(m), render.SEVERITY_STYLE)[m]
        assert style.removeprefix("bold ") == render.TONE_STYLE[m.tone]


def test_severities_rank_worst_first():
    assert [s.rank for s in Severity] == list(range(len(Severity)))
    assert Severity("critical").rank < Severity("low").rank


WORDS = {m.value for e in (Decision, Severity, Status) for m in e}


def restated_words(source: str) -> list[tuple[int, str]]:
    """Decision, status and severity words written as bare strings where a value is
    compared, looked up or listed: a comparison's operand, a dict literal's key, an
    element of a tuple, list or set literal."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Dict):
            operands = [k for k in node.keys if k is not None]
        else:
            continue
        for op in operands:
            parts = op.elts if isinstance(op, (ast.Tuple, ast.List, ast.Set)) else [op]
            found += [
                (p.lineno, p.value)
                for p in parts
                if isinstance(p, ast.Constant) and p.value in WORDS
            ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and not isinstance(
            getattr(node, "ctx", None), ast.Store
        ):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(words) > 1 and sum(w in WORDS for w in words) > 1:
                found += [(node.lineno, w) for w in words if w in WORDS]
    return sorted(set(found))


def test_no_module_restates_an_outcome_word():
    """Comparisons, maps and lists of decisions, statuses and severities use the enums:
    a renamed or added member is then one edit in queries/outcome.py."""
    root = Path(__file__).resolve().parent.parent
    wrong = [
        f"{p.relative_to(root)}:{line}: {word!r}"
        for folder in ("queries", "dashboard", "replaygate")
        for p in sorted((root / folder).rglob("*.py"))
        if p.name != "outcome.py"
        for line, word in restated_words(p.read_text())
    ]
    assert wrong == []


def test_restated_words_are_found():
    assert restated_words('x == "HOLD"\nD = {"pass": 1}\nT = ("PROCEED", "ROLLBACK")') == [
        (1, "HOLD"),
        (2, "pass"),
        (3, "PROCEED"),
        (3, "ROLLBACK"),
    ]
    assert restated_words('m.get("insufficient")\nx == Status.FAIL\nsay("HOLD")') == []
