"""Release gates per rollout stage and the PROCEED / HOLD / ROLLBACK decision.

Measures come from queries/sql/gates (one file per gate, one row per stage);
this module applies thresholds, minimum samples and scopes, and writes the
reasons the way an engineer reads them, each tied to the findings behind it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import cache, cached_property, lru_cache
from typing import Any

import duckdb

from replaygate.core.config import Config
from replaygate.core.db import one_row
from replaygate.core.errors import ReplaygateError
from replaygate.core.timefmt import iso_ms as _iso

from . import cannottell, catalog, freshness, named, params, runner
from .filters import Filters
from .gatedefs import BY_ID, GATES, GateDef, _fmt_n, _percent, min_samples
from .outcome import Decision, Status


def status_of(
    g: GateDef,
    value: float | None,
    sample: int,
    failures: int,
    minimum: int,
    scope: str | None,
    config: Config,
) -> Status:
    if scope is not None and scope not in g.scopes:
        return Status.NOT_APPLICABLE
    return g.kind.status(value, sample, failures, minimum, g.kind.threshold(config))


def stage_sources(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, int]]:
    """Per stage, how many records of each source fall in its window (a source with none
    there is left out)."""
    out: dict[str, dict[str, int]] = {}
    for stage, source, n in con.execute("SELECT stage, source, n FROM a_stage_sources").fetchall():
        out.setdefault(stage, {})[source] = n
    return out


def no_evidence(
    g: GateDef, counts: dict[str, int], blind: dict[str, str] | None = None
) -> str | None:
    """Why none of a gate's detectors could judge anything in a stage's window (its
    sources are absent there, or no file can show a fact its verdict needs), or None
    when one of them could. A gate that judged nothing never passes ("no data is never
    a pass"). `blind`: detector -> what its files cannot show (runner.blind_detectors)."""
    # It depends only on which sources are present: with many stages, each set of
    # sources is worked out once.
    present = frozenset(t for t, n in counts.items() if n)
    return _no_evidence(g.id, present, tuple(sorted((blind or {}).items())))


@lru_cache(maxsize=4096)
def _no_evidence(
    gate_id: str, present: frozenset[str], blind_items: tuple[tuple[str, str], ...]
) -> str | None:
    detectors = catalog.detectors()
    blind = dict(blind_items)
    counts = dict.fromkeys(present, 1)
    gaps = []
    for name in BY_ID[gate_id].detectors:
        missing = cannottell.missing_needs(detectors[name], counts)
        if missing:
            gaps.append(
                " and ".join(cannottell.missing_label(n) for n in missing) + " in the stage window"
            )
        elif name in blind:
            gaps.append(blind[name])
        else:
            return None
    return min(gaps, key=len)


def judged_nothing(
    g: GateDef, measure: dict[str, Any], sample: int, cannot_tell: int
) -> str | None:
    """Why a gate that found nothing judged nothing in a stage, or None: its measure says
    it cannot judge (an `insufficient` column, e.g. an Origin gate without an allow-list),
    or every unit it had was `cannot_tell`. Either is `insufficient`, never a pass."""
    if measure.get("insufficient"):
        return str(measure["insufficient"])
    if g.kind.counts_units and sample == 0 and cannot_tell > 0:
        noun = "unit" if cannot_tell == 1 else "units"
        return f"all {_fmt_n(cannot_tell)} {noun} in this stage cannot tell"
    return None


@dataclass(frozen=True)
class Judgement:
    """A gate's reading of one stage (or of the records under a dashboard filter)."""

    gate: GateDef
    status: Status
    value: float | None
    threshold: float
    sample: int
    minimum: int
    failures: int
    no_evidence: str | None
    cannot_tell: int
    causes: tuple[tuple[str, int], ...] = ()  # failures by cause, for a gate declaring causes

    def as_dict(self) -> dict[str, Any]:
        """The judgement as the gates document carries it (JSON, reports, the dashboard)."""
        return dict(self._fields)

    @cached_property
    def _fields(self) -> dict[str, Any]:
        # Worked out once: a judgement is shared by the stages that read the same (100,000
        # stages of a quiet rollout are a few dozen judgements), each gets a copy.
        bounded = self.gate.kind.counts_units and self.failures == 0 and self.sample > 0
        causes = {"causes": [{"cause": c, "n": n} for c, n in self.causes]}
        return {
            "id": self.gate.id,
            "status": self.status,
            "value": self.value,
            "threshold": self.threshold,
            "sample": self.sample,
            "min_sample": self.minimum,
            "failures": self.failures,
            "upper_bound_95": min(1.0, 3 / self.sample) if bounded else None,
            "exercised": self.sample > 0,
            "no_evidence": self.no_evidence,
            "cannot_tell": self.cannot_tell,
        } | (causes if self.gate.causes else {})


@dataclass(frozen=True)
class Meter:
    """The evidence meter of a gate that needs a minimum sample: observed, in the last
    hour, needed, and the hours to go at that rate (None: not at that rate)."""

    observed: int
    last_hour: int
    needed: int
    eta_hours: float | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "observed": self.observed,
            "last_hour": self.last_hour,
            "needed": self.needed,
            "eta_hours": self.eta_hours,
        }


