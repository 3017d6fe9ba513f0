"""Figure builders as plain functions: right traces, thresholds drawn, empty inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd

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
    gates = [{"id": "a", "status": "pass"}, {"id": "b", "status": "fail"}]
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
    assert {t.name for t in fig.data} == {"dropped", "accepted"}
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
    assert state.from_query(state.to_query(f)) == f
    assert state.from_query({"from": "garbage"}).start is None


def test_findings_where_binds_values():
    sql, args = state.findings_where(state.Filters(stage="x'; DROP TABLE findings; --"))
    assert "DROP" not in sql and args["stage"].startswith("x'")


def test_short_never_fails():
    assert state.short(None) == "" and state.short(float("nan")) == ""
    assert state.short("a" * 64) == "a" * 12 + "…"
