"""Plotly figures for the dashboard, as plain functions of data (tested without Streamlit)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from replaygate import api
from replaygate.api import NOT_EXERCISED, Decision, Status, display_status, plot_text

# An outcome's colour by its tone (queries/outcome.py says which member has which).
TONE_COLORS = {"good": "#2e7d32", "bad": "#c62828", "warn": "#f9a825", "muted": "#bdbdbd"}
STATUS_COLORS = {s: TONE_COLORS[s.tone] for s in Status}
DECISION_COLORS = {d: TONE_COLORS[d.tone] for d in Decision}
STATUS_CODE = {Status.NOT_APPLICABLE: 0, Status.PASS: 1, Status.INSUFFICIENT: 2, Status.FAIL: 3}
ACTION_COLORS = {
    "start": "#1565c0",
    "proceed": "#2e7d32",
    "hold": "#f9a825",
    "rollback": "#c62828",
    "complete": "#6a1b9a",
}
# A chart's width in the dashboard at 1400 px beside the sidebar (the page's width; a
# chart with rollout labels is never put in a column, where they would need many rows).
CHART_PX = 940
LEGEND_FONT = 11
LAYOUT = {
    "margin": {"l": 10, "r": 10, "t": 50, "b": 10},
    "height": 340,
    # Right of the plot, from its top down: plotly widens the margin to fit it, so it
    # covers nothing however many entries it has. Below the plot it sat on the time
    # axis's ticks and title; above it, once it wrapped, on the title.
    "legend": {
        "orientation": "v",
        "x": 1.02,
        "xanchor": "left",
        "y": 1.0,
        "yanchor": "top",
        "font": {"size": LEGEND_FONT},
    },
    "title_y": 0.97,
    "title_yanchor": "top",
}
# Colours by meaning: good green, bad red, warning amber, neutral blue/grey.
GOOD, BAD, WARN, NEUTRAL, INFO, MUTED = (
    "#2e7d32",
    "#c62828",
    "#ef6c00",
    "#1565c0",
    "#6a1b9a",
    "#90a4ae",
)
OUTCOME_COLORS = {
    "executed": NEUTRAL,
    "idempotency_hit": GOOD,
    "idempotency_conflict": BAD,
    "rejected": WARN,
    "failed": BAD,
}
STATUS_CLASS_COLORS = {"2xx": GOOD, "3xx": NEUTRAL, "4xx": WARN, "5xx": BAD, "1xx": MUTED}
STATE_COLORS = {"DISCONNECTED": BAD, "RESUME_PENDING": WARN, "CURSOR_REJECTED": INFO}


# The detectors' colours, one each: the detector at place i of the catalogue (its files in
# name order) has colour i, so a detector keeps its colour on every page, under every
# filter and in the report, and no two detectors share one. Chosen so that any two differ
# by a CIEDE2000 distance of at least 11 (and from white, black, the "other" grey and the
# rollout actions' colours): tests/test_figures.py checks both. A catalogue larger than
# this list is an error, never a colour used twice: add colours at the end.
DETECTOR_PALETTE = (
    "#FF88AA",
    "#AACC22",
    "#664400",
    "#00CCAA",
    "#006666",
    "#886688",
    "#FF6622",
    "#FF00EE",
    "#880044",
    "#AA8866",
    "#888800",
    "#224422",
    "#EEAAFF",
    "#00CCFF",
    "#444466",
    "#0088AA",
    "#8844FF",
    "#FF0066",
    "#666644",
    "#22AA00",
    "#CC0088",
    "#FFAA88",
    "#88AA88",
    "#8888CC",
    "#66AAFF",
    "#AA6666",
    "#AA6600",
    "#004466",
    "#884422",
    "#88CCCC",
    "#0000FF",
    "#AAAA66",
    "#444400",
    "#FF4444",
    "#CC66AA",
    "#CCAA00",
    "#00AAAA",
    "#6666AA",
    "#880000",
    "#884444",
    "#886644",
    "#006644",
    "#AA88AA",
    "#00CC66",
    "#008866",
    "#CC4400",
    "#CC8888",
    "#4444AA",
)


def detector_color(detector: str) -> str:
    """The detector's own colour (DETECTOR_PALETTE, by its place in the catalogue, not by
    what a chart happens to show); a name that is no detector is grey."""
    names = api.detector_names()
    if detector not in names:
        return MUTED
    i = names.index(detector)
    if i >= len(DETECTOR_PALETTE):
        raise LookupError(
            f"{len(names)} detectors but {len(DETECTOR_PALETTE)} colours: "
            "add colours to DETECTOR_PALETTE (dashboard/figures.py)"
        )
    return DETECTOR_PALETTE[i]


def bucket_for(start: Any, end: Any) -> tuple[timedelta, str]:
    """A bucket size that gives a readable number of bars over [start, end], and its name."""
    span = (end - start).total_seconds() if start is not None and end is not None else 86400
    for minutes, name in ((1, "1 min"), (5, "5 min"), (15, "15 min"), (30, "30 min"), (60, "1 h")):
        if span / (minutes * 60) <= 120:
            return timedelta(minutes=minutes), name
    return timedelta(hours=6), "6 h"


def _axes(fig: go.Figure, x: str | None = "time (UTC)", y: str | None = None) -> go.Figure:
    if x:
        fig.update_xaxes(title_text=x)
    if y:
        fig.update_yaxes(title_text=y)
    return fig


def _empty(title: str, message: str = "nothing to show for these filters") -> go.Figure:
    fig = go.Figure()
    fig.add_annotation(text=message, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(
        title=plot_text(title), xaxis={"visible": False}, yaxis={"visible": False}, **LAYOUT
    )
    return fig


# Rollout labels: font size, pixels per character and per row, to keep labels that would
# overlap on separate rows. A legend's pixels per character and beside its entries, and
# the y axis's ticks and title: what a chart's width leaves to its plot.
LABEL_FONT, LABEL_CHAR_PX, LABEL_ROW_PX = 11, 6.5, 16
LEGEND_CHAR_PX, LEGEND_ITEM_PX, Y_AXIS_PX = 6.5, 50, 70


def plot_px(fig: go.Figure, chart_px: int) -> float:
    """The width of the plot area of `fig` drawn `chart_px` wide: less the margins, the
    y axis and the legend at its right (shown for two or more named traces)."""
    names = [str(t.name) for t in fig.data if t.name and t.showlegend is not False]
    legend = max(len(n) for n in names) * LEGEND_CHAR_PX + LEGEND_ITEM_PX if len(names) > 1 else 0
    return max(chart_px - 20 - Y_AXIS_PX - legend, 100)


def label_rows(xs: list[float], widths: list[float]) -> list[int]:
    """Rows for labels starting at `xs` (fractions of the plot's width, ascending) of
    `widths` (same unit): each on the first row where it starts after the previous
    label there ends, so no two labels overlap."""
    ends: list[float] = []
    rows = []
    for x, w in zip(xs, widths, strict=True):
        row = next((r for r, end in enumerate(ends) if x > end), len(ends))
        if row == len(ends):
            ends.append(x + w)
        else:
            ends[row] = x + w
        rows.append(row)
    return rows


# The height of one entry of a vertical legend at LEGEND_FONT, and its padding.
LEGEND_ROW_PX, LEGEND_PAD_PX, AXIS_BOTTOM_PX = 19, 12, 80


def fit_legend(fig: go.Figure) -> go.Figure:
    """A chart tall enough for its legend's entries beside the plot: a legend taller than
    the plot would scroll and hide its last entries."""
    entries = sum(
        len(t.labels or ()) if t.type == "pie" else 1
        for t in fig.data
        if t.showlegend is not False and (t.type == "pie" or t.name)
    )
    if entries < 2:
        return fig
    margin = fig.layout.margin
    # Below the plot at least the time axis's ticks and title, which plotly fits there.
    bottom = max(margin.b or 0, AXIS_BOTTOM_PX)
    need = (margin.t or 0) + bottom + entries * LEGEND_ROW_PX + LEGEND_PAD_PX
    fig.update_layout(height=max(fig.layout.height or 0, need))
    return fig


def annotate_rollout(fig: go.Figure, actions: pd.DataFrame, chart_px: int = CHART_PX) -> go.Figure:
    """Rollout actions as vertical lines on a time chart, labelled above the plot (never
    over its data), each label on the first row where it overlaps no other at the
    chart's width (`chart_px`); the legend stays at the right, below the labels' rows.
    Only the actions inside the plotted time range, so a filtered chart keeps its own
    range."""
    xs = [x for t in fig.data for x in (t.x if t.x is not None else ())]
    lo = hi = None
    if xs and not actions.empty:
        lo, hi = pd.Timestamp(min(xs)), pd.Timestamp(max(xs))
        pad = max((hi - lo) * 0.05, pd.Timedelta(minutes=1))
        ts = pd.to_datetime(actions["ts"], utc=True)
        lo = lo.tz_localize("UTC") if lo.tzinfo is None else lo
        hi = hi.tz_localize("UTC") if hi.tzinfo is None else hi
        actions = actions[(ts >= lo - pad) & (ts <= hi + pad)]
        lo, hi = lo - pad, hi + pad
    if actions.empty:
        return fig
    actions = actions.assign(_t=pd.to_datetime(actions["ts"], utc=True)).sort_values("_t")
    texts = [plot_text(f"{r.action} {r.stage}") for r in actions.itertuples()]
    if lo is not None and hi is not None and hi > lo:
        span = (hi - lo).total_seconds()
        starts = [(t - lo).total_seconds() / span for t in actions["_t"]]
    else:
        starts = [i / max(1, len(texts)) for i in range(len(texts))]
    widths = [(len(t) * LABEL_CHAR_PX + 8) / plot_px(fig, chart_px) for t in texts]
    rows = label_rows(starts, widths)
    for row, text, r in zip(rows, texts, actions.itertuples(), strict=True):
        color = ACTION_COLORS.get(r.action, "#555")
        fig.add_vline(x=r.ts, line_width=1, line_dash="dot", line_color=color)
        fig.add_annotation(
            x=r.ts,
            y=1.0,
            yref="paper",
            yshift=4 + LABEL_ROW_PX * row,
            text=text,
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"size": LABEL_FONT, "color": color},
        )
    top = 44 + LABEL_ROW_PX * (max(rows) + 1)
    margin = dict(fig.layout.margin.to_plotly_json()) if fig.layout.margin else {}
    fig.update_layout(
        margin={**margin, "t": max(top, margin.get("t") or 0), "b": max(80, margin.get("b") or 0)},
        title_y=0.99,
    )
    return fig


def stage_timeline(stages: pd.DataFrame, actions: pd.DataFrame, data_end: Any) -> go.Figure:
    if stages.empty:
        return _empty("Rollout", "no rollout log")
    fig = go.Figure()

    def span(row: Any, start: Any, end: Any, line: dict[str, Any], name: str, hover: str) -> None:
        """A time span drawn on the stage's row, from start to end (the data's end when open)."""
        fig.add_trace(
            go.Scatter(
                x=[start, end if pd.notna(end) else data_end],
                y=[plot_text(row.stage)] * 2,
                mode="lines",
                line=line,
                name=name,
                hovertemplate=hover + "<extra></extra>",
                showlegend=False,
            )
        )

    for row in stages.itertuples():
        rolled_back = pd.notna(row.rollback_ts)
        span(
            row,
            row.start_ts,
            row.end_ts,
            {"width": 18, "color": "#ef9a9a" if rolled_back else "#90caf9"},
            plot_text(row.stage),
            plot_text(f"{row.stage} ({row.scope})"),
        )
        if rolled_back:
            hygiene = "rollback hygiene window"
            line = {"width": 6, "color": "#c62828", "dash": "dot"}
            span(row, row.rollback_ts, row.hygiene_end, line, hygiene, hygiene)
    fig.update_layout(title="Stages (red: rolled back; dotted: hygiene window)", **LAYOUT)
    return annotate_rollout(fig, actions)


def gate_matrix(stages: list[dict[str, Any]], titles: dict[str, str] | None = None) -> go.Figure:
    if not stages:
        return _empty("Gates per stage", "no stages")
    titles = titles or {}
    gate_ids = [g["id"] for g in stages[0]["gates"]]
    z, text = [], []
    for s in stages:
        by_id = {g["id"]: g for g in s["gates"]}
        shown = [display_status(by_id[g]) for g in gate_ids]
        # A pass on no sample reads "not exercised" and is grey, never green.
        z.append(
            [
                STATUS_CODE[
                    Status.NOT_APPLICABLE if w == NOT_EXERCISED else Status(by_id[g]["status"])
                ]
                for g, w in zip(gate_ids, shown, strict=True)
            ]
        )
        # Two-word statuses on two lines, so that they stay inside their cell.
        text.append([w.replace(" ", "<br>") for w in shown])
    scale = [
        [0, STATUS_COLORS[Status.NOT_APPLICABLE]],
        [0.33, STATUS_COLORS[Status.PASS]],
        [0.66, STATUS_COLORS[Status.INSUFFICIENT]],
        [1, STATUS_COLORS[Status.FAIL]],
    ]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=[titles.get(g, g) for g in gate_ids],
            y=[plot_text(f"{s['stage']} → {s['decision']}") for s in stages],
            text=text,
            texttemplate="%{text}",
            # Legible at 1400 px: plotly would otherwise shrink the words to fit the cells.
            textfont={"size": 12},
            colorscale=scale,
            zmin=0,
            zmax=3,
            showscale=False,
            xgap=2,
            ygap=2,
            hovertemplate="%{y}<br>%{x}: %{text}<extra></extra>",
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(tickfont={"size": 12})
    fig.update_yaxes(tickfont={"size": 12})
    fig.update_layout(title="Gates per stage", **{**LAYOUT, "height": 200 + 48 * len(stages)})
    return fig


def findings_over_time(
    df: pd.DataFrame,
    actions: pd.DataFrame,
    title: str,
    bucket: str = "15 min",
    chart_px: int = CHART_PX,
) -> go.Figure:
    title = f"{title} (per {bucket})"
    if df.empty:
        return _empty(title, "no findings for these filters")
    fig = go.Figure()
    for det, part in df.groupby("detector"):
        fig.add_trace(
            go.Bar(x=part["bucket"], y=part["n"], name=det, marker_color=detector_color(det))
        )
    fig.update_layout(barmode="stack", title=plot_text(title), **LAYOUT)
    _axes(fig, y=f"findings per {bucket}")
    return fit_legend(annotate_rollout(fig, actions, chart_px))


def _marked_line(
    fig: go.Figure, x: float, text: str, color: str, right: bool, dash: str | None = None
) -> None:
    """A vertical line at `x`, its label above the plot area (so it never sits on a bar),
    to the line's right or left."""
    fig.add_vline(x=x, line_color=color, **({"line_dash": dash} if dash else {}))
    fig.add_annotation(
        x=x,
        y=1.0,
        yref="paper",
        yanchor="bottom",
        showarrow=False,
        text=text,
        font={"color": color, "size": 11},
        xanchor="left" if right else "right",
    )