@dataclass(frozen=True)
class GateResult:
    """A gate as every surface shows it (`gates --json`, reports, the history, the
    dashboard): its judgement, the reason in words and, for a stage's evaluation, the
    evidence meter and the findings behind it. Made by `gate_result` alone; `as_dict` is
    the one shape of a gate in a document."""

    judgement: Judgement
    reason: str
    meter: Meter | None = None
    evidence: dict[str, Any] | None = None

    @property
    def status(self) -> Status:
        return self.judgement.status

    def as_dict(self) -> dict[str, Any]:
        out = self.judgement.as_dict()
        if self.meter is not None:
            out["meter"] = self.meter.as_dict()
        if self.evidence is not None:
            out["evidence"] = self.evidence
        out["reason"] = self.reason
        return out


def meter_of(g: GateDef, minimum: int, sample: int, seen: dict[str, Any] | None) -> Meter | None:
    """The evidence meter of a gate that needs a minimum sample (None for another):
    `seen`, the meter's sample observed and in the last hour (a_stage_samples)."""
    if not (g.meter and minimum):
        return None
    observed, rate = (int(seen["observed"]), int(seen["last_hour"])) if seen else (0, 0)
    eta = (minimum - sample) / rate if rate and sample < minimum else None
    return Meter(observed, rate, minimum, eta)


def gate_result(
    g: GateDef,
    measure: dict[str, Any],
    minimum: int,
    scope: str | None,
    config: Config,
    sources: dict[str, int],
    blind: dict[str, str],
    cannot_tell: int,
    meter: Meter | None = None,
) -> GateResult:
    """A gate judged (`judge`) with its reason: the one place a gate's result is made, for
    the decision and the dashboard alike. `meter`: a stage's evidence meter (`meter_of`),
    whose rate the reason of an insufficient gate quotes."""
    judged = judge(g, measure, minimum, scope, config, sources, blind, cannot_tell)
    shown = judged.as_dict() | ({"meter": meter.as_dict()} if meter else {})
    return GateResult(judged, reason(shown, config), meter)


def causes_of(measure: dict[str, Any]) -> tuple[tuple[str, int], ...]:
    """A measure's failures by cause (`-- causes: true`), most first: hashable, so the
    set-based evaluation judges once per distinct breakdown."""
    return tuple(
        (str(c["cause"] or "no cause given"), int(c["n"])) for c in measure.get("causes") or ()
    )


def judge(
    g: GateDef,
    measure: dict[str, Any],
    minimum: int,
    scope: str | None,
    config: Config,
    sources: dict[str, int],
    blind: dict[str, str],
    cannot_tell: int,
) -> Judgement:
    """The one judge of a gate's measure, for the decision and the dashboard alike.
    `measure`: the gate query's row; `sources`: records per source in what was measured;
    `blind`: detectors no file can judge; `cannot_tell`: its detectors' units there that
    no file could show."""
    value, sample = measure.get("value"), int(measure.get("sample") or 0)
    failures = g.kind.failures(measure)
    status = status_of(g, value, sample, failures, minimum, scope, config)
    why = no_evidence(g, sources, blind) or judged_nothing(g, measure, sample, cannot_tell)
    if why and status == Status.PASS:
        status = Status.INSUFFICIENT
    return Judgement(
        gate=g,
        status=status,
        value=value,
        threshold=g.kind.threshold(config),
        sample=sample,
        minimum=minimum,
        failures=failures,
        no_evidence=why if status == Status.INSUFFICIENT else None,
        cannot_tell=cannot_tell,
        causes=causes_of(measure) if g.causes else (),
    )


def _duration(hours: float) -> str:
    minutes = round(hours * 60)
    if minutes < 60:
        return f"{minutes} min"
    h, m = divmod(minutes, 60)
    return f"{h} h {m} min" if h < 48 else f"{h / 24:.1f} days"


def reason(gate: dict[str, Any], config: Config) -> str:
    text = _reason(gate, config)
    blind = gate.get("cannot_tell") or 0
    if blind and not gate.get("no_evidence"):
        text += f"; {_fmt_n(blind)} {'unit' if blind == 1 else 'units'} in this stage cannot tell"
    return text


