"""The outcome enums are the keys of every map that shows a status, decision or severity,
in the dashboard and the CLI: each such map is keyed by the enum's members, all of them,
so a spelling of a value cannot drift from the one JSON carries and a new member cannot
go unshown."""

from __future__ import annotations

from enum import StrEnum

import pytest

from replaygate import notify, render
from replaygate.dashboard import figures, fmt, report, ui
from replaygate.queries.outcome import Decision, Severity, Status

MAPS = {
    "figures.STATUS_COLORS": (figures.STATUS_COLORS, Status),
    "figures.STATUS_CODE": (figures.STATUS_CODE, Status),
    "figures.DECISION_COLORS": (figures.DECISION_COLORS, Decision),
    "ui.DECISION_ELEMENT": (ui.DECISION_ELEMENT, Decision),
    "ui.DECISION_ICON": (ui.DECISION_ICON, Decision),
    "ui.DECISION_COLOR": (ui.DECISION_COLOR, Decision),
    "ui.STATUS_BADGE": (ui.STATUS_BADGE, Status),
    "fmt.STATUS_WORDS": (fmt.STATUS_WORDS, Status),
    "report.STATUS_WORD": (report.STATUS_WORD, Status),
    "render.SEVERITY_STYLE": (render.SEVERITY_STYLE, Severity),
    "render.DECISION_STYLE": (render.DECISION_STYLE, Decision),
    "render.STATUS_STYLE": (render.STATUS_STYLE, Status),
    "notify.ICON": (notify.ICON, Decision),
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


def test_severities_rank_worst_first():
    assert [s.rank for s in Severity] == list(range(len(Severity)))
    assert Severity("critical").rank < Severity("low").rank
