"""Rollout records from what CD controllers report: Argo Rollouts (`Rollout` and
`AnalysisRun` objects) and Flagger (`Canary` objects and the Kubernetes events about them),
as `kubectl get -o json` prints them.

Neither controller keeps a history of its own: an AnalysisRun records when the analysis
of a canary step ran and how it ended, a Rollout its current step, pause and abort, a
Canary its phase and weight, and Flagger's events (while Kubernetes keeps them) each weight
it advanced to. Records are made from those facts only:

- Argo step analysis: `start` of the step's stage when it started, then `proceed`
  (Successful), `hold` (Inconclusive) or `rollback` (Failed, Error) when it ended; a
  failed background analysis rolls back the stage it ran in; the Rollout adds a `hold`
  per pause, a `rollback` when aborted and `complete` when the release became stable.
- Flagger: `start` per "Advance ... canary weight N" event, `hold` per "Halt advancement",
  `rollback` per "Rolling back" / "Canary failed", `complete` per "Promotion completed";
  without events, the Canary's phase and weight give the current stage.

A stage is named `canary-<weight>pct` after the traffic weight the controller set. The
records are not validated here; rolloutlog.check does that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

ARGO_GROUP = "argoproj.io/"
FLAGGER_GROUP = "flagger.app/"
RELEASE_ANNOTATION = "replaygate.io/release"
POD_HASH_LABEL = "rollouts-pod-template-hash"


def stage_for(weight: float | str) -> str:
    w = float(weight)
    return f"canary-{int(w) if w.is_integer() else w:g}pct"


def flatten(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """Objects out of `kubectl get -o json` documents (a List, or one object)."""
    out: list[dict[str, Any]] = []
    for d in docs:
        if isinstance(d, list):
            out += flatten(d)
        elif isinstance(d, dict):
            if isinstance(d.get("items"), list):
                out += flatten(d["items"])
            elif d.get("kind"):
                out.append(d)
    return out


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    m = obj.get("metadata")
    return m if isinstance(m, dict) else {}


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    s = obj.get("status")
    return s if isinstance(s, dict) else {}


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    v = _meta(obj).get("labels")
    return v if isinstance(v, dict) else {}


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    v = _meta(obj).get("annotations")
    return v if isinstance(v, dict) else {}


def _is(obj: dict[str, Any], group: str, kind: str) -> bool:
    return str(obj.get("apiVersion", "")).startswith(group) and obj.get("kind") == kind


def _ident(obj: dict[str, Any]) -> tuple[str, str]:
    m = _meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def _owner(obj: dict[str, Any]) -> str | None:
    for ref in _meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("kind") == "Rollout":
            return ref.get("name")
    return None


# -- Argo Rollouts -----------------------------------------------------------------------


def _weights(rollout: dict[str, Any]) -> list[float | None]:
    """Per canary step index, the traffic weight in force during that step."""
    strategy = (rollout.get("spec") or {}).get("strategy") or {}
    steps = (strategy.get("canary") or {}).get("steps") or []
    out, weight = [], None
    for step in steps:
        if isinstance(step, dict) and step.get("setWeight") is not None:
            weight = step["setWeight"]
        out.append(weight)
    return out


def _run_end(run: dict[str, Any]) -> str | None:
    st = _status(run)
    ends: list[str | None] = [st.get("completedAt")]
    for m in st.get("metricResults") or []:
        for x in m.get("measurements") or []:
            ends.append(x.get("finishedAt"))
    done = [e for e in ends if e]
    return max(done) if done else None


def _argo(
    rollout: dict[str, Any], runs: list[dict[str, Any]], release: str | None, scope: str | None
) -> list[dict[str, Any]]:
    ns, name = _ident(rollout)
    st = _status(rollout)
    weights = _weights(rollout)
    current_hash = st.get("currentPodHash")
    release_of_hash: dict[str, str] = {}
    if current_hash:
        release_of_hash[current_hash] = (
            release or _annotations(rollout).get(RELEASE_ANNOTATION) or current_hash
        )

    def rel(pod_hash: str | None) -> str | None:
        return release or release_of_hash.get(pod_hash or "") or pod_hash

    def stage_at(index: Any) -> tuple[str | None, float | None]:
        try:
            i = int(index)
        except (TypeError, ValueError):
            return None, None
        w = weights[i] if 0 <= i < len(weights) else None
        return (stage_for(w), float(w)) if w is not None else (None, None)

    recs: list[dict[str, Any]] = []
    note = f"argo rollout {ns}/{name}"
    starts: list[tuple[str, str | None, str]] = []  # (ts, release, stage) of each stage start
    for run in sorted(runs, key=lambda r: _status(r).get("startedAt") or ""):
        labels = _labels(run)
        r_st = _status(run)
        started = r_st.get("startedAt") or _meta(run).get("creationTimestamp")
        pod_hash = labels.get(POD_HASH_LABEL)
        phase = r_st.get("phase")
        ended = _run_end(run)
        run_note = f"{note}: analysis {_meta(run).get('name')} {phase}"
        if r_st.get("message"):
            run_note += f": {r_st['message']}"
        if labels.get("rollout-type") == "Step":
            stage, weight = stage_at(labels.get("step-index"))
            if stage is None or not started:
                continue
            starts.append((started, rel(pod_hash), stage))
            recs.append(
                _rec(started, rel(pod_hash), stage, "start", percent=weight, scope=scope, note=note)
            )
            action = {
                "Successful": "proceed",
                "Inconclusive": "hold",
                "Failed": "rollback",
                "Error": "rollback",
            }.get(phase or "")
            if action and ended:
                recs.append(_rec(ended, rel(pod_hash), stage, action, note=run_note))
        elif phase in ("Failed", "Error") and ended:
            # A background analysis failed: the stage in force then is rolled back.
            current = [s for s in starts if s[0] <= ended and s[1] == rel(pod_hash)]
            if current:
                recs.append(_rec(ended, current[-1][1], current[-1][2], "rollback", note=run_note))

    # The Rollout itself: its current step, pauses, abort, completion.
    stage, weight = stage_at(st.get("currentStepIndex"))
    if current_hash and stage is None and weights and st.get("currentStepIndex") is not None:
        stage, weight = stage_at(len(weights) - 1)
    if current_hash and stage:
        r = rel(current_hash)
        known = [s for s in starts if s[1] == r and s[2] == stage]
        if not known:
            t = _first(
                [p.get("startTime") for p in st.get("pauseConditions") or []]
                + [_cond(st, "Progressing", "lastUpdateTime")]
            )
            if t:
                recs.append(_rec(t, r, stage, "start", percent=weight, scope=scope, note=note))
        for p in st.get("pauseConditions") or []:
            if p.get("startTime"):
                why = f"{note}: paused ({p.get('reason')})"
                recs.append(_rec(p["startTime"], r, stage, "hold", note=why))
        if st.get("abort"):
            t = st.get("abortedAt") or _cond(st, "Progressing", "lastTransitionTime")
            if t:
                why = f"{note}: aborted" + (f": {st['message']}" if st.get("message") else "")
                recs.append(_rec(t, r, stage, "rollback", note=why))
        elif _cond(st, "Completed", "status") == "True" and current_hash == st.get("stableRS"):
            t = _cond(st, "Completed", "lastTransitionTime")
            if t:
                recs.append(_rec(t, r, stage, "complete", note=f"{note}: fully promoted"))
    return recs


def _cond(status: dict[str, Any], ctype: str, key: str) -> Any:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype:
            return c.get(key)
    return None


def _first(values: list[str | None]) -> str | None:
    present = [v for v in values if v]
    return min(present) if present else None


# -- Flagger -----------------------------------------------------------------------------

_ADVANCE = re.compile(r"^Advance \S+ canary weight (\d+(?:\.\d+)?)")
_HALT = re.compile(r"^Halt ")
_ROLLBACK = re.compile(r"^(Rolling back|Canary failed)")
_PROMOTED = re.compile(r"^Promotion completed")


def _event_time(ev: dict[str, Any]) -> str | None:
    return (
        ev.get("lastTimestamp")
        or ev.get("eventTime")
        or ev.get("firstTimestamp")
        or _meta(ev).get("creationTimestamp")
    )


def _flagger(
    canary: dict[str, Any], events: list[dict[str, Any]], release: str | None, scope: str | None
) -> list[dict[str, Any]]:
    ns, name = _ident(canary)
    st = _status(canary)
    r = release or _annotations(canary).get(RELEASE_ANNOTATION) or st.get("lastAppliedSpec")
    if not r:
        return []
    note = f"flagger canary {ns}/{name}"
    recs: list[dict[str, Any]] = []
    stage = None
    for ev in sorted(events, key=lambda e: _event_time(e) or ""):
        msg, t = str(ev.get("message") or ""), _event_time(ev)
        if not t:
            continue
        if m := _ADVANCE.match(msg):
            stage = stage_for(m.group(1))
            recs.append(
                _rec(t, r, stage, "start", percent=float(m.group(1)), scope=scope, note=note)
            )
        elif stage and _HALT.match(msg):
            recs.append(_rec(t, r, stage, "hold", note=f"{note}: {msg}"))
        elif stage and _ROLLBACK.match(msg):
            recs.append(_rec(t, r, stage, "rollback", note=f"{note}: {msg}"))
        elif stage and _PROMOTED.match(msg):
            recs.append(_rec(t, r, stage, "complete", note=f"{note}: {msg}"))
    if stage is None:
        # No events (they expire): the Canary's own state says where it stands.
        phase, weight = st.get("phase"), st.get("canaryWeight")
        t = st.get("lastTransitionTime")
        if t and weight:
            stage = stage_for(weight)
            recs.append(_rec(t, r, stage, "start", percent=float(weight), scope=scope, note=note))
            action = {
                "Failed": "rollback",
                "Waiting": "hold",
                "WaitingPromotion": "hold",
                "Succeeded": "complete",
            }.get(phase or "")
            if action:
                recs.append(_rec(t, r, stage, action, note=f"{note}: {phase}"))
    return recs


def _rec(
    ts: str,
    release: str | None,
    stage: str,
    action: str,
    percent: float | None = None,
    scope: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    rec = {
        "schema": "mcpRollout.v1",
        "ts": ts,
        "release": str(release),
        "stage": stage,
        "action": action,
        "percent": percent,
        "scope": scope if action == "start" else None,
        "actor": "argo-rollouts" if note and note.startswith("argo") else "flagger",
        "note": note,
    }
    return {k: v for k, v in rec.items() if v is not None}


def records(
    docs: Iterable[Any], release: str | None = None, scope: str | None = None
) -> list[dict[str, Any]]:
    """Rollout records, oldest first, from `kubectl get -o json` documents."""
    objs = flatten(docs)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    events: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in objs:
        if _is(o, ARGO_GROUP, "AnalysisRun") and (owner := _owner(o)):
            runs.setdefault((_ident(o)[0], owner), []).append(o)
        elif o.get("kind") == "Event":
            inv = o.get("involvedObject") or o.get("regarding") or {}
            if inv.get("kind") == "Canary":
                key = (str(inv.get("namespace") or ""), str(inv.get("name") or ""))
                events.setdefault(key, []).append(o)
    out: list[dict[str, Any]] = []
    for o in objs:
        if _is(o, ARGO_GROUP, "Rollout"):
            out += _argo(o, runs.get(_ident(o), []), release, scope)
        elif _is(o, FLAGGER_GROUP, "Canary"):
            out += _flagger(o, events.get(_ident(o), []), release, scope)
    order = {"start": 0, "hold": 1, "proceed": 2, "rollback": 3, "complete": 4}
    seen, unique = set(), []
    for rec in sorted(out, key=lambda x: (x["ts"], order[x["action"]])):
        k = (rec["ts"], rec["release"], rec["stage"], rec["action"])
        if k not in seen:
            seen.add(k)
            unique.append(rec)
    return unique