def recovery_histogram(df: pd.DataFrame, threshold_s: float) -> go.Figure:
    title = "Recovery time after a disconnect"
    if df.empty:
        return _empty(title, "no recoveries")
    p99 = float(df["secs"].quantile(0.99))
    fig = go.Figure(go.Histogram(x=df["secs"], nbinsx=40, name="recoveries", marker_color=NEUTRAL))
    # the two labels lean away from each other
    _marked_line(fig, threshold_s, f"threshold {threshold_s:g} s", BAD, threshold_s >= p99, "dash")
    _marked_line(fig, p99, f"p99 {p99:.2f} s", "#1a237e", threshold_s < p99)
    fig.update_layout(title=plot_text(title), showlegend=False, **LAYOUT)
    return _axes(fig, x="seconds from disconnect to reopened stream", y="recoveries")


def series_by(
    df: pd.DataFrame,
    key: str,
    title: str,
    actions: pd.DataFrame | None = None,
    bar: bool = True,
    y: str = "count",
    colors: dict[str, str] | None = None,
    bucket: str | None = None,
    chart_px: int = CHART_PX,
) -> go.Figure:
    if bucket:
        title = f"{title} (per {bucket})"
    if df.empty:
        return _empty(title)
    fig = go.Figure()
    for k, part in df.groupby(key):
        trace = go.Bar if bar else go.Scatter
        color = (colors or {}).get(str(k), MUTED if colors else None)
        fig.add_trace(trace(x=part["bucket"], y=part["n"], name=plot_text(k), marker_color=color))
    fig.update_layout(barmode="stack", title=plot_text(title), **LAYOUT)
    _axes(fig, y=f"{y} per {bucket}" if bucket else y)
    return fit_legend(annotate_rollout(fig, actions, chart_px) if actions is not None else fig)


