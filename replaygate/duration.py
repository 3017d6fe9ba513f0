"""Durations on the command line: `15s`, `1m`, `30m`, `2h`, `1h30m`, `500ms`."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import click

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse(text: str) -> float:
    """Seconds in a duration such as `15s` or `1h30m`; a bare number is seconds."""
    s = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    parts = _PART.findall(s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"not a duration: {text!r} (e.g. 15s, 1m, 30m, 2h, 1h30m)")
    return sum(float(n) * _UNIT[u] for n, u in parts)


if TYPE_CHECKING:
    _ParamType = click.ParamType[float]
else:
    # click made ParamType generic in 8.5; older releases (pyproject allows 8.1) cannot
    # subscript it at run time
    _ParamType = click.ParamType


class Duration(_ParamType):
    """A click parameter: a duration, as seconds (float), greater than zero."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        try:
            seconds = parse(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if seconds <= 0:
            self.fail(f"{value!r} is not longer than zero", param, ctx)
        return seconds


def show(seconds: float) -> str:
    """A short human form: 0.8s, 15s, 2m05s, 1h02m."""
    if seconds < 10:
        return f"{seconds:.1f}s"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
