"""What the dashboard shows, computed through the named queries under one filter model.

`gate_measures` runs every gate's own measure query over the gate facts the filter keeps
and judges it with the gates' one judge (`gates.judge`), so under a stage filter alone it
equals `replaygate gates --stage S`, and under revision, server, client or time filters it
shows the same measure for that slice.
"""

from __future__ import annotations

from typing import Any

import duckdb

from replaygate.ingest.config import Config

from . import catalog, gatedefs, gates, named, runner
from .filters import Filters


def detectors_for(page: str) -> tuple[str, ...]:
    """The detectors a dashboard page shows: their SQL header says `-- page: NAME`."""
    return tuple(sorted(n for n, q in catalog.detectors().items() if q.header.text("page") == page))


def gates_for(page: str) -> tuple[str, ...]:
    """The gates a dashboard page shows as tiles, in display order: their SQL header says
    `-- page: NAME`."""
    return tuple(g.id for g in gatedefs.GATES if g.page == page)


def measures(
    con: duckdb.DuckDBPyConnection, config: Config, f: Filters
) -> dict[str, dict[str, Any]]:
    """Every gate's measure over the gate facts the filter keeps (its gate's own query)."""
    return gates.measures(con, config, f).get(None, {})


def finding_counts(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, int]:
    """Findings per detector that count in gates (a suspected duplicate does not)."""
    rows = named.execute(con, "gated_counts", flt=f).fetchall()
    return {r[0]: int(r[1]) for r in rows}


# What a gate of the dashboard carries from a gate of `gates.evaluate`.
# (`causes` only for a gate whose failures are broken down by cause)
_DECIDED = ("id", "status", "value", "threshold", "sample", "min_sample", "failures",
            "no_evidence", "reason", "causes")  # fmt: skip


def stage_alone(f: Filters) -> bool:
    """Is the filter one stage and nothing else (where the decision's gates are the
    measures)?"""
    return f.active() == ("stage",) and not f.baseline


def gate_measures(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    f: Filters,
    scope: str | None = None,
    decided: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every gate under the filter, in the shape of a gate of `gates.evaluate`.
    `decided`: that stage's evaluation, when the filter is the stage alone: its gates are
    the measures by definition, read from the prepared samples instead of every record
    again (seconds on a large fleet)."""
    found = finding_counts(con, f)
    if decided is not None and stage_alone(f) and decided.get("stage") == f.stage:
        by_id = {g.id: g for g in gatedefs.GATES}
        return [
            {**{k: g[k] for k in _DECIDED if k in g}, "detectors": list(by_id[g["id"]].detectors),
             "findings": sum(found.get(d, 0) for d in by_id[g["id"]].detectors)}
            for g in decided["gates"]
        ]  # fmt: skip
    m = measures(con, config, f)
    minimums = gatedefs.min_samples(config)
    # What could be judged: the stage's window and its units that no file could show,
    # else the whole database (units cannot be told apart by the other filters).
    if f.stage:
        sources = gates.stage_sources(con).get(f.stage, {})
        unjudged = runner.cannot_tell_by_stage(con).get(f.stage, [])
    else:
        sources, unjudged = runner.table_counts(con), []
    blind = runner.blind_detectors(con)
    out = []
    for g in gatedefs.GATES:
        cannot_tell = sum(e["units"] for e in unjudged if e["detector"] in g.detectors)
        res = gates.gate_result(
            g, m.get(g.id, {}), minimums[g.id], scope, config, sources, blind, cannot_tell
        )
        out.append(
            {
                **res.as_dict(),
                "detectors": list(g.detectors),
                "findings": sum(found.get(d, 0) for d in g.detectors),
            }
        )
    return out