def _reason(gate: dict[str, Any], config: Config) -> str:
    g = BY_ID[gate["id"]]
    v, n, f = gate["value"], gate["sample"], gate["failures"]
    if gate["status"] == Status.NOT_APPLICABLE:
        return f"{g.title}: not applicable to this scope (applies to {', '.join(g.scopes)})"
    if gate["status"] == Status.INSUFFICIENT and gate.get("no_evidence"):
        return f"{g.title}: no evidence: {gate['no_evidence']}"
    if v is None or (gate["status"] == Status.PASS and not n and not g.kind.counts):
        return f"{g.title}: not exercised (no {g.sample_noun})"
    if gate["status"] == Status.INSUFFICIENT:
        text = f"{g.title}: {_fmt_n(n)} of {_fmt_n(gate['min_sample'])} {g.sample_noun}"
        eta = gate.get("meter", {}).get("eta_hours")
        if eta is not None:
            text += f", about {_duration(eta)} more at the last hour's rate"
        return text
    # Numbers as display_value and display_threshold give them: the tiles' numbers.
    text = g.kind.reading(g, v, n, f, display_value(gate), display_threshold(gate))
    causes = gate.get("causes")
    if causes:
        # "; " between causes: a cause may itself hold a comma
        text += " (" + "; ".join(f"{_fmt_n(c['n'])} {c['cause']}" for c in causes) + ")"
    return text


# How every surface (CLI, dashboard, reports) names and formats a gate: by its kind,
# never by the gate, so a new gate's SQL header is all it needs.


def title(gate_id: str) -> str:
    """A gate's title, from its SQL header."""
    g = BY_ID.get(gate_id)
    return g.title if g else gate_id.replace("_", " ").capitalize()


def display_value(gate: dict[str, Any]) -> str:
    """A gate's measured value as people read it (tiles, tables, reports, reasons)."""
    v = gate["value"]
    if v is None:
        return "—"
    return BY_ID[gate["id"]].kind.show(v)


def display_threshold(gate: dict[str, Any]) -> str:
    return BY_ID[gate["id"]].kind.show_threshold(gate["threshold"])


def display_bound(gate: dict[str, Any]) -> str:
    """The 95 % upper bound on the failure rate when none was seen, or "—" (also when it
    is 100 %: a bound that excludes nothing)."""
    b = gate.get("upper_bound_95")
    if b is None or b >= 1:
        return "—"
    return f"< {_percent(b)}"


# A pass that judged nothing is no pass to look at: it reads "not exercised".
NOT_EXERCISED = "not exercised"


def display_status(gate: dict[str, Any]) -> str:
    """The status as shown: "not exercised" for a pass on a sample of 0."""
    if gate["status"] == Status.PASS and not gate.get("sample"):
        return NOT_EXERCISED
    return str(gate["status"]).replace("_", " ")


@cache
def _input_tables(gate_id: str) -> frozenset[str]:
    """The record tables a gate's detectors read."""
    detectors = catalog.detectors()
    return frozenset(
        t for d in BY_ID[gate_id].detectors for need in detectors[d].needs for t in need.split("|")
    )


def _stale_inputs(g: GateDef, behind: list[dict[str, Any]]) -> list[str]:
    """The stale sources among a gate's detectors' inputs, as reason text."""
    if not behind:
        return []
    tables = _input_tables(g.id)
    return [
        f"{e['source']} stale (newest {e['newest']}, "
        f"{freshness.show_seconds(e['behind_seconds'])} behind {e['behind']})"
        for e in behind
        if e["table"] in tables
    ]


def measures(
    con: duckdb.DuckDBPyConnection, config: Config, f: Filters | None = None
) -> dict[str | None, dict[str, dict[str, Any]]]:
    """Every gate's measure from the gate facts: per stage, or (`f`) over the facts the
    dashboard's filter keeps, under the key None. The same query either way: a measure is
    written once, in its gate's SQL file."""
    named.prepare(con, "facts")
    values = {
        **params.from_config(config),
        "by_stage": f is None,
        "flt": (f or Filters()).param(),
    }
    out: dict[str | None, dict[str, dict[str, Any]]] = {}
    for q in catalog.load("gates"):
        g = BY_ID[q.name]
        gate_values = {**values, "detectors": list(g.detectors), "meter": g.meter}
        cur = con.execute(q.sql, params.bind(q, gate_values))
        cols = [d[0] for d in cur.description]
        if g.causes and "causes" not in cols:
            q.header.fail("causes", "the query returns no `causes` column")
        for row in cur.fetchall():
            rec = dict(zip(cols, row, strict=True))
            out.setdefault(rec["stage"], {})[q.name] = rec
    return out


