"""Plotly figures for the dashboard, as plain functions of data (tested without Streamlit)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

STATUS_COLORS = {
    "pass": "#2e7d32",
    "fail": "#c62828",
    "insufficient": "#f9a825",
    "not_applicable": "#bdbdbd",
}
DECISION_COLORS = {"PROCEED": "#2e7d32", "HOLD": "#f9a825", "ROLLBACK": "#c62828"}
STATUS_CODE = {"not_applicable": 0, "pass": 1, "insufficient": 2, "fail": 3}
ACTION_COLORS = {
    "start": "#1565c0",
    "proceed": "#2e7d32",
    "hold": "#f9a825",
    "rollback": "#c62828",
    "complete": "#6a1b9a",
}
LAYOUT = {
    "margin": {"l": 10, "r": 10, "t": 40, "b": 10},
    "height": 320,
    "legend": {"orientation": "h", "y": -0.2},
}


def _empty(title: str, message: str = "nothing to show for these filters") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False}, **LAYOUT)
    return fig


def annotate_rollout(fig: go.Figure, actions: pd.DataFrame) -> go.Figure:
    """Rollout actions as vertical lines on a time chart."""
    for row in actions.itertuples():
        fig.add_vline(
            x=row.ts,
            line_width=1,
            line_dash="dot",
            line_color=ACTION_COLORS.get(row.action, "#555"),
        )
        fig.add_annotation(
            x=row.ts,
            y=1.0,
            yref="paper",
            text=f"{row.action} {row.stage}",
            showarrow=False,
            textangle=-90,
            xanchor="right",
            yanchor="top",
            font={"size": 9, "color": ACTION_COLORS.get(row.action, "#555")},
        )
    return fig


def stage_timeline(stages: pd.DataFrame, actions: pd.DataFrame, data_end) -> go.Figure:
    if stages.empty:
        return _empty("Rollout", "no rollout log")
    fig = go.Figure()
    for row in stages.itertuples():
        end = row.end_ts if pd.notna(row.end_ts) else data_end
        fig.add_trace(
            go.Scatter(
                x=[row.start_ts, end],
                y=[row.stage, row.stage],
                mode="lines",
                line={"width": 18, "color": "#90caf9" if pd.isna(row.rollback_ts) else "#ef9a9a"},
                name=row.stage,
                hovertemplate=f"{row.stage} ({row.scope})<extra></extra>",
                showlegend=False,
            )
        )
        if pd.notna(row.rollback_ts):
            hy_end = row.hygiene_end if pd.notna(row.hygiene_end) else data_end
            fig.add_trace(
                go.Scatter(
                    x=[row.rollback_ts, hy_end],
                    y=[row.stage, row.stage],
                    mode="lines",
                    line={"width": 6, "color": "#c62828", "dash": "dot"},
                    name="rollback hygiene window",
                    showlegend=False,
                    hovertemplate="rollback hygiene window<extra></extra>",
                )
            )
    annotate_rollout(fig, actions)
    fig.update_layout(title="Stages (red: rolled back; dotted: hygiene window)", **LAYOUT)
    return fig


def gate_matrix(stages: list[dict]) -> go.Figure:
    if not stages:
        return _empty("Gates per stage", "no stages")
    gate_ids = [g["id"] for g in stages[0]["gates"]]
    z, text = [], []
    for s in stages:
        by_id = {g["id"]: g for g in s["gates"]}
        z.append([STATUS_CODE[by_id[g]["status"]] for g in gate_ids])
        text.append([by_id[g]["status"] for g in gate_ids])
    scale = [
        [0, STATUS_COLORS["not_applicable"]],
        [0.33, STATUS_COLORS["pass"]],
        [0.66, STATUS_COLORS["insufficient"]],
        [1, STATUS_COLORS["fail"]],
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=gate_ids,
            y=[f"{s['stage']} → {s['decision']}" for s in stages],
            text=text,
            texttemplate="%{text}",
            colorscale=scale,
            zmin=0,
            zmax=3,
            showscale=False,
            hovertemplate="%{y}<br>%{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(title="Gates per stage", **{**LAYOUT, "height": 120 + 45 * len(stages)})
    return fig


def findings_over_time(df: pd.DataFrame, actions: pd.DataFrame, title: str) -> go.Figure:
    if df.empty:
        return _empty(title, "no findings for these filters")
    fig = go.Figure()
    for det, part in df.groupby("detector"):
        fig.add_trace(go.Bar(x=part["bucket"], y=part["n"], name=det))
    fig.update_layout(barmode="stack", title=title, **LAYOUT)
    return annotate_rollout(fig, actions)


def recovery_histogram(df: pd.DataFrame, threshold_s: float) -> go.Figure:
    title = "Recovery time after a disconnect"
    if df.empty:
        return _empty(title, "no recoveries")
    p99 = float(df["secs"].quantile(0.99))
    fig = go.Figure(
        go.Histogram(x=df["secs"], nbinsx=40, name="recoveries", marker_color="#64b5f6")
    )
    fig.add_vline(
        x=threshold_s,
        line_color="#c62828",
        line_dash="dash",
        annotation_text=f"threshold {threshold_s:g} s",
    )
    fig.add_vline(
        x=p99,
        line_color="#1a237e",
        annotation_text=f"p99 {p99:.2f} s",
        annotation_position="bottom right",
    )
    fig.update_layout(title=title, xaxis_title="seconds", **LAYOUT)
    return fig


def series_by(
    df: pd.DataFrame, key: str, title: str, actions: pd.DataFrame | None = None, bar: bool = True
) -> go.Figure:
    if df.empty:
        return _empty(title)
    fig = go.Figure()
    for k, part in df.groupby(key):
        trace = go.Bar if bar else go.Scatter
        fig.add_trace(trace(x=part["bucket"], y=part["n"], name=str(k)))
    fig.update_layout(barmode="stack", title=title, **LAYOUT)
    return annotate_rollout(fig, actions) if actions is not None else fig


def share_pie(labels: list[str], values: list[int], title: str) -> go.Figure:
    if not sum(values):
        return _empty(title)
    fig = go.Figure(go.Pie(labels=labels, values=values, hole=0.5))
    fig.update_layout(title=title, **LAYOUT)
    return fig


def reconnect_qps(df: pd.DataFrame, budget: float, actions: pd.DataFrame) -> go.Figure:
    title = "Reconnects per second (10 s windows) against the budget"
    if df.empty:
        return _empty(title, "no reconnects")
    storms = df[df["qps"] > budget]
    fig = go.Figure(
        go.Scatter(
            x=df["win"],
            y=df["qps"],
            mode="markers",
            marker={"size": 5, "color": "#1565c0"},
            name="10 s window",
        )
    )
    if not storms.empty:
        fig.add_trace(
            go.Scatter(
                x=storms["win"],
                y=storms["qps"],
                mode="markers",
                marker={"size": 12, "color": "#c62828", "symbol": "x"},
                name="storm (over budget)",
            )
        )
    fig.add_hline(
        y=budget, line_color="#c62828", line_dash="dash", annotation_text=f"budget {budget:g}/s"
    )
    fig.update_layout(title=title, **LAYOUT)
    return annotate_rollout(fig, actions)


LANES = [
    "session ledger",
    "stream ledger",
    "server events",
    "client receipts",
    "proxy requests",
    "dispatches",
]
KIND_COLORS = {
    "dropped": "#c62828",
    "replayed": "#6a1b9a",
    "sent": "#1565c0",
    "coalesced": "#ef6c00",
    "accepted": "#2e7d32",
    "duplicate": "#f9a825",
    "rejected": "#c62828",
    "DISCONNECTED": "#c62828",
    "RESUME_PENDING": "#ef6c00",
    "CURSOR_REJECTED": "#c62828",
    "STREAM_OPEN": "#1565c0",
    "CLOSED": "#455a64",
    "executed": "#2e7d32",
    "idempotency_hit": "#0097a7",
    "idempotency_conflict": "#ef6c00",
}


def inspector_timeline(df: pd.DataFrame, title: str) -> go.Figure:
    if df.empty:
        return _empty(title, "nothing recorded for this session")
    fig = go.Figure()
    for kind, part in df.groupby("kind"):
        fig.add_trace(
            go.Scatter(
                x=part["ts"],
                y=part["lane"],
                mode="markers",
                name=str(kind),
                marker={
                    "size": 10,
                    "color": KIND_COLORS.get(kind, "#78909c"),
                    "symbol": "x" if kind in ("dropped", "rejected", "DISCONNECTED") else "circle",
                },
                text=part["label"] + "<br>" + part["info"].fillna(""),
                hovertemplate="%{x}<br>%{text}<extra></extra>",
            )
        )
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(LANES)))
    fig.update_layout(title=title, **{**LAYOUT, "height": 420})
    return fig
