"""What the database holds: tables, row counts, time spans, stages, quarantine."""

from __future__ import annotations

from typing import Any

import duckdb

from replaygate.core.contract import RECORD_TYPES
from replaygate.core.db import one_row
from replaygate.core.timefmt import iso_ms as _iso


def status(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    tables = []
    for rt in RECORD_TYPES:
        n, first, last = one_row(con.execute(f"SELECT count(*), min(ts), max(ts) FROM {rt.table}"))
        tables.append(
            {
                "table": rt.table,
                "record_type": rt.schema,
                "rows": n,
                "first": _iso(first),
                "last": _iso(last),
            }
        )
    stages = [
        {"stage": s, "action": a, "ts": _iso(t), "scope": sc}
        for s, a, t, sc in con.execute(
            "SELECT stage, action, ts, scope FROM rollout ORDER BY ts, pos"
        ).fetchall()
    ]
    q_total = one_row(con.execute("SELECT count(*) FROM quarantine"))[0]
    reasons = [
        {"reason": r, "rows": n}
        for r, n in con.execute(
            "SELECT reason, count(*) n FROM quarantine GROUP BY reason ORDER BY n DESC, reason "
            "LIMIT 10"
        ).fetchall()
    ]
    files = one_row(
        con.execute("SELECT count(*), coalesce(sum(size), 0) FROM files WHERE status = 'loaded'")
    )
    return {
        "tables": tables,
        "rollout": stages,
        "files": {"count": files[0], "bytes": files[1]},
        "quarantine": {"rows": q_total, "top_reasons": reasons},
    }
