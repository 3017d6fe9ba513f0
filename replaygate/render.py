"""Human-readable terminal output (rich tables on standard output)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from replaygate.api import FileResult, IngestReport

from replaygate.api import (
    CAPABILITY_LABELS,
    NOT_EXERCISED,
    RECORD_TYPES,
    Decision,
    Severity,
    Status,
    display_bound,
    display_status,
    display_threshold,
    display_value,
    one_line,
)
from replaygate.api import (
    title as gate_title,
)

# Tables fit the terminal (80 columns where there is none, as in CI logs) without cutting
# anything: ids and times wrap inside their column (overflow="fold"), other text wraps at
# spaces, and no column is made narrower than its longest word (see `_fit`).


def _print(*objects: object) -> None:
    # A console per call: its width is read from the environment then ($COLUMNS), not
    # when this module was first imported.
    console = Console()
    for obj in objects:
        if isinstance(obj, Table):
            _fit(obj, console.width)
    console.print(*objects)


def _table(title: str | None = None, rules: bool = True) -> Table:
    """A table with rules between columns and rows (or, with `rules=False`, only under
    the header: a character more for the data between any two columns)."""
    if rules:
        return Table(
            title=title,
            title_justify="left",
            box=box.MINIMAL_HEAVY_HEAD,
            show_edge=False,
            pad_edge=False,
        )
    return Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        padding=(0, 1, 0, 0),
    )


def _fit(table: Table, width: int) -> None:
    """Set each column's width so that the table fits `width`: every column as wide as
    its widest line if that fits; else each at least its longest word (a column that
    folds, at least 8), then made whole in order of what each lacks. rich's own
    shrinking can cut words with an ellipsis even where room is left elsewhere."""
    cols = table.columns
    lines = [
        [
            ln
            for cell in (c.header, *c._cells)
            for ln in Text.from_markup(str(cell)).plain.split("\n")
        ]
        for c in cols
    ]
    widest = [max((cell_len(ln) for ln in ls), default=1) for ls in lines]
    longest_word = [max((cell_len(w) for ln in ls for w in ln.split()), default=1) for ls in lines]
    least = [
        widest[i] if c.no_wrap else (min(8, widest[i]) if c.overflow == "fold" else longest_word[i])
        for i, c in enumerate(cols)
    ]
    room = width - table._extra_width - sum(table._get_padding_width(i) for i in range(len(cols)))
    if sum(widest) <= room:
        return
    if sum(least) > room:
        # Nothing fits whole; rich folds what it must.
        return
    # The columns that lack least are made whole first; the last that cannot be is
    # given what is left, and wraps.
    given = list(least)
    spare = room - sum(least)
    for i in sorted(range(len(cols)), key=lambda i: widest[i] - least[i]):
        extra = min(widest[i] - least[i], spare)
        given[i] += extra
        spare -= extra
    for c, w in zip(cols, given, strict=True):
        c.width = w


def _units(n: int) -> str:
    return f"{n:,} {'unit' if n == 1 else 'units'}"


def _t(value: object) -> str:
    """Data as terminal text: one line, no escape sequences, no rich markup."""
    return escape(one_line(value))


def ingest_summary(report: IngestReport, analysed: Mapping[str, Any] | None = None) -> None:
    by_type = report.rows_by_type()
    statuses: dict[str, int] = {}
    for f in report.files:
        statuses[f.status] = statuses.get(f.status, 0) + 1
    _print(
        "files: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        if statuses
        else "no input files found"
    )
    t = _table("rows loaded")
    t.add_column("record type", overflow="fold")
    t.add_column("table", overflow="fold")
    t.add_column("rows", justify="right")
    for rt in RECORD_TYPES:
        if by_type.get(rt.table):
            t.add_row(rt.schema, rt.table, f"{by_type[rt.table]:,}")
    if by_type:
        _print(t)
    if report.quarantined:
        q = _table(f"quarantined: {report.quarantined:,} rows (table `quarantine`)")
        q.add_column("reason")
        q.add_column("rows", justify="right")
        for reason, n in report.quarantine_reasons.most_common(8):
            q.add_row(_t(reason), f"{n:,}")
        _print(q)
    _lines_table(report.files)
    for f in report.files:
        if f.note:
            _print(f"{_t(f.path)}: {_t(f.note)}")
    for f in report.files:
        if f.facts is not None:
            found = ", ".join(CAPABILITY_LABELS.get(x, x) for x in f.facts["found"]) or "nothing"
            text = f"{one_line(f.path)}: proxy log shows {found}"
            if f.facts["missing"]:
                text += "; cannot show " + ", ".join(
                    CAPABILITY_LABELS.get(x, x) for x in f.facts["missing"]
                )
            _print(escape(text))
    if report.skipped:
        n = len(report.skipped)
        _print(
            "skipped 1 file that is not an input file"
            if n == 1
            else f"skipped {n} files that are not input files"
        )
    if analysed:
        _print(f"findings: {analysed.get('total', 0):,} (replaygate findings)")
    return None


def _lines_table(files: list[FileResult], limit: int = 20) -> None:
    """Per file with quarantined rows or blank lines: loaded + quarantined + blank =
    lines, so the count can be checked (all files: `ingest --json`)."""
    shown = [f for f in files if f.lines is not None and (f.quarantined or f.blank)]
    if not shown:
        return
    t = _table("lines read (loaded + quarantined + blank)")
    t.add_column("file", overflow="fold")
    for col in ("lines", "loaded", "quarantined", "blank"):
        t.add_column(col, justify="right")
    for f in shown[:limit]:
        loaded = sum(f.rows.values())
        t.add_row(_t(f.path), f"{f.lines:,}", f"{loaded:,}", f"{f.quarantined:,}", f"{f.blank:,}")
    _print(t)
    if len(shown) > limit:
        _print(f"... and {len(shown) - limit} more files (ingest --json lists them)")


def status_table(doc: dict[str, Any]) -> None:
    t = _table("record types", rules=False)
    # The table under its record type: a column less, so both times stay whole.
    t.add_column("record type", no_wrap=True)
    t.add_column("rows", justify="right")
    t.add_column("first", overflow="fold")
    t.add_column("last", overflow="fold")
    for row in doc["tables"]:
        t.add_row(
            f"{row['record_type']}\n[dim]{row['table']}[/]",
            f"{row['rows']:,}",
            _t(row["first"] or "-"),
            _t(row["last"] or "-"),
        )
    _print(t)
    if doc["rollout"]:
        r = _table("rollout")
        for col in ("ts", "stage", "action", "scope"):
            r.add_column(col, overflow="fold")
        for s in doc["rollout"]:
            r.add_row(_t(s["ts"]), _t(s["stage"]), _t(s["action"]), _t(s["scope"] or "-"))
        _print(r)
    q = doc["quarantine"]
    _print(
        f"files: {doc['files']['count']:,} ({doc['files']['bytes']:,} bytes); "
        f"quarantined rows: {q['rows']:,}"
    )
    for item in q["top_reasons"]:
        _print(f"  {item['rows']:>8,}  {_t(item['reason'])}")


# An outcome's style by its tone (queries/outcome.py says which member has which); the
# worst of each kind, and every decision, in bold.
TONE_STYLE = {"good": "green", "bad": "red", "warn": "yellow", "muted": "dim"}


def _style(tone: str, bold: bool) -> str:
    return ("bold " if bold else "") + TONE_STYLE[tone]


SEVERITY_STYLE = {s: _style(s.tone, s is Severity.CRITICAL) for s in Severity}
DECISION_STYLE = {d: _style(d.tone, True) for d in Decision}
STATUS_STYLE = {s: _style(s.tone, s is Status.FAIL) for s in Status}


def _unit(f: Mapping[str, Any]) -> str:
    """The finding's unit, one id a line and each whole (the column wraps a long one)."""
    parts = []
    if f["session_hmac"]:
        parts.append(f"session {f['session_hmac']}")
    if f.get("generation") is not None:
        parts.append(f"generation {f['generation']}")
    if f["stream_id"] is not None:
        parts.append(f"stream {f['stream_id']}")
    if f["event_id"]:
        parts.append(f"event {f['event_id']}")
    if f["dispatch_id"]:
        parts.append(f"dispatch {f['dispatch_id']}")
    if f["idempotency_key"]:
        parts.append(f"key {f['idempotency_key']}")
    return "\n".join(_t(p) for p in parts)


