"""Figure builders as plain functions: right traces, thresholds drawn, empty inputs."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from replaygate.dashboard import figures, state

T = datetime(2026, 11, 28, tzinfo=UTC)
ACTIONS = pd.DataFrame({"ts": [T], "stage": ["s1"], "action": ["start"]})


def test_recovery_histogram_draws_threshold_and_p99():
    df = pd.DataFrame({"secs": [0.5, 1.0, 1.5, 9.0]})
    fig = figures.recovery_histogram(df, 5.0)
    lines = [s for s in fig.layout.shapes if s.type == "line"]
    assert {round(s.x0, 2) for s in lines} >= {5.0}
    assert len(lines) == 2


def test_reconnect_qps_marks_storms():
    df = pd.DataFrame({"win": [T, T + timedelta(seconds=10)], "qps": [1.0, 7.5]})
    fig = figures.reconnect_qps(df, 5.0, ACTIONS)
    names = [t.name for t in fig.data]
    assert "storm (over budget)" in names
    storm = next(t for t in fig.data if t.name == "storm (over budget)")
    assert list(storm.y) == [7.5]


def test_gate_matrix_has_a_row_per_stage():
    gates = [{"id": "a", "status": "pass", "sample": 5}, {"id": "b", "status": "fail", "sample": 5}]
    stages = [
        {"stage": "s1", "decision": "ROLLBACK", "gates": gates},
        {"stage": "s2", "decision": "PROCEED", "gates": gates},
    ]
    fig = figures.gate_matrix(stages)
    assert list(fig.data[0].y) == ["s1 → ROLLBACK", "s2 → PROCEED"]
    assert fig.data[0].z[0] == (1, 3) or list(fig.data[0].z[0]) == [1, 3]


def test_empty_inputs_give_an_explaining_figure():
    fig = figures.findings_over_time(pd.DataFrame(), ACTIONS, "x")
    assert fig.layout.annotations[0].text.startswith("no findings")
    assert figures.inspector_timeline(pd.DataFrame(), "t").layout.annotations


def test_inspector_lanes_and_rollout_annotations():
    df = pd.DataFrame(
        {
            "ts": [T, T],
            "lane": ["server events", "client receipts"],
            "label": ["result #3", "result #3"],
            "kind": ["dropped", "accepted"],
            "info": ["", ""],
        }
    )
    fig = figures.inspector_timeline(df, "t")
    assert {t.name for t in fig.data} == {
        figures.MEANING_LABELS["lost"],
        figures.MEANING_LABELS["ok"],
    }
    ann = figures.annotate_rollout(figures.series_by(pd.DataFrame(), "k", "t"), ACTIONS)
    assert any("start s1" in a.text for a in ann.layout.annotations)


def test_filters_round_trip_through_the_url():
    f = state.Filters(
        stage="s1",
        revisions=("2025-06-18", "2026-07-28"),
        servers=("a",),
        start=T,
        end=T + timedelta(hours=1),
    )
    assert state.from_query(state.to_query(f))[0] == f
    assert state.from_query({"from": "garbage"})[0].start is None


def test_filters_are_one_bound_parameter():
    f = state.Filters(stage="x'; DROP TABLE findings; --")
    assert f.param()["stage"].startswith("x'")


def test_short_never_fails():
    assert state.short(None) == "" and state.short(float("nan")) == ""
    assert state.short("a" * 64) == "a" * 12 + "…"


def test_detector_colours_do_not_change_with_the_filter():
    from replaygate.dashboard import figures

    a = pd.DataFrame(
        {"bucket": [1, 1], "detector": ["replay_gap", "silent_truncation"], "n": [1, 2]}
    )
    b = a[a["detector"] == "silent_truncation"]
    empty = pd.DataFrame(columns=["ts", "action", "stage"])
    fa = figures.findings_over_time(a, empty, "t")
    fb = figures.findings_over_time(b, empty, "t")
    color = {t.name: t.marker.color for t in fa.data}
    assert {t.name: t.marker.color for t in fb.data}["silent_truncation"] == color[
        "silent_truncation"
    ]
    assert color["replay_gap"] != color["silent_truncation"]
    assert fa.layout.yaxis.title.text and fa.layout.xaxis.title.text
    assert "per 15 min" in fa.layout.title.text


def _lab(color: str) -> tuple[float, float, float]:
    """CIELAB (D65) of a #RRGGBB colour."""
    rgb = [int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in rgb)
    xyz = (
        (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / 0.95047,
        0.2126729 * r + 0.7151522 * g + 0.0721750 * b,
        (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / 1.08883,
    )
    fx, fy, fz = (t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116 for t in xyz)
    return 116 * fy - 16, 500 * (fx - fy), 200 * (fy - fz)


def _delta_e(c1: str, c2: str) -> float:
    """CIEDE2000 difference of two #RRGGBB colours."""
    return _delta_e_lab(_lab(c1), _lab(c2))


def _delta_e_lab(lab1: tuple[float, ...], lab2: tuple[float, ...]) -> float:
    """CIEDE2000 difference of two CIELAB colours (Sharma, Wu and Dalal's formulation)."""
    (l1, a1, b1), (l2, a2, b2) = lab1, lab2
    cbar = (math.hypot(a1, b1) + math.hypot(a2, b2)) / 2
    g = 0.5 * (1 - math.sqrt(cbar**7 / (cbar**7 + 25**7)))
    a1, a2 = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = math.hypot(a1, b1), math.hypot(a2, b2)
    h1, h2 = (math.degrees(math.atan2(b, a)) % 360 for a, b in ((a1, b1), (a2, b2)))
    dh = 0.0 if c1p * c2p == 0 else (h2 - h1 + 180) % 360 - 180
    dhh = 2 * math.sqrt(c1p * c2p) * math.sin(math.radians(dh / 2))
    lbar, cbarp = (l1 + l2) / 2, (c1p + c2p) / 2
    if c1p * c2p == 0:
        hbar = h1 + h2
    elif abs(h1 - h2) <= 180:
        hbar = (h1 + h2) / 2
    else:
        hbar = (h1 + h2 + 360) / 2 if h1 + h2 < 360 else (h1 + h2 - 360) / 2
    t = (
        1
        - 0.17 * math.cos(math.radians(hbar - 30))
        + 0.24 * math.cos(math.radians(2 * hbar))
        + 0.32 * math.cos(math.radians(3 * hbar + 6))
        - 0.20 * math.cos(math.radians(4 * hbar - 63))
    )
    sl = 1 + 0.015 * (lbar - 50) ** 2 / math.sqrt(20 + (lbar - 50) ** 2)
    sc, sh = 1 + 0.045 * cbarp, 1 + 0.015 * cbarp * t
    rt = -math.sin(math.radians(60 * math.exp(-(((hbar - 275) / 25) ** 2)))) * (
        2 * math.sqrt(cbarp**7 / (cbarp**7 + 25**7))
    )
    dl, dc, dhs = (l2 - l1) / sl, (c2p - c1p) / sc, dhh / sh
    return math.sqrt(dl**2 + dc**2 + dhs**2 + rt * dc * dhs)


def test_delta_e_agrees_with_published_pairs():
    # Pairs 1, 7 and 25 of Sharma, Wu and Dalal's test data (2005) and their differences.
    for lab1, lab2, want in (
        ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
        ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
        ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
    ):
        assert abs(_delta_e_lab(lab1, lab2) - want) < 1e-3, (lab1, lab2)
    assert _delta_e("#FFFFFF", "#FFFFFF") == 0


def test_no_two_detectors_share_a_colour():
    """Every detector that exists can appear in one chart (the report's findings by
    detector, the Findings page unfiltered): each has its own colour, and any two are
    far enough apart to be told apart in a legend."""
    from replaygate.queries import catalog

    names = sorted(catalog.detectors())
    colors = {name: figures.detector_color(name) for name in names}
    assert len(set(colors.values())) == len(names), colors
    closest = min(
        (_delta_e(colors[a], colors[b]), a, b) for i, a in enumerate(names) for b in names[i + 1 :]
    )
    assert closest[0] >= 11, closest
    # Not the grey of "other", nor white or black, nor a rollout action's line colour.
    for name, color in colors.items():
        for other in ("#FFFFFF", "#000000", figures.MUTED, *figures.ACTION_COLORS.values()):
            assert _delta_e(color, other.upper()) >= 11, (name, color, other)


def test_the_colours_of_a_chart_of_every_detector_are_all_different():
    from replaygate.dashboard import svgchart
    from replaygate.queries import catalog

    names = sorted(catalog.detectors())
    df = pd.DataFrame({"bucket": [1] * len(names), "detector": names, "n": [1] * len(names)})
    fig = figures.findings_over_time(df, pd.DataFrame(columns=["ts", "action", "stage"]), "t")
    assert len({t.marker.color for t in fig.data}) == len(names)
    bars = svgchart.bars(dict.fromkeys(names, 1), "Findings by detector")
    assert len({r["fill"] for r in bars["rows"]}) == len(names)


def test_a_catalogue_larger_than_the_palette_is_an_error_not_a_reused_colour(monkeypatch):
    monkeypatch.setattr(figures, "DETECTOR_PALETTE", figures.DETECTOR_PALETTE[:2])
    from replaygate.queries import catalog

    last = sorted(catalog.detectors())[-1]
    with pytest.raises(LookupError, match="DETECTOR_PALETTE"):
        figures.detector_color(last)
    assert figures.detector_color("no_such_detector") == figures.MUTED


def test_a_donut_draws_its_texts_inside_the_ring_and_names_each_slice_with_its_count():
    # The demo's revision mix: a thin slice's label used to go outside the ring, where
    # the figure's bottom margin cut it off.
    fig = figures.share_pie(
        ["2025-06-18", "2025-11-25", "2026-07-28"], [1977, 2136, 135], "Revision mix"
    )
    (pie,) = fig.data
    # Inside the ring or not at all: never placed outside, where no margin is reserved.
    assert pie.textposition == "inside"
    assert fig.layout.uniformtext.mode == "hide"
    assert fig.layout.uniformtext.minsize >= 10
    assert pie.insidetextorientation == "horizontal"
    # What a hidden text would have said is in the legend: every slice with its count.
    assert list(pie.labels) == ["2025-06-18 · 1,977", "2025-11-25 · 2,136", "2026-07-28 · 135"]
    assert list(pie.text) == ["47 %", "50 %", "3 %"]
    assert pie.sort is False  # the caller's order (revisions by date, bases by count)


def test_a_donut_escapes_its_labels_and_shows_nothing_for_nothing():
    fig = figures.share_pie(["<a href='x'>y</a>", "b"], [1, 1], "t", colors={"b": "#123456"})
    assert fig.data[0].labels[0].startswith("&lt;a href='x'&gt;")
    assert list(fig.data[0].marker.colors) == [figures.MUTED, "#123456"]
    assert not figures.share_pie(["a"], [0], "t").data
    shares = (0, 0.0002, 0.004, 0.03, 0.096, 0.5, 1)
    assert [figures.share_text(x) for x in shares] == [
        "0 %",
        "< 0.1 %",
        "0.4 %",
        "3 %",
        "10 %",
        "50 %",
        "100 %",
    ]


def test_good_and_bad_outcomes_have_their_colours():
    from replaygate.dashboard import figures

    assert figures.OUTCOME_COLORS["idempotency_hit"] == figures.GOOD
    assert figures.OUTCOME_COLORS["idempotency_conflict"] == figures.BAD


def test_bucket_size_follows_the_span():
    from datetime import datetime, timedelta

    from replaygate.dashboard.figures import bucket_for

    t = datetime(2026, 1, 1)
    assert bucket_for(t, t + timedelta(minutes=30))[1] == "1 min"
    assert bucket_for(t, t + timedelta(hours=8))[1] == "5 min"
    assert bucket_for(t, t + timedelta(days=1))[1] == "15 min"


def test_inspector_marks_the_missing_seqs_and_the_crossed_event():
    from replaygate.dashboard import figures

    tl = pd.DataFrame(
        {
            "ts": pd.to_datetime(["2026-01-01T00:00:00Z"] * 4),
            "lane": ["server events", "server events", "client receipts", "stream ledger"],
            "label": ["message #1", "message #2", "message #2", "RESUME_PENDING"],
            "kind": ["sent", "dropped", "accepted", "RESUME_PENDING"],
            "stream_id": ["s1", "s1", "s2", "s1"],
            "seq": [1, 2, 2, None],
            "event_id": ["e1", "e2", "e2", None],
            "cursor": [None, None, None, "e9"],
            "info": ["", "", "", ""],
        }
    )
    gap = {"detector": "replay_gap", "stream_id": "s1", "detail": '{"missing_seqs": [2]}'}
    marks = figures.evidence_marks(tl, gap)
    assert list(marks) == ["", "missing #2", "", ""]
    crossed = {"detector": "cross_stream_acceptance", "stream_id": "s2", "event_id": "e2"}
    assert list(figures.evidence_marks(tl, crossed)) == ["", "event e2", "event e2", ""]
    cursor = {"detector": "cursor_misrouted", "stream_id": "s1", "event_id": "e9"}
    assert list(figures.evidence_marks(tl, cursor)) == ["", "", "", "cursor e9"]
    fig = figures.inspector_timeline(tl, "t", figures.evidence_marks(tl, gap))
    assert any(t.name == "evidence of the finding" for t in fig.data)
    # Records sharing a lane and a second are spread apart, not stacked.
    ys = [y for t in fig.data if t.name != "evidence of the finding" for y in t.y]
    assert len(set(ys)) == len(ys)
    # Colours by meaning: at most six.
    assert len(figures.MEANING_COLORS) <= 6


def test_gate_matrix_is_legible_and_greys_what_was_not_exercised():
    gates = [{"id": "a", "status": "pass", "sample": 0}, {"id": "b", "status": "fail", "sample": 3}]
    fig = figures.gate_matrix([{"stage": "s1", "decision": "ROLLBACK", "gates": gates}])
    assert list(fig.data[0].text[0]) == ["not<br>exercised", "fail"]
    assert list(fig.data[0].z[0]) == [figures.STATUS_CODE["not_applicable"], 3]
    assert fig.data[0].textfont.size >= 12


def test_label_rows_never_overlap():
    assert figures.label_rows([0.0, 0.5], [0.2, 0.2]) == [0, 0]
    assert figures.label_rows([0.0, 0.1, 0.15, 0.5], [0.2, 0.2, 0.2, 0.2]) == [0, 1, 2, 0]


def test_rollout_labels_stand_above_the_plot_and_apart():
    """Labels of actions close in time (a proceed and the next start a minute apart) are on
    separate rows above the plot area, never over its data, and the legend is below the
    plot, away from the labels and the title."""
    actions = pd.DataFrame(
        {
            "ts": [T + timedelta(hours=h) for h in (0, 1.98, 2, 3, 7.9)],
            "stage": ["shadow-10pct", "shadow-10pct", "resume-read-25pct", "resume", "w"],
            "action": ["start", "proceed", "start", "hold", "rollback"],
        }
    )
    series = pd.DataFrame(
        {"bucket": [T + timedelta(hours=h) for h in range(9)], "k": ["a"] * 9, "n": [1] * 9}
    )
    fig = figures.series_by(series, "k", "t", actions=actions)
    ann = [a for a in fig.layout.annotations if a.yref == "paper"]
    assert len(ann) == 5
    assert all(a.y == 1.0 and a.yanchor == "bottom" and a.yshift >= 0 for a in ann)
    by_text = {a.text: a.yshift for a in ann}
    assert by_text["proceed shadow-10pct"] != by_text["start resume-read-25pct"]
    assert fig.layout.margin.t >= max(by_text.values()) + figures.LABEL_ROW_PX + 20
    _beside_the_plot(fig.layout.legend)


def _beside_the_plot(legend) -> None:
    """Right of the plot from its top down, where plotly widens the margin to fit it:
    never below (on the time axis's ticks and title) nor above (on the title)."""
    assert legend.orientation == "v" and legend.x >= 1 and legend.xanchor == "left"
    assert legend.y == 1 and legend.yanchor == "top"


def test_every_chart_with_a_legend_keeps_it_beside_the_plot_and_room_for_all_of_it():
    from replaygate.queries import catalog

    names = sorted(catalog.detectors())[:14]
    df = pd.DataFrame({"bucket": [T] * len(names), "detector": names, "n": [1] * len(names)})
    qps = pd.DataFrame({"win": [T, T + timedelta(seconds=10)], "qps": [1.0, 7.5]})
    series = pd.DataFrame({"bucket": [T, T], "k": ["a", "b"], "n": [1, 2]})
    figs = {
        "findings": figures.findings_over_time(df, ACTIONS, "t"),
        "findings, no actions": figures.findings_over_time(df, ACTIONS.iloc[:0], "t"),
        "series": figures.series_by(series, "k", "t", actions=ACTIONS),
        "series, no actions": figures.series_by(series, "k", "t"),
        "reconnects": figures.reconnect_qps(qps, 5.0, ACTIONS),
        "donut": figures.share_pie(names, [1] * len(names), "t"),
    }
    for what, fig in figs.items():
        _beside_the_plot(fig.layout.legend)
        shown = [t for t in fig.data if t.showlegend is not False]
        if what.startswith("findings") or what == "donut":
            # Fourteen entries do not fit beside a 340 px chart: it grows, never scrolls.
            entries = len(shown) if what != "donut" else len(names)
            m = fig.layout.margin
            room = fig.layout.height - m.t - max(m.b, figures.AXIS_BOTTOM_PX)
            assert room >= entries * figures.LEGEND_ROW_PX, (what, room)
            assert fig.layout.height > figures.LAYOUT["height"], what


def test_rollout_labels_make_room_for_the_legend_beside_the_plot():
    """Two labels a quarter of the time range apart share a row on a plot as wide as the
    chart, and not when a legend of long names takes part of its width."""
    actions = pd.DataFrame(
        {
            "ts": [T, T + timedelta(hours=2)],
            "stage": ["resume-read-25pct", "resume-read-25pct"],
            "action": ["start", "hold"],
        }
    )
    hours = [T + timedelta(hours=h) for h in range(9)]

    def rows(keys: list[str]) -> set[float]:
        df = pd.DataFrame({"bucket": hours * len(keys), "k": keys * 9, "n": [1] * 9 * len(keys)})
        df = df.assign(k=[keys[i % len(keys)] for i in range(len(df))])
        fig = figures.series_by(df, "k", "t", actions=actions)
        return {a.yshift for a in fig.layout.annotations if a.yref == "paper"}

    assert len(rows(["one"])) == 1
    assert len(rows(["a rather long name of a series", "another long name of a series"])) == 2
    fig = figures.series_by(
        pd.DataFrame({"bucket": hours, "k": ["x"] * 9, "n": [1] * 9}), "k", "t", actions=actions
    )
    assert figures.plot_px(fig, 940) == 940 - 20 - figures.Y_AXIS_PX


def test_stage_timeline_draws_each_stage_and_a_rolled_back_ones_hygiene_window():
    t = pd.Timestamp
    stages = pd.DataFrame(
        [
            {"stage": "canary", "scope": "5%", "start_ts": t("2026-01-01 10:00"),
             "end_ts": t("2026-01-01 11:00"), "rollback_ts": t("2026-01-01 10:30"),
             "hygiene_end": pd.NaT},
            {"stage": "ga", "scope": "all", "start_ts": t("2026-01-01 11:00"),
             "end_ts": pd.NaT, "rollback_ts": pd.NaT, "hygiene_end": pd.NaT},
        ]
    )  # fmt: skip
    end = t("2026-01-01 13:00")
    fig = figures.stage_timeline(stages, pd.DataFrame(columns=["ts", "action", "stage"]), end)
    spans = [(tr.name, list(tr.x), tr.line.color, tr.line.dash) for tr in fig.data]
    assert spans == [
        ("canary", [t("2026-01-01 10:00"), t("2026-01-01 11:00")], "#ef9a9a", None),
        # still open: to the data's end
        ("rollback hygiene window", [t("2026-01-01 10:30"), end], "#c62828", "dot"),
        ("ga", [t("2026-01-01 11:00"), end], "#90caf9", None),
    ]