def share_pie(
    labels: list[str], values: list[int], title: str, colors: dict[str, str] | None = None
) -> go.Figure:
    """A donut of shares. Each slice's text is its share, drawn inside the slice (hidden
    where it would not fit, never moved outside the ring where the figure's margin would
    cut it off); the legend names every slice with its count, so a slice too thin for its
    text still reads there."""
    total = sum(values)
    if not total:
        return _empty(title)
    marker = {"colors": [(colors or {}).get(str(x), MUTED) for x in labels]} if colors else {}
    fig = go.Figure(
        go.Pie(
            labels=[f"{plot_text(x)} · {v:,}" for x, v in zip(labels, values, strict=True)],
            values=values,
            hole=0.5,
            marker=marker,
            sort=False,
            direction="clockwise",
            text=[share_text(v / total) for v in values],
            texttemplate="%{text}",
            textposition="inside",
            insidetextorientation="horizontal",
            hovertemplate="%{label} (%{text})<extra></extra>",
        )
    )
    fig.update_layout(
        title=plot_text(title),
        uniformtext={"minsize": PIE_TEXT_MIN, "mode": "hide"},
        **LAYOUT,
    )
    return fit_legend(fig)


# The smallest font a slice's text is drawn in; a slice too thin for it shows none.
PIE_TEXT_MIN = 10


