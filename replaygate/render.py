"""Human-readable terminal output (rich tables on standard output)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ingest.contract import RECORD_TYPES

console = Console()


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
                    "note": f.note or None,
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
            q.add_row(reason, f"{n:,}")
        console.print(q)
    for f in report.files:
        if f.note:
            console.print(f"{f.path}: {f.note}")
    if report.skipped:
        console.print(f"skipped {len(report.skipped)} files that are not input files")
    if analysed:
        console.print(f"findings: {analysed.get('total', 0):,} (replaygate findings)")


def status_table(doc: dict) -> None:
    t = Table(title="record types", title_justify="left")
    for col in ("table", "record type", "rows", "first", "last"):
        t.add_column(col, justify="right" if col == "rows" else "left")
    for row in doc["tables"]:
        t.add_row(
            row["table"],
            row["record_type"],
            f"{row['rows']:,}",
            row["first"] or "-",
            row["last"] or "-",
        )
    console.print(t)
    if doc["rollout"]:
        r = Table(title="rollout", title_justify="left")
        for col in ("ts", "stage", "action", "scope"):
            r.add_column(col)
        for s in doc["rollout"]:
            r.add_row(s["ts"], s["stage"], s["action"], s["scope"] or "-")
        console.print(r)
    q = doc["quarantine"]
    console.print(
        f"files: {doc['files']['count']:,} ({doc['files']['bytes']:,} bytes); "
        f"quarantined rows: {q['rows']:,}"
    )
    for item in q["top_reasons"]:
        console.print(f"  {item['rows']:>8,}  {item['reason']}")