def under_filter(
    con: duckdb.DuckDBPyConnection, config: Config, f: Filters, scope: str | None = None
) -> list[GateResult]:
    """Every gate, in display order, judged on the gate facts the dashboard's filter
    keeps: its own measure query (`measures`) and the one judge (`gate_result`), so under
    a stage filter alone it equals `replaygate gates --stage S`, and under revision,
    server, client or time filters it is the same measure for that slice. What could be
    judged: the stage's window and its units no file could show; else the whole database,
    and the units no file could show that the filter keeps (by their session and time)."""
    m = measures(con, config, f).get(None, {})
    minimums = min_samples(config)
    unjudged: dict[str, int] = {}
    if f.stage:
        sources = stage_sources(con).get(f.stage, {})
        for e in runner.cannot_tell_by_stage(con).get(f.stage, []):
            unjudged[e["detector"]] = unjudged.get(e["detector"], 0) + e["units"]
    elif not f.active():
        sources = runner.table_counts(con)
        for d, entries in runner.cannot_tell(con).items():
            unjudged[d] = sum(e["units"] for e in entries)
    else:
        sources = runner.table_counts(con)
    values = params.from_config(config)
    blind = runner.blind_detectors(con)
    return [
        gate_result(
            g,
            m.get(g.id, {}),
            minimums[g.id],
            scope,
            config,
            sources,
            blind,
            sum(unjudged.get(d, 0) for d in g.detectors)
            if f.stage or not f.active()
            else runner.cannot_tell_under(con, g.detectors, f.param(), values),
        )
        for g in GATES
    ]


def _meters(con: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dict[str, Any]]:
    rows = con.execute(
        "SELECT sample, stage, n, n_last_hour FROM a_stage_samples WHERE revision IS NULL"
    ).fetchall()
    return {(s, stage): {"observed": n, "last_hour": lh} for s, stage, n, lh in rows}


# A finding a gate counts: not one of `replaygate probe`'s sessions, or one `probe_gates`
# counts (params.probe_counted), as the gate facts do (queries/sql/facts/gate_facts.sql).
_COUNTED = """(list_contains($probe_facts, 'findings') OR list_contains($probe_detectors, detector)
     OR session_hmac IS NULL
     OR session_hmac NOT IN (SELECT session_hmac FROM a_sessions
                             WHERE is_probe(client_name, principal)))"""


def _probe_values(config: Config) -> dict[str, list[str]]:
    return params.probe_counted(config)


class _Prefetch:
    """What `_findings_refs` and `by_revision` read per stage, read for every stage at
    once."""

    LIMIT = 20

    def __init__(self, con: duckdb.DuckDBPyConnection, config: Config) -> None:
        units = ", ".join(runner.UNIT_COLUMNS)
        probe = _probe_values(config)
        cur = con.execute(
            f"""SELECT stage, detector, severity, ts, {units},
                       count(*) OVER (PARTITION BY stage, detector) AS rg_n
                FROM findings WHERE stage IS NOT NULL AND {_COUNTED}
                QUALIFY row_number() OVER (PARTITION BY stage, detector
                                           ORDER BY ts, {units}, severity) <= {self.LIMIT}""",
            probe,
        )
        cols = [d[0] for d in cur.description]
        self._refs: dict[tuple[str, str], tuple[int, list[dict[str, Any]]]] = {}
        for row in cur.fetchall():
            rec = dict(zip(cols, row, strict=True))
            key = (rec.pop("stage"), rec["detector"])
            n = int(rec.pop("rg_n"))
            self._refs.setdefault(key, (n, []))[1].append(rec)
        self.with_findings = {stage for stage, _ in self._refs}
        self.found: dict[str, list[tuple[str, str, int]]] = {}
        for stage, rev, det, n in con.execute(
            f"""SELECT f.stage, coalesce(a.protocol_version,
                           CASE WHEN f.dispatch_id IS NOT NULL OR f.idempotency_key IS NOT NULL
                                THEN sessionless_revision() END, 'unknown') AS revision,
                      f.detector, count(*)
               FROM findings f LEFT JOIN a_sessions a USING (session_hmac)
               WHERE f.stage IS NOT NULL AND gated(f.detail) AND {_COUNTED} GROUP BY ALL""",
            probe,
        ).fetchall():
            self.found.setdefault(stage, []).append((rev, det, n))
        self.samples: dict[str, list[tuple[str, str, int, Any]]] = {}
        for stage, rev, sample, n, p99 in con.execute(
            """SELECT stage, revision, sample, n, p99 FROM a_stage_samples
               WHERE revision IS NOT NULL"""
        ).fetchall():
            self.samples.setdefault(stage, []).append((rev, sample, n, p99))
        revisions = sorted(
            {r for v in self.found.values() for r, *_ in v}
            | {r for v in self.samples.values() for r, *_ in v}
        )
        self.resumable: dict[str, bool] = dict(
            con.execute(
                "SELECT r, has_resumption(r) FROM unnest($revs::VARCHAR[]) t(r)",
                {"revs": revisions},
            ).fetchall()
        )

    def refs(self, stage: str, detectors: tuple[str, ...]) -> dict[str, Any]:
        if stage not in self.with_findings:
            return {"detectors": list(detectors), "count": 0, "findings": []}
        total, rows = 0, []
        for d in detectors:
            n, got = self._refs.get((stage, d), (0, []))
            total += n
            rows += got
        # The order of one stage's query (_findings_refs), ties broken by the unit.
        rows.sort(key=_ref_order)
        refs = [{**r, "ts": _iso(r["ts"])} for r in rows[: self.LIMIT]]
        return {"detectors": list(detectors), "count": total, "findings": refs}


