"""Human-readable terminal output (rich tables on standard output)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from replaygate.ingest.capabilities import LABELS
from replaygate.ingest.contract import RECORD_TYPES
from replaygate.queries.escape import one_line
from replaygate.queries.gates import (
    NOT_EXERCISED,
    display_bound,
    display_status,
    display_threshold,
    display_value,
)

console = Console()


def _units(n: int) -> str:
    return f"{n:,} {'unit' if n == 1 else 'units'}"


def _t(value) -> str:
    """Data as terminal text: one line, no escape sequences, no rich markup."""
    return escape(one_line(value))


def ingest_summary(report, analysed=None, as_dict: bool = False):
    by_type = report.rows_by_type()
    if as_dict:
        return {
            "files": [
                {
                    "path": f.path,
                    "status": f.status,
                    "rows": f.rows,
                    "quarantined": f.quarantined,
                    "blank": f.blank,
                    "lines": f.lines,
                    "note": f.note or None,
                    **({"facts": f.facts} if f.facts is not None else {}),
                }
                for f in report.files
            ],
            "rows_loaded": by_type,
            "rows_quarantined": report.quarantined,
            "quarantine_reasons": dict(report.quarantine_reasons.most_common()),
            "skipped": report.skipped,
            "warnings": report.warnings,
            "findings": analysed,
        }
    statuses: dict[str, int] = {}
    for f in report.files:
        statuses[f.status] = statuses.get(f.status, 0) + 1
    console.print(
        "files: " + ", ".join(f"{n} {s}" for s, n in sorted(statuses.items()))
        if statuses
        else "no input files found"
    )
    t = Table(title="rows loaded", title_justify="left")
    t.add_column("record type")
    t.add_column("table")
    t.add_column("rows", justify="right")
    for rt in RECORD_TYPES:
        if by_type.get(rt.table):
            t.add_row(rt.schema, rt.table, f"{by_type[rt.table]:,}")
    if by_type:
        console.print(t)
    if report.quarantined:
        q = Table(
            title=f"quarantined: {report.quarantined:,} rows (table `quarantine`)",
            title_justify="left",
        )
        q.add_column("reason")
        q.add_column("rows", justify="right")
        for reason, n in report.quarantine_reasons.most_common(8):
            q.add_row(_t(reason), f"{n:,}")
        console.print(q)
    _lines_table(report.files)
    for f in report.files:
        if f.note:
            console.print(f"{_t(f.path)}: {_t(f.note)}")
    for f in report.files:
        if f.facts is not None:
            found = ", ".join(LABELS.get(x, x) for x in f.facts["found"]) or "nothing"
            text = f"{one_line(f.path)}: proxy log shows {found}"
            if f.facts["missing"]:
                text += "; cannot show " + ", ".join(LABELS.get(x, x) for x in f.facts["missing"])
            console.print(escape(text))
    if report.skipped:
        n = len(report.skipped)
        console.print(
            "skipped 1 file that is not an input file"
            if n == 1
            else f"skipped {n} files that are not input files"
        )
    if analysed:
        console.print(f"findings: {analysed.get('total', 0):,} (replaygate findings)")


def _lines_table(files, limit: int = 20) -> None:
    """Per file with quarantined rows or blank lines: loaded + quarantined + blank =
    lines, so the count can be checked (all files: `ingest --json`)."""
    shown = [f for f in files if f.lines is not None and (f.quarantined or f.blank)]
    if not shown:
        return
    t = Table(title="lines read (loaded + quarantined + blank)", title_justify="left")
    t.add_column("file")
    for col in ("lines", "loaded", "quarantined", "blank"):
        t.add_column(col, justify="right")
    for f in shown[:limit]:
        loaded = sum(f.rows.values())
        t.add_row(_t(f.path), f"{f.lines:,}", f"{loaded:,}", f"{f.quarantined:,}", f"{f.blank:,}")
    console.print(t)
    if len(shown) > limit:
        console.print(f"... and {len(shown) - limit} more files (ingest --json lists them)")


def status_table(doc: dict) -> None:
    t = Table(title="record types", title_justify="left")
    for col in ("table", "record type", "rows", "first", "last"):
        t.add_column(col, justify="right" if col == "rows" else "left")
    for row in doc["tables"]:
        t.add_row(
            row["table"],
            row["record_type"],
            f"{row['rows']:,}",
            _t(row["first"] or "-"),
            _t(row["last"] or "-"),
        )
    console.print(t)
    if doc["rollout"]:
        r = Table(title="rollout", title_justify="left")
        for col in ("ts", "stage", "action", "scope"):
            r.add_column(col)
        for s in doc["rollout"]:
            r.add_row(_t(s["ts"]), _t(s["stage"]), _t(s["action"]), _t(s["scope"] or "-"))
        console.print(r)
    q = doc["quarantine"]
    console.print(
        f"files: {doc['files']['count']:,} ({doc['files']['bytes']:,} bytes); "
        f"quarantined rows: {q['rows']:,}"
    )
    for item in q["top_reasons"]:
        console.print(f"  {item['rows']:>8,}  {_t(item['reason'])}")


SEVERITY_STYLE = {"critical": "bold red", "high": "red", "medium": "yellow", "low": "dim"}
DECISION_STYLE = {"PROCEED": "bold green", "HOLD": "bold yellow", "ROLLBACK": "bold red"}
STATUS_STYLE = {
    "pass": "green",
    "fail": "bold red",
    "insufficient": "yellow",
    "not_applicable": "dim",
}


def _unit(f: dict) -> str:
    parts = []
    if f["session_hmac"]:
        parts.append(f"session {f['session_hmac'][:12]}")
    if f["stream_id"] is not None:
        parts.append(f"stream {f['stream_id']}")
    if f["event_id"]:
        parts.append(f"event {f['event_id'][:24]}")
    if f["dispatch_id"]:
        parts.append(f"dispatch {f['dispatch_id']}")
    if f["idempotency_key"]:
        parts.append(f"key {f['idempotency_key'][:24]}")
    unit = ", ".join(parts) or ", ".join(f"{k}={v}" for k, v in list(f["detail"].items())[:2])
    return _t(unit)


def findings_table(rows: list[dict], limit: int, coverage: dict) -> None:
    t = Table(title=f"{len(rows):,} findings", title_justify="left")
    for col in ("severity", "detector", "ts", "stage", "unit"):
        t.add_column(col)
    for f in rows[:limit]:
        t.add_row(
            f"[{SEVERITY_STYLE[f['severity']]}]{f['severity']}[/]",
            _t(f["detector"]),
            _t(f["ts"]),
            _t(f["stage"] or "-"),
            _unit(f),
        )
    console.print(t)
    if len(rows) > limit:
        console.print(f"... {len(rows) - limit:,} more (--limit, or --json for all)")
    status = {d: (s["status"] if isinstance(s, dict) else s) for d, s in coverage.items()}
    gaps = {d: s for d, s in status.items() if s != "ok"}
    if gaps:
        console.print("not run: " + "; ".join(f"{d} ({s})" for d, s in sorted(gaps.items())))
    for d, s in sorted(coverage.items()):
        for e in s.get("cannot_tell", []) if isinstance(s, dict) else []:
            console.print(
                escape(
                    f"cannot tell: {d}, {_units(e['units'])}: {one_line(e['file'])} "
                    f"cannot show {e['missing']}"
                )
            )


def gates_report(doc: dict) -> None:
    if not doc["stages"]:
        console.print(_t(doc.get("note", "no stages")))
        return
    for st in doc["stages"]:
        decision = st["decision"]
        console.print(
            f"\n[bold]{_t(st['stage'])}[/] ({_t(st['scope'] or 'no scope')}) "
            f"{_t(st['window']['start'])} .. {_t(st['window']['end'] or 'open')}: "
            f"[{DECISION_STYLE[decision]}]{decision}[/]"
        )
        for r in st["reasons"]:
            console.print(f"  - {_t(r)}")
        for w in st.get("warnings", []):
            console.print(f"  [yellow]warning:[/] {_t(w)}")
        t = Table(show_header=True)
        for col in ("gate", "status", "value", "threshold", "sample", "min", "95% bound"):
            t.add_column(col)
        for g in st["gates"]:
            shown = display_status(g)
            style = "dim" if shown == NOT_EXERCISED else STATUS_STYLE[g["status"]]
            t.add_row(
                g["id"],
                f"[{style}]{shown}[/]",
                _t(display_value(g)),
                _t(display_threshold(g)),
                f"{g['sample']:,}",
                f"{g['min_sample']:,}",
                display_bound(g),
            )
        console.print(t)
        for e in st.get("cannot_tell", []):
            console.print(
                escape(
                    f"  cannot tell in this stage: {e['detector']}, {_units(e['units'])}: "
                    f"{one_line(e['file'])} cannot show {e['missing']}"
                )
            )
    for rb in doc.get("rollback_verification", []):
        ok = "[green]verified[/]" if rb["verified"] else f"[bold red]{rb['status']}[/]"
        console.print(
            f"\nrollback of {_t(rb['stage'])} at {_t(rb['rollback_at'])}: {ok}; "
            + ", ".join(f"{k} {v}" for k, v in rb["checks"].items())
        )
