"""The dashboard's URL filters and formatting, as plain functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from replaygate.dashboard import fmt, state
from replaygate.dashboard.model import detectors_for
from replaygate.queries import named
from replaygate.queries.filters import Filters

T0 = datetime(2026, 11, 28, tzinfo=UTC)
STAGES = {"a": (T0, T0 + timedelta(hours=2)), "b": (T0 + timedelta(hours=2), None)}
OPTIONS = {
    "revisions": ["2025-06-18"],
    "servers": ["s1"],
    "clients": ["c1"],
    "span": (T0, T0 + timedelta(hours=6)),
}


def test_url_round_trip():
    f = Filters(
        stage="a", revisions=("2025-06-18",), clients=("c1",), start=T0 + timedelta(hours=1)
    )
    back, preset, notes = state.from_query(state.to_query(f), STAGES, OPTIONS)
    assert back == f and preset == "custom" and not notes


def test_bad_url_values_are_corrected_and_said():
    f, _, notes = state.from_query(
        {"stage": "nope", "rev": "x,2025-06-18", "from": "9999-12-31T23:59:59Z"}, STAGES, OPTIONS
    )
    assert f.stage is None and f.revisions == ("2025-06-18",)
    assert f.start == OPTIONS["span"][1]  # moved to the edge of the data
    assert len(notes) == 3
    f, _, notes = state.from_query(
        {"from": "2026-11-28T05:00:00Z", "to": "2026-11-28T01:00:00Z"}, STAGES, OPTIONS
    )
    assert f.start < f.end and any("inverted" in n for n in notes)
    f, _, notes = state.from_query({"from": "yesterday"}, STAGES, OPTIONS)
    assert f.start is None and notes


def test_time_presets():
    f, preset, _ = state.from_query({"range": "1h"}, STAGES, OPTIONS)
    assert preset == "1h" and f.start == T0 + timedelta(hours=5) and f.end is None
    f, preset, _ = state.from_query({"range": "stage", "stage": "a"}, STAGES, OPTIONS)
    assert (f.start, f.end) == STAGES["a"]
    _, preset, notes = state.from_query({"range": "stage"}, STAGES, OPTIONS)
    assert preset == "all" and notes
    assert state.to_query(Filters(stage="a"), "15m") == {"stage": "a", "range": "15m"}


def test_human_formatting():
    assert fmt.count(25495) == "25,495"
    assert fmt.count(None) == "" and fmt.blank(None) == "" and fmt.blank(float("nan")) == ""
    assert fmt.nbytes(2048) == "2.0 KiB" and fmt.nbytes(10) == "10 B"
    assert fmt.duration(0.25) == "250 ms" and fmt.duration(250) == "4 min 10 s"
    assert fmt.percent_bound(0.0038) == "below 0.38 %"
    assert fmt.detail('{"missing_seqs": [3, 4], "basis": "proven"}') == (
        "missing seqs: 3, 4; basis: proven"
    )
    assert fmt.stage_label(None, True) == fmt.BASELINE
    assert fmt.stage_label(None, False) == fmt.OUTSIDE
    assert fmt.sample({"sample": 52, "min_sample": 1}) == "sample 52 (enough: 1 needed)"
    # The title of the gate's SQL header: no second vocabulary in the dashboard.
    assert fmt.gate_title("reinit_after_404") == "Re-initialize after 404"


def test_data_is_inert_markdown():
    import markdown_it

    hostile = "[click](javascript:alert(1)) <b>x</b> **y** :red[z] $x$"
    out = fmt.md_text(hostile)
    rendered = markdown_it.MarkdownIt("commonmark").render(out)
    assert rendered == f"<p>{hostile.replace('<', '&lt;').replace('>', '&gt;')}</p>\n"
    for ch in "[]<>*:$":  # also Streamlit's :directive[...] and $math$
        assert f"\\{ch}" in out


def test_pages_take_their_detectors_from_the_sql_headers():
    pages = {p: detectors_for(p) for p in ("streams", "dispatch", "sessions", "rollout")}
    assert "replay_gap" in pages["streams"] and "duplicate_dispatch" in pages["dispatch"]
    every = [d for ds in pages.values() for d in ds]
    assert len(every) == len(set(every))


def test_named_queries_declare_their_params_and_filters():
    for q in named.load().values():
        assert set(q.params) == q.used_params(), q.name
        assert "filters" in q.header or q.name == "setup", q.name
        assert set(q.filters) <= {"stage", "revision", "server", "client", "time"}, q.name
    f = Filters(stage="a", clients=("c",))
    assert named.get("files").ignored(f) == ("stage", "client")
    assert named.get("findings").ignored(f) == ()
