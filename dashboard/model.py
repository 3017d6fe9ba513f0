"""What the dashboard shows, beside the dashboard: which page shows which detectors and
gates (their SQL headers' `-- page:`), and every gate under the one filter model, in the
shape of a gate of `gates --json` with the findings behind it.

The measures and their judgement are the analysis' (`gates_under_filter`: each gate's own
measure query over the gate facts the filter keeps, and the gates' one judge), so under a
stage filter alone a tile equals `replaygate gates --stage S`. Like every module of the
dashboard it reaches the library through the facade alone, and imports no Streamlit.
"""

from __future__ import annotations

from typing import Any

import duckdb

from replaygate.api import GATES, Config, Filters, detector_pages, gates_under_filter, named


def detectors_for(page: str) -> tuple[str, ...]:
    """The detectors a dashboard page shows: their SQL header says `-- page: NAME`."""
    return tuple(sorted(n for n, shown_on in detector_pages().items() if shown_on == page))


def gates_for(page: str) -> tuple[str, ...]:
    """The gates a dashboard page shows as tiles, in display order: their SQL header says
    `-- page: NAME`."""
    return tuple(g.id for g in GATES if g.page == page)


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
    by_id = {g.id: g for g in GATES}
    if decided is not None and stage_alone(f) and decided.get("stage") == f.stage:
        shown = [{k: g[k] for k in _DECIDED if k in g} for g in decided["gates"]]
    else:
        shown = [res.as_dict() for res in gates_under_filter(con, config, f, scope)]
    return [
        {
            **g,
            "detectors": list(by_id[g["id"]].detectors),
            "findings": sum(found.get(d, 0) for d in by_id[g["id"]].detectors),
        }
        for g in shown
    ]