def _detail(value: object) -> str:
    """A finding's JSON detail as `key: value` lines (lists comma-separated)."""
    if not isinstance(value, dict):
        return "" if value is None else _t(value)
    lines = []
    for k, v in value.items():
        if v is None:
            continue
        if isinstance(v, list):
            v = ", ".join(str(x) for x in v)
        elif isinstance(v, dict):
            v = json.dumps(v, separators=(", ", ": "))
        lines.append(_t(f"{k}: {v}"))
    return "\n".join(lines)


def findings_table(
    rows: Sequence[Mapping[str, Any]], limit: int, coverage: Mapping[str, Any]
) -> None:
    t = _table(f"{len(rows):,} findings")
    # Two columns, so that at 80 columns the ids have the width to stay whole: what
    # and when on the left, which unit and the detector's detail on the right.
    t.add_column("finding", overflow="fold")
    t.add_column("unit and detail", overflow="fold")
    for f in rows[:limit]:
        left = (
            f"{_t(f['detector'])}\n[{SEVERITY_STYLE[f['severity']]}]{f['severity']}[/]"
            f" · {_t(f['stage'] or '-')}\n{_t(f['ts'])}"
        )
        unit, detail = _unit(f), _detail(f["detail"])
        right = "\n".join(x for x in (unit, f"[dim]{detail}[/]" if detail else "") if x)
        t.add_row(left, right or "-")
        if f is not rows[:limit][-1]:
            t.add_section()
    _print(t)
    if len(rows) > limit:
        _print(f"... {len(rows) - limit:,} more (--limit, or --json for all)")
    status = {d: (s["status"] if isinstance(s, dict) else s) for d, s in coverage.items()}
    gaps = {d: s for d, s in status.items() if s != "ok"}
    if gaps:
        _print("not run: " + "; ".join(f"{d} ({s})" for d, s in sorted(gaps.items())))
    for d, s in sorted(coverage.items()):
        for e in s.get("cannot_tell", []) if isinstance(s, dict) else []:
            _print(
                escape(
                    f"cannot tell: {d}, {_units(e['units'])}: {one_line(e['file'])} "
                    f"cannot show {e['missing']}"
                )
            )