def share_text(share: float) -> str:
    """A share as the gates write percentages ("12 %", "0.4 %")."""
    pct = share * 100
    if 0 < pct < 0.1:
        return "< 0.1 %"
    return f"{pct:.1f} %" if 0 < pct < 1 else f"{pct:.0f} %"


def reconnect_qps(
    df: pd.DataFrame, budget: float, actions: pd.DataFrame, chart_px: int = CHART_PX
) -> go.Figure:
    title = "Reconnects per second (10 s windows) against the budget"
    if df.empty:
        return _empty(title, "no reconnects")
    storms = df[df["qps"] > budget]
    fig = go.Figure(
        go.Scatter(
            x=df["win"],
            y=df["qps"],
            mode="markers",
            marker={"size": 5, "color": NEUTRAL},
            name="10 s window",
        )
    )
    if not storms.empty:
        fig.add_trace(
            go.Scatter(
                x=storms["win"],
                y=storms["qps"],
                mode="markers",
                marker={"size": 12, "color": BAD, "symbol": "x"},
                name="storm (over budget)",
            )
        )
    fig.add_hline(
        y=budget,
        line_color=BAD,
        line_dash="dash",
        annotation_text=f"budget {budget:g}/s",
        annotation_position="bottom right",
    )
    fig.update_layout(title=plot_text(title), **LAYOUT)
    _axes(fig, y="reconnects per second")
    return fit_legend(annotate_rollout(fig, actions, chart_px))