def _ref_order(r: dict[str, Any]) -> tuple[Any, ...]:
    """A finding's place among a stage's evidence, as `_findings_refs`'s ORDER BY puts it
    (time, detector, then the unit, NULLs last, then the severity: two findings of one unit
    and time differ by it, and the list is cut at LIMIT)."""
    return (
        r["ts"],
        r["detector"],
        *((r[c] is None, r[c] if r[c] is not None else 0) for c in runner.UNIT_COLUMNS),
        r["severity"],
    )


def _findings_refs(
    con: duckdb.DuckDBPyConnection,
    stage: str,
    detectors: tuple[str, ...],
    config: Config,
    limit: int = 20,
) -> dict[str, Any]:
    probe = _probe_values(config)
    cur = con.execute(
        f"""SELECT detector, severity, ts, {", ".join(runner.UNIT_COLUMNS)}
           FROM findings WHERE stage = $stage AND list_contains($d, detector) AND {_COUNTED}
           ORDER BY ts, detector, {", ".join(runner.UNIT_COLUMNS)}, severity
           LIMIT $limit""",
        {"stage": stage, "d": list(detectors), "limit": limit, **probe},
    )
    cols = [d[0] for d in cur.description]
    refs = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for r in refs:
        r["ts"] = _iso(r["ts"])
    total = one_row(
        con.execute(
            "SELECT count(*) FROM findings WHERE stage = $stage AND list_contains($d, detector) "
            f"AND {_COUNTED}",
            {"stage": stage, "d": list(detectors), **probe},
        )
    )[0]
    return {"detectors": list(detectors), "count": total, "findings": refs}


def evaluate(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    stage: str | None = None,
    all_stages: bool = False,
) -> dict[str, Any]:
    """Gate table and decision per stage (the newest stage unless told otherwise)."""
    stages = con.execute(
        """SELECT stage, scope, start_ts, end_ts, rollback_ts, release, stage_name
           FROM a_stages ORDER BY start_ts, stage"""
    ).fetchall()
    if not stages:
        return {"stages": [], "note": "no rollout log: no stages to gate"}
    names = [s[0] for s in stages]
    if stage is not None and stage not in names:
        stage = resolve_stage(con, stage)
    chosen = set(names) if all_stages else {stage or names[-1]}
    if len(chosen) > 1:
        # Millions of small dicts and lists and no cycle among them: the collector's
        # passes over them found nothing and took half the time at 100,000 stages.
        with _collector_paused():
            return {"stages": _evaluate_set(con, config, _Inputs(con, config), stages)}
    inputs = _Inputs(con, config)
    out = []
    for name, scope, start, end, rollback_ts, release, stage_name in stages:
        if name not in chosen:
            continue
        behind, warnings = inputs.staleness(end)
        results = []
        for g in GATES:
            # units of its detectors in this stage that no file could show
            unjudged_units = sum(
                e["units"] for e in inputs.unjudged.get(name, []) if e["detector"] in g.detectors
            )
            res = inputs.result(
                g,
                inputs.measured.get(name, {}).get(g.id, {}),
                scope,
                inputs.sources.get(name, {}),
                unjudged_units,
                inputs.meters.get((g.meter, name)) if g.meter else None,
            )
            lagging = _stale_inputs(g, behind) if res.status == Status.INSUFFICIENT else []
            results.append(
                replace(
                    res,
                    evidence=_findings_refs(con, name, g.detectors, config),
                    reason=res.reason + ("; " + ", ".join(lagging) if lagging else ""),
                )
            )
        failing = [r for r in results if r.status == Status.FAIL]
        short = [r for r in results if r.status == Status.INSUFFICIENT]
        out.append(
            _stage_doc(
                (name, scope, start, end, rollback_ts, release, stage_name),
                inputs,
                Decision.of([r.status for r in results]),
                # everything that stands between this stage and PROCEED
                [r.reason for r in failing + short],
                list(warnings),
                [r.as_dict() for r in results],
                by_revision(con, name, scope, config),
            )
        )
    return {"stages": out}


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Inputs:
    """What the gates of every stage are judged from, read once per evaluation."""

    def __init__(self, con: duckdb.DuckDBPyConnection, config: Config) -> None:
        self.config = config
        self.measured = measures(con, config)
        self.meters = _meters(con)
        self.minimums = min_samples(config)
        self.fresh = freshness.sources(con)
        # The proxy log's newest plausible record: one dated years ahead does not count.
        self.data_end = self.fresh["proxy"]["newest"]
        self.fleet_warnings = freshness.warnings(self.fresh)
        self.sources = stage_sources(con)
        self.blind = runner.blind_detectors(con)
        self.unjudged = runner.cannot_tell_by_stage(con)
        # Stages that end at the same time have the same stale sources.
        self._staleness: dict[Any, tuple[list[dict[str, Any]], list[str]]] = {}

    def result(
        self,
        g: GateDef,
        measure: dict[str, Any],
        scope: str | None,
        sources: dict[str, int],
        cannot_tell: int,
        seen: dict[str, Any] | None,
    ) -> GateResult:
        """A gate of a stage (`gate_result`) with its evidence meter; `seen`: the meter's
        sample observed in the stage (a_stage_samples)."""
        minimum = self.minimums[g.id]
        meter = meter_of(g, minimum, int(measure.get("sample") or 0), seen)
        return gate_result(
            g, measure, minimum, scope, self.config, sources, self.blind, cannot_tell, meter
        )

    def staleness(self, end: Any) -> tuple[list[dict[str, Any]], list[str]]:
        """Sources that stopped before the window's end (the data's newest time for an
        open stage): what they would have shown is missing from every gate reading them."""
        if end not in self._staleness:
            if end is None:
                self._staleness[end] = (freshness.stale(self.fresh), list(self.fleet_warnings))
            else:
                late = freshness.stale(self.fresh, until=end)
                self._staleness[end] = (late, [freshness.describe(e) for e in late])
        return self._staleness[end]


