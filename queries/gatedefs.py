"""The gates as their SQL headers declare them (queries/sql/gates/NN_<id>.sql): `GATES`,
their kinds (`KINDS`: how a measure reads as a status, its threshold, numbers and reasons)
and their minimum samples. It runs nothing: the evaluation is queries/gates.py, and the
configuration's gate names are checked against `GATES` here, below everything that runs
an analysis.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from replaygate.core.config import Config
from replaygate.core.errors import ReplaygateError

from . import catalog
from .outcome import Status


class Kind:
    """A kind of gate (`-- kind:` of its SQL header): how its measure reads as a status,
    what its threshold is, and how its numbers and reasons are written. Every surface asks
    the kind, never the gate, so a new gate's SQL header is all it needs."""

    name: ClassVar[str]
    # Its failures are units (findings or requests): an upper bound on the failure rate
    # when none was seen, and "all units cannot tell" when it had nothing else.
    counts_units: ClassVar[bool] = False
    # Read per protocol revision (by_revision): the count and p99 kinds.
    by_revision: ClassVar[bool] = False
    # Its value is a number of units (a count of 0 is a reading, not "not exercised");
    # the findings behind it may be more (a finding per observation of a unit).
    counts: ClassVar[bool] = False

    def __str__(self) -> str:
        return self.name

    def threshold(self, config: Config) -> float:
        raise NotImplementedError

    def failures(self, measure: dict[str, Any]) -> int:
        return 0

    def status(
        self, value: float | None, sample: int, failures: int, minimum: int, limit: float
    ) -> Status:
        if failures > 0:
            return Status.FAIL
        return Status.INSUFFICIENT if sample < minimum else Status.PASS

    def show(self, v: float) -> str:
        raise NotImplementedError

    def show_threshold(self, t: float) -> str:
        return f"{t:g}"

    def reading(self, g: GateDef, v: float, n: int, f: int, shown: str, limit: str) -> str:
        raise NotImplementedError

    def handled(self, sample: int, failures: int) -> tuple[int, int] | None:
        """What a tile says of its sample: (handled, of how many) for a share, else None."""
        return None

    def revision_value(self, found: int, p99: float | None) -> float | None:
        """Its value within one protocol revision (by_revision): findings, or the p99."""
        return found


class Count(Kind):
    name = "count"
    counts_units = True
    by_revision = True
    counts = True

    def threshold(self, config: Config) -> float:
        return 0

    def failures(self, measure: dict[str, Any]) -> int:
        return int(measure.get("value") or 0)

    def show(self, v: float) -> str:
        return f"{int(v):,}"

    def reading(self, g: GateDef, v: float, n: int, f: int, shown: str, limit: str) -> str:
        return f"{g.title}: {_fmt_n(v)} {g.noun(v)} (threshold {limit})"


class Share(Kind):
    name = "share"
    counts_units = True

    def threshold(self, config: Config) -> float:
        return 1.0

    def failures(self, measure: dict[str, Any]) -> int:
        return int(measure.get("failures") or 0)

    def show(self, v: float) -> str:
        return _percent(v)

    def handled(self, sample: int, failures: int) -> tuple[int, int] | None:
        return sample - failures, sample

    def show_threshold(self, t: float) -> str:
        return f"{_percent(t)} handled"

    def reading(self, g: GateDef, v: float, n: int, f: int, shown: str, limit: str) -> str:
        return f"{g.title}: {_fmt_n(f)} of {_fmt_n(n)} {g.noun(n)} (threshold {limit})"


class P99(Kind):
    name = "p99"
    by_revision = True

    def threshold(self, config: Config) -> float:
        return config.recovery_threshold_s

    def status(
        self, value: float | None, sample: int, failures: int, minimum: int, limit: float
    ) -> Status:
        if sample < minimum:
            return Status.INSUFFICIENT
        return Status.FAIL if value is not None and value >= limit else Status.PASS

    def show(self, v: float) -> str:
        return f"{v:.2f} s"

    def revision_value(self, found: int, p99: float | None) -> float | None:
        return p99

    def show_threshold(self, t: float) -> str:
        return f"< {t:g} s"

    def reading(self, g: GateDef, v: float, n: int, f: int, shown: str, limit: str) -> str:
        return f"{g.title}: p99 {shown} over {_fmt_n(n)} recoveries (threshold {limit})"


