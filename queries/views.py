"""What the dashboard shows, computed through the named queries under one filter model.

`gate_measures` recomputes every gate's measure from the filtered records with the gates'
own thresholds, minimum samples and statuses, so under a stage filter alone it equals
`replaygate gates --stage S`, and under revision, server, client or time filters it shows
the same measure for that slice.
"""

from __future__ import annotations

import contextlib
from typing import Any

import duckdb

from replaygate.ingest.config import Config

from . import catalog, gates, named, runner
from .filters import Filters
from .params import from_config

# Per gate: the column of the `measures` query that is its sample, and for gates not
# counted from findings, the column that is its value (share gates: failures).
_SAMPLE = {
    "cross_stream_acceptances": "delivered_events",
    "duplicate_dispatches": "write_dispatches",
    "silent_truncations": "completed_streams",
    "reinit_after_404": "session_404s",
    "invalid_origin_rejection": "invalid_origin_requests",
    "recovery_p99": "recoveries",
    "reconnect_qps": "reconnects",
    "raw_session_ids": "proxy_records",
    "auth_binding": "session_requests",
    "write_idempotency": "write_dispatches",
    "allowed_origin_refusals": "allowed_origin_requests",
}
# Per gate: the column that, when above 0, makes it unjudgeable, and why.
_UNJUDGED = {"invalid_origin_rejection": ("origin_unjudged", "origin allow-list not configured")}
_VALUE = {
    "invalid_origin_rejection": "invalid_origin_served",
    "recovery_p99": "recovery_p99",
    "reconnect_qps": "reconnect_peak",
    "raw_session_ids": "raw_session_records",
}


def detectors_for(page: str) -> tuple[str, ...]:
    """The detectors a dashboard page shows: their SQL header says `-- page: NAME`."""
    return tuple(sorted(n for n, q in catalog.detectors().items() if q.header.get("page") == page))


FLEET_MEASURES = "a_fleet_measures"


def measures(con: duckdb.DuckDBPyConnection, config: Config, f: Filters) -> dict[str, Any]:
    cur = None
    if not f.active() and runner.is_current(con, config):
        # Nothing filtered: what the analysis kept (store_fleet_measures), if it is current.
        with contextlib.suppress(duckdb.CatalogException):
            cur = con.execute(f"SELECT * FROM {FLEET_MEASURES}")
    if cur is None:
        cur = named.execute(con, "measures", flt=f, **_measure_values(config))
    cols = [d[0] for d in cur.description]
    row = cur.fetchone()
    assert row is not None  # an aggregate query always returns its one row
    return dict(zip(cols, row, strict=True))


def _measure_values(config: Config) -> dict[str, Any]:
    values = from_config(config)
    return {k: values[k] for k in ("origin_patterns", "origin_configured", "dead_statuses")}


def store_fleet_measures(con: duckdb.DuckDBPyConnection, config: Config) -> None:
    """Keep the unfiltered measures in the database (part of every analysis)."""
    named.prepare(con)
    q = named.get("measures")
    args = named.bind(q, {"flt": Filters(), **_measure_values(config)})
    con.execute(f"CREATE OR REPLACE TABLE {FLEET_MEASURES} AS {q.body()}", args)


def finding_counts(con: duckdb.DuckDBPyConnection, f: Filters) -> dict[str, int]:
    """Findings per detector that count in gates (a suspected duplicate does not)."""
    rows = named.execute(con, "gated_counts", flt=f).fetchall()
    return {r[0]: int(r[1]) for r in rows}


# What a gate of the dashboard carries from a gate of `gates.evaluate`.
_DECIDED = ("id", "status", "value", "threshold", "sample", "min_sample", "failures",
            "no_evidence", "reason")  # fmt: skip


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
        by_id = {g.id: g for g in gates.GATES}
        return [
            {**{k: g.get(k) for k in _DECIDED}, "detectors": list(by_id[g["id"]].detectors),
             "findings": sum(found.get(d, 0) for d in by_id[g["id"]].detectors)}
            for g in decided["gates"]
        ]  # fmt: skip
    m = measures(con, config, f)
    minimums = gates.min_samples(config)
    # Which sources could be judged: the stage's window, else the whole database.
    sources = gates._stage_sources(con).get(f.stage, {}) if f.stage else runner.table_counts(con)
    out = []
    for g in gates.GATES:
        sample = int(m[_SAMPLE[g.id]] or 0)
        n_found = sum(found.get(d, 0) for d in g.detectors)
        failures = 0
        value = m[_VALUE[g.id]] if g.id in _VALUE else n_found
        if g.kind == "share":
            failures = n_found if g.id not in _VALUE else int(value or 0)
            value = None if not sample else (sample - failures) / sample
        elif g.kind == "count":
            failures = int(value or 0)
        minimum = minimums[g.id]
        status = gates.status_of(g, value, sample, failures, minimum, scope, config)
        blind = gates.no_evidence(g, sources)
        if g.id in _UNJUDGED and m[_UNJUDGED[g.id][0]]:
            blind = blind or _UNJUDGED[g.id][1]
        if blind and status == "pass":
            status = "insufficient"
        gate = {
            "id": g.id,
            "status": status,
            "value": value,
            "threshold": gates._threshold(g, config),
            "sample": sample,
            "min_sample": minimum,
            "failures": failures,
            "detectors": list(g.detectors),
            "findings": n_found,
            "no_evidence": blind if status == "insufficient" else None,
        }
        gate["reason"] = gates.reason(gate, config)
        out.append(gate)
    return out
