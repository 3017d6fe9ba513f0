"""How current each source is: its newest record, and which sources lag the others.

A dead recorder behind a live proxy still gives fresh proxy lines; judged by the newest
record of any kind, the data looks current while the ledgers stopped days ago. So each
source is judged against the others and against the stage window it is evaluated for.

Record times come from the data, not from replaygate: a record dated after it was
ingested (a clock years ahead, a typo) cannot be the data's "now". Such records are
counted and left out of the newest times, so one line dated 2099 neither makes the
data "as of 2099" nor stretches an open stage to it.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import duckdb

from replaygate.core.contract import RECORD_TYPES
from replaygate.core.timefmt import iso_ms

# A source this far behind the newest of the others (or the end of the window judged)
# has stopped, or its files are not being collected.
STALE_AFTER = dt.timedelta(minutes=15)
# Clocks of recorders and of the machine that ingests differ a little.
CLOCK_SLACK = dt.timedelta(minutes=5)
# The rollout log is written at stage changes only: an old newest record is normal.
SPARSE = frozenset({"rollout"})

_LABELS = {
    "sessions": "session ledger",
    "streams": "stream ledger",
    "events": "event log",
    "inbox": "client inbox",
    "dispatches": "dispatch records",
    "proxy": "proxy log",
    "rollout": "rollout log",
}


def label(table: str) -> str:
    return _LABELS.get(table, table)


def sources(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, Any]]:
    """Per record table: records, newest plausible record time and the records dated
    after the last ingest (left out of `newest`)."""
    cutoff = con.execute("SELECT max(ingested_at) FROM files").fetchone()
    limit = cutoff[0] + CLOCK_SLACK if cutoff and cutoff[0] is not None else None
    out: dict[str, dict[str, Any]] = {}
    for rt in RECORD_TYPES:
        row = con.execute(
            f"""SELECT count(*),
                       max(ts) FILTER (WHERE $limit IS NULL OR ts <= $limit),
                       count(*) FILTER (WHERE ts > $limit),
                       max(ts) FILTER (WHERE ts > $limit)
                FROM {rt.table}""",
            {"limit": limit},
        ).fetchone()
        n, newest, future, future_max = row if row else (0, None, 0, None)
        out[rt.table] = {
            "source": label(rt.table),
            "records": int(n or 0),
            "newest": newest,
            "future": int(future or 0),
            "future_newest": future_max,
        }
    return out


def as_of(src: dict[str, dict[str, Any]]) -> dt.datetime | None:
    """The data's "now": the newest plausible record of any source."""
    times = [s["newest"] for s in src.values() if s["newest"] is not None]
    return max(times) if times else None


def stale(src: dict[str, dict[str, Any]], until: dt.datetime | None = None) -> list[dict[str, Any]]:
    """Sources whose newest record is more than STALE_AFTER before `until` (default: the
    newest record of the others), oldest first."""
    out = []
    for table, s in src.items():
        if table in SPARSE or not s["records"] or s["newest"] is None:
            continue
        others = [
            o["newest"]
            for t, o in src.items()
            if t != table and t not in SPARSE and o["newest"] is not None
        ]
        ref = until if until is not None else (max(others) if others else None)
        if ref is None or ref - s["newest"] <= STALE_AFTER:
            continue
        out.append(
            {
                "table": table,
                "source": s["source"],
                "newest": iso_ms(s["newest"]),
                "behind_seconds": round((ref - s["newest"]).total_seconds(), 1),
                "behind": "the stage window's end" if until is not None else "the other sources",
            }
        )
    return sorted(out, key=lambda e: -e["behind_seconds"])


def show_seconds(seconds: float) -> str:
    """A lag as people read it: 40 min, 5.2 h, 3.6 days."""
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def describe(entry: dict[str, Any]) -> str:
    """One stale source as a warning line."""
    return (
        f"{entry['source']} stale: newest record {entry['newest']}, "
        f"{show_seconds(entry['behind_seconds'])} behind {entry['behind']}"
    )


def future_warning(src: dict[str, dict[str, Any]]) -> str | None:
    n = sum(s["future"] for s in src.values())
    if not n:
        return None
    newest = max(s["future_newest"] for s in src.values() if s["future_newest"] is not None)
    where = ", ".join(s["source"] for s in src.values() if s["future"])
    return (
        f"{n:,} {'record' if n == 1 else 'records'} dated after the last ingest "
        f"(newest {iso_ms(newest)}, in the {where}): left out of the data's newest time"
    )


def warnings(src: dict[str, dict[str, Any]]) -> list[str]:
    """Fleet-wide: sources behind the others, and records from the future."""
    out = [describe(e) for e in stale(src)]
    future = future_warning(src)
    return [*out, future] if future else out
