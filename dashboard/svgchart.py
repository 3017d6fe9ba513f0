"""The audit report's charts as plain geometry for inline SVG (plain functions, tested
on their own): the HTML report draws them in its template, so a report carries no
plotting library and runs no script, opens offline and prints as drawn. Every text in
a chart is data and is escaped by the template like any other value."""

from __future__ import annotations

from typing import Any

from replaygate.api import NOT_EXERCISED, Status, display_status, display_value

from .figures import STATUS_COLORS, detector_color

WIDTH = 760
ROW = 24
# Width of one character of the labels (13 px sans-serif), to make room for the longest.
CHAR = 7.2
PAD = 8


def _label_width(labels: list[str]) -> int:
    return int(min(WIDTH * 0.45, max((len(x) for x in labels), default=0) * CHAR)) + PAD


def gate_rows(gates: list[dict[str, Any]]) -> dict[str, Any]:
    """One row per gate: its status as a coloured chip with the status's word, its title
    and its value (the gate table's vocabulary)."""
    label_w = _label_width([g["title"] for g in gates])
    chip = 110
    rows = []
    for i, g in enumerate(gates):
        shown = display_status(g)
        # A pass on no sample is "not exercised": grey like not applicable, never green.
        color = Status.NOT_APPLICABLE if shown == NOT_EXERCISED else Status(g["status"])
        rows.append(
            {
                "y": PAD + i * ROW,
                "title": g["title"],
                "status": shown,
                "value": display_value(g),
                "fill": STATUS_COLORS[color],
                # Dark text on the light chips (amber, grey), white on the others.
                "ink": "#000" if color in (Status.INSUFFICIENT, Status.NOT_APPLICABLE) else "#fff",
            }
        )
    return {
        "title": "Gates",
        "width": WIDTH,
        "height": 2 * PAD + max(1, len(rows)) * ROW,
        "label_w": label_w,
        "chip_x": label_w,
        "chip_w": chip,
        "value_x": label_w + chip + PAD,
        "rows": rows,
    }


def bars(counts: dict[str, int], title: str) -> dict[str, Any]:
    """Horizontal bars, largest first: a label, a bar in the detector's colour (as in
    the dashboard), the count at its end."""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    label_w = _label_width([k for k, _ in items])
    room = WIDTH - label_w - 60
    top = max((v for _, v in items), default=0)
    rows = [
        {
            "y": PAD + i * ROW,
            "label": k,
            "value": f"{v:,}",
            "w": max(1, round(room * v / top)) if top else 0,
            "fill": detector_color(k),
        }
        for i, (k, v) in enumerate(items)
    ]
    return {
        "title": title,
        "width": WIDTH,
        "height": 2 * PAD + max(1, len(rows)) * ROW,
        "label_w": label_w,
        "rows": rows,
        "empty": "no findings" if not rows else "",
    }