LANES = [
    "session ledger",
    "stream ledger",
    "server events",
    "client receipts",
    "proxy requests",
    "dispatches",
]
# At most six colours, by meaning.
MEANING_COLORS = {
    "ok": GOOD,
    "lost": BAD,
    "warning": WARN,
    "neutral": NEUTRAL,
    "replay": INFO,
    "other": MUTED,
}
KIND_MEANING = {
    "sent": "neutral",
    "accepted": "ok",
    "executed": "neutral",
    "idempotency_hit": "ok",
    "STREAM_OPEN": "neutral",
    "CLOSED": "other",
    "replayed": "replay",
    "RESUME_PENDING": "replay",
    "coalesced": "warning",
    "duplicate": "warning",
    "idempotency_conflict": "lost",
    "dropped": "lost",
    "rejected": "lost",
    "DISCONNECTED": "lost",
    "CURSOR_REJECTED": "lost",
    "http 4xx": "warning",
    "http 5xx": "lost",
    "http 2xx": "ok",
}
MEANING_LABELS = {
    "ok": "accepted / delivered",
    "lost": "lost, rejected or broken",
    "warning": "duplicate, coalesced or 4xx",
    "neutral": "sent / opened / executed",
    "replay": "replayed / resuming",
    "other": "other",
}


def _point_text(r: Any) -> str:
    if pd.notna(r.seq):
        return f"#{int(r.seq)}"
    if isinstance(r.cursor, str) and r.cursor:
        return f"from {r.cursor}"
    return ""


def meaning_of(event_kind: object) -> str:
    return KIND_MEANING.get(str(event_kind), "other")


def _lane_offsets(df: pd.DataFrame) -> pd.Series:
    """Spread records that share a lane and a second across the lane, so none hides another."""
    key = (
        df["lane"].astype(str) + "|" + df["ts"].astype("int64").floordiv(1_000_000_000).astype(str)
    )
    rank = df.groupby(key).cumcount()
    size = df.groupby(key)["lane"].transform("size")
    return ((rank - (size - 1) / 2) * (0.6 / size.clip(lower=1))).astype(float)