def _stage_doc(
    row: tuple[Any, ...],
    inputs: _Inputs,
    decision: Decision,
    reasons: list[str],
    warnings: list[str],
    gates: list[dict[str, Any]],
    revisions: list[dict[str, Any]],
) -> dict[str, Any]:
    name, scope, start, end, rollback_ts, release, stage_name = row
    return {
        "stage": name,
        "release": release,
        "stage_name": stage_name,
        "scope": scope,
        "window": {
            "start": _iso(start),
            "end": _iso(end),
            "open": end is None,
            "data_end": _iso(inputs.data_end),
        },
        "rolled_back": rollback_ts is not None,
        "decision": decision,
        "reasons": reasons,
        "warnings": warnings,
        "gates": gates,
        "cannot_tell": inputs.unjudged.get(name, []),
        "by_revision": revisions,
    }


def _evaluate_set(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    inputs: _Inputs,
    stages: list[tuple[Any, ...]],
) -> list[dict[str, Any]]:
    """Every stage at once, each gate judged once per distinct set of what its judgement
    reads (measure, scope, sources present, units that cannot tell, meter, stale inputs)
    rather than once per stage: 100,000 stages of a quiet rollout are a few dozen
    readings. The same judge, reasons and meter as one stage's evaluation; only the
    lookups are shared, and a test holds the two equal."""
    pre = _Prefetch(con, config)
    unjudged_units: dict[tuple[str, str], int] = {}
    for name, entries in inputs.unjudged.items():
        for g in GATES:
            n = sum(e["units"] for e in entries if e["detector"] in g.detectors)
            if n:
                unjudged_units[name, g.id] = n
    present: dict[str, frozenset[str]] = {
        name: frozenset(t for t, n in counts.items() if n)
        for name, counts in inputs.sources.items()
    }
    readings: dict[tuple[Any, ...], GateResult] = {}
    lagging: dict[tuple[Any, str], str] = {}
    decided: dict[tuple[int, ...], tuple[Decision, list[str]]] = {}
    slots: dict[tuple[Any, ...], int] = {}
    nothing: frozenset[str] = frozenset()
    out = []
    for row in stages:
        name, scope, _start, end = row[:4]
        have = present.get(name, nothing)
        measured = inputs.measured.get(name, {})
        behind, warnings = inputs.staleness(end)
        gates, keys = [], []
        for g in GATES:
            m = measured.get(g.id, {})
            seen = inputs.meters.get((g.meter, name)) if g.meter else None
            key = (
                g.id,
                scope,
                m.get("value"),
                m.get("sample"),
                m.get("failures"),
                m.get("insufficient"),
                causes_of(m) if g.causes else (),
                have,
                unjudged_units.get((name, g.id), 0),
                (seen["observed"], seen["last_hour"]) if seen else None,
            )
            got = readings.get(key)
            if got is None:
                got = readings[key] = inputs.result(
                    g, m, scope, dict.fromkeys(have, 1), key[8], seen
                )
            text = got.reason
            if got.status == Status.INSUFFICIENT and behind:
                late = (end, g.id)
                if late not in lagging:
                    stale = _stale_inputs(g, behind)
                    lagging[late] = "; " + ", ".join(stale) if stale else ""
                text += lagging[late]
            gates.append(replace(got, evidence=pre.refs(name, g.detectors), reason=text))
            keys.append(slots.setdefault((key, text), len(slots)))
        sig = tuple(keys)
        if sig not in decided:
            drivers = [r.reason for r in gates if r.status == Status.FAIL] + [
                r.reason for r in gates if r.status == Status.INSUFFICIENT
            ]
            decided[sig] = (Decision.of([r.status for r in gates]), drivers)
        decision, drivers = decided[sig]
        revisions = (
            by_revision(con, name, scope, config, pre)
            if name in pre.found or name in pre.samples
            else []
        )
        out.append(
            _stage_doc(
                row,
                inputs,
                decision,
                list(drivers),
                list(warnings),
                [r.as_dict() for r in gates],
                revisions,
            )
        )
    return out


