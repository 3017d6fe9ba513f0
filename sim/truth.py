"""Expected gate statuses and decisions per stage, from the simulator's own counters.

This is an independent statement of the gate rules of detectors.md (the SQL in
queries/ is the other); the tests hold one against the other.
"""

from __future__ import annotations

import math
from collections import Counter

from replaygate.core.config import Config
from replaygate.queries.gatedefs import min_samples

COUNT_GATES = {
    "cross_stream_acceptances": ("cross_stream_acceptance",),
    "duplicate_dispatches": ("duplicate_dispatch",),
    "silent_truncations": ("silent_truncation", "dropped_terminal"),
    "auth_binding": ("auth_subject_mismatch", "session_after_terminal"),
    "write_idempotency": ("missing_idempotency_key",),
    # Answers the server produced that never reached their client: a stage none of whose
    # sources can show delivery (no completed stream, no answer whose size a proxy
    # logged) cannot be judged.
    "lost_responses": ("undelivered_result",),
}
SCOPES = {"recovery_p99": ("read", "write"), "write_idempotency": ("write",)}


# Partial blindness, as the simulator states it: a proxy log that cannot show something
# another proxy log shows (a session id; an initialize) could hold a unit's deciding
# evidence when its rows fall within the unit's evidence window, give or take this clock
# skew: a session's DELETE within its life (first ledger row to TERMINATED), a client's
# re-initialize within the re-init window after its 404.
BLIND_SKEW_MS = 5_000
NAMES_SESSION, SHOWS_INIT = 2, 3  # places in Fleet.proxy_files' entries


def blind_proxy_logs(proxy_files: dict[str, list], shows: int) -> list[tuple[str, int, int]]:
    """(file name, first ms, last ms) of the proxy logs that cannot show what entry place
    `shows` says, when another one can (where none can, nothing is judged at all)."""
    if not any(v[shows] for v in proxy_files.values()):
        return []
    return sorted((n, v[0], v[1]) for n, v in proxy_files.items() if not v[shows])


def _meets(blind: list[tuple[str, int, int]], lo: float, hi: float) -> str | None:
    """The first (by name) of these logs whose rows meet [lo, hi], give or take the skew."""
    hits = [n for n, a, b in blind if a <= hi + BLIND_SKEW_MS and b >= lo - BLIND_SKEW_MS]
    return hits[0] if hits else None


def undecided_by_blind_logs(
    expect: list[dict],
    proxy_files: dict[str, list],
    life: dict[str, tuple[int, int]],
    reinit_window_ms: float,
) -> tuple[list[dict], list[dict]]:
    """Expected findings whose deciding evidence a blind proxy log could hold: a
    `delete_fabricated` is `cannot_tell` (its DELETE may be there); a `reinit_missing`
    "not re-initialized" is `cannot_tell` (its initialize may be there), and one also used
    after the 404 is still found, for that reason alone. `life`: session -> (first ledger
    row, TERMINATED) in ms. Returns (still expected, cannot_tell)."""
    no_session = blind_proxy_logs(proxy_files, NAMES_SESSION)
    no_init = blind_proxy_logs(proxy_files, SHOWS_INIT)
    kept, undecided = [], []
    for e in expect:
        unit, file, missing = e["unit"], None, ""
        span = life.get(unit.get("session_hmac") or "")
        if e["detector"] == "delete_fabricated" and span is not None:
            file, missing = _meets(no_session, *span), "proxy.session_hmac"
        elif e["detector"] == "reinit_missing" and "ts" in unit:
            file = _meets(no_init, unit["ts"], unit["ts"] + reinit_window_ms)
            missing = "re-initialize"
            if file and unit.get("detail.reason") != "not re-initialized":
                e, file = {**e, "unit": {**unit, "detail.reason": "used after the 404"}}, None
        if file:
            undecided.append(
                {"detector": e["detector"], "stage": e["stage"], "missing": missing, "file": file}
            )
        else:
            kept.append(e)
    return kept, undecided


def quantile_cont(values: list[float], q: float) -> float:
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def peak_qps(ts: list[int]) -> float:
    buckets = Counter(t // 10_000 for t in ts)
    return max(buckets.values()) / 10 if buckets else 0.0


def expected_decisions(fleet, expectations: list[dict], config: Config) -> dict:
    out = {}
    minimum = min_samples(config)
    delivered = fleet.delivered_by_stage()
    for stage in fleet.stages:
        stats = fleet.stats[stage.name]
        found = Counter(
            e["detector"] for e in expectations if e["stage"] == stage.name and not _ungated(e)
        )
        gates: dict[str, str] = {}
        samples = {
            "cross_stream_acceptances": delivered.get(stage.name, 0),
            "silent_truncations": stats.completed,
            "write_idempotency": stats.write_dispatches,
            "recovery_p99": len(stats.recoveries),
            "lost_responses": stats.completed + stats.sized_answers,
        }
        for gate, detectors in COUNT_GATES.items():
            value = sum(found[d] for d in detectors)
            gates[gate] = _status(value > 0, samples.get(gate, 0), minimum[gate])
        # A 404 whose client cannot be told apart (no principal, another live session of its
        # address and User-Agent) or whose session the log hid is judged neither way: a
        # stage with only such 404s cannot pass.
        judged_404 = stats.n404 - stats.undecided_404
        if found["reinit_missing"]:
            gates["reinit_after_404"] = "fail"
        elif not judged_404 and stats.undecided_404 + stats.hidden_404:
            gates["reinit_after_404"] = "insufficient"
        else:
            gates["reinit_after_404"] = "pass"
        # Served bad Origins fail; with no allow-list configured a stage that saw a foreign
        # Origin cannot be judged; refusals with another status than 403 are not gated.
        if found["invalid_origin_accepted"]:
            gates["invalid_origin_rejection"] = "fail"
        elif stats.unjudged_origin:
            gates["invalid_origin_rejection"] = "insufficient"
        else:
            gates["invalid_origin_rejection"] = "pass"
        gates["allowed_origin_refusals"] = "fail" if found["allowed_origin_refused"] else "pass"
        gates["raw_session_ids"] = "fail" if stats.raw_ids else "pass"
        gates["reconnect_qps"] = (
            "fail" if peak_qps(stats.reconnect_ts) > config.reconnect_budget_qps else "pass"
        )
        n = len(stats.recoveries)
        if n < minimum["recovery_p99"]:
            gates["recovery_p99"] = "insufficient"
        else:
            p99 = quantile_cont(stats.recoveries, 0.99)
            gates["recovery_p99"] = "fail" if p99 >= config.recovery_threshold_s else "pass"
        for gate, scopes in SCOPES.items():
            if stage.scope not in scopes:
                gates[gate] = "not_applicable"
        failing = sorted(g for g, v in gates.items() if v == "fail")
        insufficient = sorted(g for g, v in gates.items() if v == "insufficient")
        decision = "ROLLBACK" if failing else ("HOLD" if insufficient else "PROCEED")
        out[stage.name] = {"decision": decision, "gates": dict(sorted(gates.items()))}
    return out


def _ungated(expectation: dict) -> bool:
    """A suspected duplicate dispatch (no evidence of a break) is reported, not gated."""
    return expectation["unit"].get("detail.basis") == "suspected"


def _status(failed: bool, sample: int, minimum: int) -> str:
    if failed:
        return "fail"
    return "insufficient" if sample < minimum else "pass"