class Peak(Kind):
    name = "peak"

    def threshold(self, config: Config) -> float:
        return config.reconnect_budget_qps

    def status(
        self, value: float | None, sample: int, failures: int, minimum: int, limit: float
    ) -> Status:
        return Status.FAIL if (value or 0) > limit else Status.PASS

    def show(self, v: float) -> str:
        return f"{v:.2f}/s".replace(".00/", "/")

    def show_threshold(self, t: float) -> str:
        return f"≤ {t:g}/s"

    def reading(self, g: GateDef, v: float, n: int, f: int, shown: str, limit: str) -> str:
        return f"{g.title}: peak {shown} reconnects in a 10 s window (budget {limit})"


KINDS: dict[str, Kind] = {k.name: k() for k in (Count, Share, P99, Peak)}


@dataclass(frozen=True)
class GateDef:
    """A gate as its SQL header declares it (queries/sql/gates/NN_<id>.sql)."""

    id: str
    title: str
    kind: Kind
    detectors: tuple[str, ...]
    sample_noun: str  # what the sample counts
    failure_noun: str  # what a unit of the measure is
    failure_noun_one: str  # the same, for a count of one
    scopes: tuple[str, ...]
    replay: bool  # meaningless for sessionless revisions (no resumption)
    meter: str | None  # a_stage_samples sample behind the evidence meter
    min_sample: int  # default minimum sample ([min_samples] overrides it)
    page: str | None = None  # the dashboard page whose tiles show it (`-- page:`)
    causes: bool = False  # its failures are broken down by cause (`-- causes: true`)

    def noun(self, n: float) -> str:
        return self.failure_noun_one if n == 1 else self.failure_noun


ALL_SCOPES = ("shadow", "read", "write")


def _gate(q: catalog.Query) -> GateDef:
    h = q.header
    if h["kind"] not in KINDS:
        h.fail("kind", f"{h['kind']!r} is not one of {', '.join(KINDS)}")
    for d in h.list("detectors"):
        if d not in catalog.detectors():
            h.fail("detectors", f"no detector named {d!r}")
    for s in h.list("scopes"):
        if s not in ALL_SCOPES:
            h.fail("scopes", f"{s!r} is not one of {', '.join(ALL_SCOPES)}")
    unit = h["unit"]
    return GateDef(
        id=q.name,
        title=h["title"],
        kind=KINDS[h["kind"]],
        detectors=h.list("detectors"),
        sample_noun=h["sample"],
        failure_noun=unit,
        failure_noun_one=h.text("unit_one", unit),
        scopes=h.list("scopes") or ALL_SCOPES,
        replay=h.flag("replay"),
        meter=h.text("meter") or None,
        min_sample=h.count("min_sample"),
        page=h.text("page") or None,
        causes=h.flag("causes"),
    )


GATES = tuple(_gate(q) for q in catalog.load("gates"))
BY_ID = {g.id: g for g in GATES}


def min_samples(config: Config) -> dict[str, int]:
    """Minimum sample per gate: the header's default unless the configuration overrides it."""
    unknown = sorted(set(config.min_samples) - set(BY_ID))
    if unknown:
        raise ReplaygateError(
            f"config: unknown gate {unknown[0]!r} in [min_samples] (gates: {', '.join(BY_ID)})"
        )
    return {g.id: int(config.min_samples.get(g.id, g.min_sample)) for g in GATES}


def effective_settings(config: Config) -> dict[str, Any]:
    """Every setting in force, defaults included, and its SHA-256 (for audit reports)."""
    settings = {**config.as_dict(), "min_samples": min_samples(config)}
    blob = json.dumps(settings, sort_keys=True).encode()
    return {"settings": settings, "sha256": hashlib.sha256(blob).hexdigest()}


def _fmt_n(x: float) -> str:
    return f"{x:,.0f}" if isinstance(x, int) or float(x).is_integer() else f"{x:,.2f}"


def _percent(x: float) -> str:
    pct = x * 100
    if pct in (0, 100):
        return f"{pct:.0f} %"
    if pct >= 10:
        return f"{pct:.1f} %"
    return f"{pct:.2g} %"