def evidence_marks(tl: pd.DataFrame, finding: dict[str, Any] | None) -> pd.Series:
    """Per timeline row, the text marking it as the finding's evidence ('' if it is not):
    the missing seqs, the crossed event, the misused cursor, the dispatch."""
    marks = pd.Series("", index=tl.index, dtype=object)
    if not finding or tl.empty:
        return marks
    import json

    detail = finding.get("detail") or {}
    if isinstance(detail, str):
        try:
            detail = json.loads(detail)
        except ValueError:
            detail = {}
    stream = finding.get("stream_id")
    event = finding.get("event_id")
    same_stream = tl["stream_id"].isna() | (tl["stream_id"] == stream) if stream else True
    missing = detail.get("missing_seqs") or []
    if missing:
        hit = (tl["lane"] == "server events") & tl["seq"].isin(missing) & same_stream
        marks[hit] = "missing #" + tl.loc[hit, "seq"].astype("Int64").astype(str)
    if isinstance(event, str) and event:
        hit = tl["event_id"] == event
        marks[hit & (marks == "")] = "event " + event
        hit = tl["cursor"] == event
        marks[hit & (marks == "")] = "cursor " + event
    dispatch = finding.get("dispatch_id")
    if isinstance(dispatch, str) and dispatch:
        hit = (tl["lane"] == "dispatches") & tl["info"].fillna("").str.contains(
            dispatch, regex=False
        )
        marks[hit & (marks == "")] = "dispatch " + dispatch
    if (marks == "").all() and finding.get("ts") is not None:
        # Nothing names the evidence: mark the records at the finding's moment.
        t = pd.Timestamp(finding["ts"])
        t = t.tz_localize("UTC") if t.tzinfo is None else t
        when = pd.to_datetime(tl["ts"], utc=True)
        gap = (when - t).abs()
        nearest = gap == gap.min()
        marks[nearest] = str(finding.get("detector") or "finding")
    return marks


def inspector_timeline(df: pd.DataFrame, title: str, marks: pd.Series | None = None) -> go.Figure:
    """One session's records on lanes; the finding's evidence ringed and labelled."""
    if df.empty:
        return _empty(title, "nothing recorded for this subject")
    df = df.reset_index(drop=True).copy()
    lanes = [x for x in LANES if x in set(df["lane"])]
    pos = {lane: i for i, lane in enumerate(reversed(lanes))}
    df["y"] = df["lane"].map(pos) + _lane_offsets(df)
    df["meaning"] = df["kind"].map(meaning_of)
    # Seq, event id and cursor as visible text when there is room for it.
    few = len(df) <= 80
    df["text"] = (
        [_point_text(r) if few else "" for r in df[["seq", "event_id", "cursor"]].itertuples()]
        if {"seq", "event_id", "cursor"} <= set(df.columns)
        else ""
    )
    fig = go.Figure()
    for meaning, part in df.groupby("meaning"):
        fig.add_trace(
            go.Scatter(
                x=part["ts"],
                y=part["y"],
                mode="markers+text" if few else "markers",
                text=part["text"],
                textposition="bottom center",
                textfont={"size": 9, "color": "#37474f"},
                name=MEANING_LABELS[meaning],
                marker={
                    "size": 9,
                    "color": MEANING_COLORS[meaning],
                    "symbol": "x" if meaning == "lost" else "circle",
                    "line": {"width": 0},
                },
                customdata=part[["label", "info"]].fillna(""),
                hovertemplate="%{x}<br>%{customdata[0]}<br>%{customdata[1]}<extra></extra>",
            )
        )
    if marks is not None:
        df["mark"] = marks.reindex(df.index).fillna("").to_numpy()
        ev = df[df["mark"] != ""]
        if not ev.empty:
            fig.add_trace(
                go.Scatter(
                    x=ev["ts"],
                    y=ev["y"],
                    mode="markers+text",
                    name="evidence of the finding",
                    marker={
                        "size": 20,
                        "color": "rgba(0,0,0,0)",
                        "line": {"width": 2.5, "color": BAD},
                    },
                    text=ev["mark"],
                    textposition="top center",
                    textfont={"color": BAD, "size": 11},
                    hoverinfo="skip",
                )
            )
    fig.update_yaxes(
        tickvals=list(pos.values()),
        ticktext=list(pos.keys()),
        range=[-0.6, len(lanes) - 0.4],
        showgrid=True,
        zeroline=False,
    )
    fig.update_layout(title=plot_text(title), **{**LAYOUT, "height": 120 + 70 * max(len(lanes), 3)})
    return _axes(fig)