# A release argument that means "the stages of a rollout log without releases".
NO_RELEASE = "-"


def resolve_stage(
    con: duckdb.DuckDBPyConnection, stage: str | None = None, release: str | None = None
) -> str | None:
    """The key of the stage meant by a name and/or a release (see a_stages): a key as
    shown (`name@release`), a name unique across releases, a name within `release` (`-`:
    the stages without a release), or with a release alone, that release's newest stage.
    None when neither is given."""
    if stage is None and release is None:
        return None
    rows: list[tuple[str, str | None, str]] = con.execute(
        """SELECT stage, release, stage_name FROM a_stages
           WHERE CASE WHEN $none THEN release IS NULL
                      WHEN $release IS NULL THEN true
                      ELSE release = $release END
             AND ($stage IS NULL OR stage_name = $stage
                  OR ($release IS NULL AND NOT $none AND stage = $stage))
           ORDER BY start_ts, stage""",
        {
            "stage": stage,
            "release": None if release == NO_RELEASE else release,
            "none": release == NO_RELEASE,
        },
    ).fetchall()
    if release is not None and stage is None:
        if not rows:
            raise ReplaygateError(f"no stage of release {release!r} in the rollout log")
        return rows[-1][0]
    exact = [r for r in rows if r[0] == stage and release is None]
    if exact:
        return exact[0][0]
    if len(rows) == 1:
        return rows[0][0]
    if len(rows) > 1:
        releases = ", ".join(str(r[1]) for r in rows)
        raise ReplaygateError(
            f"stage {stage!r} exists in several releases ({releases}): give --release"
        )
    known = [r[0] for r in con.execute("SELECT stage FROM a_stages ORDER BY start_ts").fetchall()]
    where = f" of release {release!r}" if release is not None else ""
    raise ReplaygateError(f"no stage named {stage!r}{where} (stages: {', '.join(known)})")


ROLLBACK_NOT_VERIFIABLE = "rollback of {stage}: not verifiable ({why})"
# Why a rollback with stream records in its hygiene window is not verifiable either: a
# check found nothing, but some of its units it could not judge ("no data is never a pass").
HYGIENE_UNDECIDED = "{n} {noun} its hygiene checks cannot tell ({checks})"


def by_revision(
    con: duckdb.DuckDBPyConnection,
    stage: str,
    scope: str | None,
    config: Config,
    pre: _Prefetch | None = None,
) -> list[dict[str, Any]]:
    """Count gates by protocol revision: replay gates mean nothing without resumption."""
    if pre is not None:
        found = pre.found.get(stage, [])
        samples = pre.samples.get(stage, [])
        revisions = sorted({r for r, *_ in found} | {r for r, *_ in samples})
        resumable = {r: pre.resumable[r] for r in revisions}
    else:
        found, samples, revisions, resumable = _revision_facts(con, stage, config)
    return _by_revision(stage, scope, config, found, samples, revisions, resumable)


def _revision_facts(
    con: duckdb.DuckDBPyConnection, stage: str, config: Config
) -> tuple[Any, Any, Any, Any]:
    found = con.execute(
        f"""SELECT coalesce(a.protocol_version,
                           CASE WHEN f.dispatch_id IS NOT NULL OR f.idempotency_key IS NOT NULL
                                THEN sessionless_revision() END, 'unknown') AS revision,
                  f.detector, count(*)
           FROM findings f LEFT JOIN a_sessions a USING (session_hmac)
           WHERE f.stage = $stage AND gated(f.detail) AND {_COUNTED} GROUP BY ALL""",
        {"stage": stage, **_probe_values(config)},
    ).fetchall()
    samples = con.execute(
        """SELECT revision, sample, n, p99 FROM a_stage_samples
           WHERE stage = $stage AND revision IS NOT NULL""",
        {"stage": stage},
    ).fetchall()
    revisions = sorted({r for r, *_ in found} | {r for r, *_ in samples})
    resumable = dict(
        con.execute(
            "SELECT r, has_resumption(r) FROM unnest($revs::VARCHAR[]) t(r)", {"revs": revisions}
        ).fetchall()
    )
    return found, samples, revisions, resumable