def gates_report(doc: dict[str, Any]) -> None:
    if not doc["stages"]:
        _print(_t(doc.get("note", "no stages")))
        return
    for stage in doc["stages"]:
        decision = stage["decision"]
        _print(
            f"\n[bold]{_t(stage['stage'])}[/] ({_t(stage['scope'] or 'no scope')}) "
            f"{_t(stage['window']['start'])} .. {_t(stage['window']['end'] or 'open')}: "
            f"[{DECISION_STYLE[decision]}]{decision}[/]"
        )
        for r in stage["reasons"]:
            _print(f"  - {_t(r)}")
        for w in stage.get("warnings", []):
            _print(f"  [yellow]warning:[/] {_t(w)}")
        t = _table(rules=False)
        # The gate's title, as the dashboard and reports name it (`--json` keeps the id);
        # titles are short and fixed: never wrapped, the other columns give way.
        t.add_column("gate", no_wrap=True)
        t.add_column("status")
        # Numbers with their unit are never broken; the words of a threshold may be.
        t.add_column("value", justify="right", no_wrap=True)
        t.add_column("threshold")
        t.add_column("sample\n(min)", justify="right", no_wrap=True)
        t.add_column("95%\nbound", no_wrap=True)
        for g in stage["gates"]:
            shown = display_status(g)
            style = "dim" if shown == NOT_EXERCISED else STATUS_STYLE[g["status"]]
            t.add_row(
                _t(gate_title(g["id"])),
                f"[{style}]{shown}[/]",
                _t(display_value(g)),
                _t(display_threshold(g)),
                f"{g['sample']:,} [dim]({g['min_sample']:,})[/]",
                display_bound(g),
            )
        _print(t)
        for e in stage.get("cannot_tell", []):
            _print(
                escape(
                    f"  cannot tell in this stage: {e['detector']}, {_units(e['units'])}: "
                    f"{one_line(e['file'])} cannot show {e['missing']}"
                )
            )
    for rb in doc.get("rollback_verification", []):
        ok = "[green]verified[/]" if rb["verified"] else f"[bold red]{rb['status']}[/]"
        _print(
            f"\nrollback of {_t(rb['stage'])} at {_t(rb['rollback_at'])}: {ok}; "
            + ", ".join(f"{k} {v}" for k, v in rb["checks"].items())
            + "".join(
                f"; {_t(k)} cannot tell {v}" for k, v in (rb.get("cannot_tell") or {}).items() if v
            )
        )