def _by_revision(
    stage: str,
    scope: str | None,
    config: Config,
    found: list[Any],
    samples: list[Any],
    revisions: list[str],
    resumable: dict[str, bool],
) -> list[dict[str, Any]]:
    if not revisions:
        return []
    sample_of = {(r, s): (n, p) for r, s, n, p in samples}
    minimums = min_samples(config)
    out = []
    for rev in revisions:
        gates = {}
        for g in GATES:
            if not g.kind.by_revision:
                continue
            if g.replay and not resumable[rev]:
                gates[g.id] = {"status": Status.NOT_APPLICABLE, "value": None, "sample": None}
                continue
            n_found = sum(c for r, d, c in found if r == rev and d in g.detectors)
            n, p99 = sample_of.get((rev, g.meter), (0, None)) if g.meter else (None, None)
            measure = {"value": g.kind.revision_value(n_found, p99), "failures": n_found}
            value = measure["value"]
            status = status_of(
                g, value, n or 0, g.kind.failures(measure), minimums[g.id], scope, config
            )
            gates[g.id] = {"status": status, "value": value, "sample": n}
        out.append({"revision": rev, "gates": gates})
    return out


def rollback_verification(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """After each rollback: the three hygiene checks and whether resumption was really
    disabled for new streams. `status` is verified, not verified (a check found
    something) or not verifiable (no stream activity in the hygiene window, or a check
    found nothing but could not judge some of its units there: `cannot_tell` per check,
    `unverifiable` says why)."""
    rows = con.execute(
        """SELECT s.stage, h.t0, h.t1, s.hygiene_end FROM a_stages s JOIN a_hygiene h USING (stage)
           ORDER BY h.t0"""
    ).fetchall()
    out = []
    for stage, t0, t1, hygiene_end in rows:
        checks = {}
        for det in (
            "rollback_resumable_new_stream",
            "rollback_cursor_dropped",
            "rollback_post_storm",
        ):
            n = one_row(
                con.execute(
                    """SELECT count(*) FROM findings WHERE detector = $d
                   AND json_extract_string(detail, '$.rolled_back_stage') = $s""",
                    {"d": det, "s": stage},
                )
            )[0]
            checks[det] = n
        undecided = {det: runner.undecided_between(con, det, t0, t1) for det in checks}
        new_streams = one_row(
            con.execute(
                "SELECT count(*) FROM a_streams WHERE opened_ts >= $t0 AND opened_ts < $t1",
                {"t0": t0, "t1": t1},
            )
        )[0]
        old_disconnects = one_row(
            con.execute(
                """SELECT count(*) FROM a_recoveries r JOIN a_streams s
                 USING (session_hmac, generation, stream_id)
               WHERE s.opened_ts < $t0 AND r.disc_ts >= $t0 AND r.disc_ts < $t1""",
                {"t0": t0, "t1": t1},
            )
        )[0]
        # No stream record in the window: the checks looked at nothing ("no data is never
        # a pass"), so the rollback is not verifiable rather than verified.
        activity = one_row(
            con.execute(
                "SELECT count(*) FROM streams WHERE in_window(ts, $t0, $t1)",
                {"t0": t0, "t1": t1},
            )
        )[0]
        why = None
        if activity == 0:
            status, why = "not verifiable", "no stream records in its hygiene window"
        elif any(checks.values()):
            status = "not verified"
        elif any(undecided.values()):
            n = sum(undecided.values())
            status = "not verifiable"
            why = HYGIENE_UNDECIDED.format(
                n=_fmt_n(n),
                noun="unit" if n == 1 else "units",
                checks=", ".join(d for d, k in undecided.items() if k),
            )
        else:
            status = "verified"
        out.append(
            {
                "stage": stage,
                "status": status,
                "stream_records_in_window": activity,
                "rollback_at": _iso(t0),
                "window_end": _iso(hygiene_end),
                "checks": checks,
                "cannot_tell": undecided,
                "unverifiable": why,
                "new_streams_in_window": new_streams,
                "new_streams_resumed": checks["rollback_resumable_new_stream"],
                "old_streams_disconnected_in_window": old_disconnects,
                "resumption_disabled_for_new_streams": checks["rollback_resumable_new_stream"] == 0,
                "verified": status == "verified",
            }
        )
    return out


def document(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    stage: str | None = None,
    all_stages: bool = False,
) -> dict[str, Any]:
    """`gates --json`: the evaluation, with rollback verification, and a stage whose
    rollback cannot be verified says so among its reasons."""
    doc = evaluate(con, config, stage=stage, all_stages=all_stages)
    doc["rollback_verification"] = rollback_verification(con)
    for judged in doc["stages"]:
        for rb in doc["rollback_verification"]:
            if rb["stage"] == judged["stage"] and rb["status"] == "not verifiable":
                judged["reasons"].append(
                    ROLLBACK_NOT_VERIFIABLE.format(stage=rb["stage"], why=rb["unverifiable"])
                )
    return doc
