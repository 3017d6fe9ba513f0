"""Rollout records from what CD controllers report: Argo Rollouts (`Rollout`,
`AnalysisRun` and `Experiment` objects) and Flagger (`Canary` objects and the Kubernetes
events about them), as `kubectl get -o json` or `-o yaml` prints them.

Neither controller keeps a history of its own. Records are made from the facts its
objects still show, following each controller's state machine:

- Argo canary: a stage per traffic weight (`canary-<weight>pct`; steps before the first
  `setWeight`, such as an experiment, run at `canary-0pct`). A step AnalysisRun or an
  Experiment starts its step's stage and ends it: Successful = `proceed`, Inconclusive =
  `hold`, Failed/Error = `rollback`. A terminated run (Argo terminates runs on abort,
  promotion or a skipped step; its phase then says Successful) is no verdict. A failed
  background analysis rolls back the stage in force. The Rollout adds the current stage's
  start, a `hold` per pause, a `rollback` when aborted and a `complete` when the release
  became stable. A retried step makes a new start (the stage is judged from its latest).
- Argo blue-green: the preview is the stage (`preview`); promotion (the new ReplicaSet is
  stable) completes it, an abort rolls it back, a failed pre- or post-promotion analysis
  rolls it back.
- Flagger: events (core/v1 `message` or events.k8s.io/v1 `note`, aggregated by client-go
  as "(combined from similar events): ..." or not) give each step: "Advance ... canary
  weight N" starts `canary-<N>pct`; an A/B test ("canary iteration i/n" with `match`) is
  one stage `ab-test`, a blue/green one `preview`; "Halt ..." holds, "Rolling back" /
  "Canary failed" roll back, "Copying ... template spec" / "Routing all traffic to canary"
  proceed, "Promotion completed" completes. The Canary's phase adds what the events
  (which Kubernetes expires after an hour) no longer show; Flagger resets the weight on
  failure, so a Failed canary without events rolls back the last stage the rollout log
  already holds a start of (an earlier import saw it), else a stage named `canary`.

The records are not validated here; rolloutlog.check does that. `read` also says, per
object, why it gave no record, so an import never drops an object silently.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

ARGO_GROUP = "argoproj.io/"
FLAGGER_GROUP = "flagger.app/"
RELEASE_ANNOTATION = "replaygate.io/release"
POD_HASH_LABEL = "rollouts-pod-template-hash"
REVISION_ANNOTATION = "rollout.argoproj.io/revision"
PREVIEW = "preview"
AB_TEST = "ab-test"
# A Flagger Canary whose last weight no object shows any more (failed, no events left).
CANARY = "canary"


def stage_for(weight: float | str) -> str:
    w = float(weight)
    return f"canary-{int(w) if w.is_integer() else w:g}pct"


def _plain(value: Any) -> Any:
    """YAML's timestamps (safe_load makes datetimes of unquoted ones) as RFC 3339 text."""
    if isinstance(value, datetime):
        ts = value if value.tzinfo else value.replace(tzinfo=UTC)
        return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def flatten(docs: Iterable[Any]) -> list[dict[str, Any]]:
    """Objects out of `kubectl get -o json|yaml` documents (a List, or one object)."""
    out: list[dict[str, Any]] = []
    for d in docs:
        if isinstance(d, list):
            out += flatten(d)
        elif isinstance(d, dict):
            if isinstance(d.get("items"), list):
                out += flatten(d["items"])
            elif d.get("kind"):
                out.append(_plain(d))
    return out


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("metadata"))


def _status(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("status"))


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(obj.get("spec"))


def _labels(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(_meta(obj).get("labels"))


def _annotations(obj: dict[str, Any]) -> dict[str, Any]:
    return _dict(_meta(obj).get("annotations"))


def _is(obj: dict[str, Any], group: str, kind: str) -> bool:
    return str(obj.get("apiVersion", "")).startswith(group) and obj.get("kind") == kind


def _ident(obj: dict[str, Any]) -> tuple[str, str]:
    m = _meta(obj)
    return str(m.get("namespace") or ""), str(m.get("name") or "")


def _owner(obj: dict[str, Any], kind: str) -> str | None:
    for ref in _list(_meta(obj).get("ownerReferences")):
        if isinstance(ref, dict) and ref.get("kind") == kind and ref.get("name"):
            return str(ref["name"])
    return None


def _text(v: Any) -> str | None:
    return None if v is None or v == "" else str(v)


def _cond(status: dict[str, Any], ctype: str, key: str) -> Any:
    for c in _list(status.get("conditions")):
        if isinstance(c, dict) and c.get("type") == ctype:
            return c.get(key)
    return None


def _first(values: Iterable[Any]) -> str | None:
    present = [str(v) for v in values if v]
    return min(present) if present else None


@dataclass
class Reading:
    """What the objects gave: the records, oldest first, and for each object that gave
    none, why."""

    records: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    # (kind, namespace, name) of each Rollout and Canary that gave a record
    sources: set[tuple[str, str, str]] = field(default_factory=set)
    # (namespace, name) of each Experiment -> the Rollout that owns it
    experiments: dict[tuple[str, str], str] = field(default_factory=dict)

    def used(self, obj: dict[str, Any]) -> bool:
        """Whether an object went into a record (itself, or as its Rollout's analysis or
        experiment, or as an event about its Canary)."""
        ns, name = _ident(obj)
        if obj.get("kind") in ("Rollout", "Canary"):
            return (str(obj["kind"]), ns, name) in self.sources
        if obj.get("kind") in ("AnalysisRun", "Experiment"):
            owner = _owner(obj, "Rollout")
            if owner is None and (exp := _owner(obj, "Experiment")):
                owner = self.experiments.get((ns, exp))  # read as its experiment
            return owner is not None and ("Rollout", ns, owner) in self.sources
        if obj.get("kind") == "Event":
            inv = event_subject(obj)
            key = ("Canary", str(inv.get("namespace") or ns), str(inv.get("name") or ""))
            return key in self.sources
        return False


# -- Argo Rollouts -----------------------------------------------------------------------


def _weights(rollout: dict[str, Any]) -> list[float]:
    """Per canary step index, the traffic weight in force during that step (0 before the
    first setWeight: an experiment step, say, serves no production traffic)."""
    steps = _list(_dict(_dict(_spec(rollout).get("strategy")).get("canary")).get("steps"))
    out: list[float] = []
    weight = 0.0
    for step in steps:
        if isinstance(step, dict) and step.get("setWeight") is not None:
            with contextlib.suppress(TypeError, ValueError):
                weight = float(step["setWeight"])
        out.append(weight)
    return out


def _run_end(run: dict[str, Any]) -> str | None:
    status = _status(run)
    ends: list[Any] = [status.get("completedAt")]
    for m in _list(status.get("metricResults")):
        for x in _list(_dict(m).get("measurements")):
            ends.append(_dict(x).get("finishedAt"))
    done = [str(e) for e in ends if e]
    return max(done) if done else None


def _run_start(run: dict[str, Any]) -> str | None:
    status = _status(run)
    return _text(status.get("startedAt")) or _text(_meta(run).get("creationTimestamp"))


def terminated(run: dict[str, Any]) -> bool:
    """Argo terminates a run (on abort, promotion or a skipped step) by `spec.terminate`;
    the run then ends Successful with the message "run terminated": no pass."""
    msg = str(_status(run).get("message") or "")
    return bool(_spec(run).get("terminate")) or "terminated" in msg.lower()


def run_verdict(run: dict[str, Any]) -> str | None:
    """The action an ended AnalysisRun (or Experiment) stands for, None while running or
    when it was terminated."""
    if terminated(run):
        return None
    return {
        "Successful": "proceed",
        "Inconclusive": "hold",
        "Failed": "rollback",
        "Error": "rollback",
    }.get(str(_status(run).get("phase") or ""))


_EXPERIMENT_STEP = re.compile(r"-(\d+)-(\d+)(?:\.\d+)?$")


class _Argo:
    def __init__(
        self,
        rollout: dict[str, Any],
        runs: list[dict[str, Any]],
        experiments: list[dict[str, Any]],
        release: str | None,
        scope: str | None,
    ) -> None:
        self.ro = rollout
        self.runs = runs
        self.experiments = experiments
        self.release = release
        self.scope = scope
        self.status = _status(rollout)
        ns, name = _ident(rollout)
        self.note = f"argo rollout {ns}/{name}"
        self.current_hash = _text(self.status.get("currentPodHash"))
        self.revision = _text(_annotations(rollout).get(REVISION_ANNOTATION))
        self.recs: list[dict[str, Any]] = []
        self.skipped: list[str] = []

    def rel(self, obj: dict[str, Any] | None = None) -> str | None:
        """The release of the pod template an object belongs to (None: unknown)."""
        if self.release:
            return self.release
        pod_hash = self.current_hash if obj is None else _text(_labels(obj).get(POD_HASH_LABEL))
        if pod_hash is None and obj is not None:
            # No label: a run of the Rollout's current revision belongs to its current hash.
            rev = _text(_annotations(obj).get(REVISION_ANNOTATION))
            if rev is not None and rev == self.revision:
                pod_hash = self.current_hash
        if pod_hash is None:
            return None
        if pod_hash == self.current_hash:
            return _text(_annotations(self.ro).get(RELEASE_ANNOTATION)) or pod_hash
        return pod_hash

    def add(self, ts: str, rel: str, stage: str, action: str, weight: float | None = None,
            why: str | None = None) -> None:  # fmt: skip
        self.recs.append(
            _rec(
                ts, rel, stage, action,
                percent=weight if action == "start" else None,
                scope=self.scope, note=self.note + (f": {why}" if why else ""),
                actor="argo-rollouts",
            )
        )  # fmt: skip

    def read(self) -> None:
        strategy = _dict(_spec(self.ro).get("strategy"))
        if not self.status or self.current_hash is None:
            self.skipped.append(f"{self.note}: no status yet (the controller has not seen it)")
            return
        if "blueGreen" in strategy:
            self.blue_green()
        elif "canary" in strategy:
            self.canary()
        else:
            self.skipped.append(f"{self.note}: neither a canary nor a blueGreen strategy")

    # -- canary

    def stage_at(self, index: Any) -> tuple[str, float] | None:
        weights = _weights(self.ro)
        try:
            i = int(index)
        except (TypeError, ValueError):
            return None
        if not weights:
            return stage_for(100), 100.0
        i = min(max(i, 0), len(weights) - 1)
        return stage_for(weights[i]), weights[i]

    def canary(self) -> None:
        for run in sorted(self.runs, key=lambda r: _run_start(r) or ""):
            self.analysis(run)
        for exp in sorted(self.experiments, key=lambda e: _run_start(e) or ""):
            self.experiment(exp)
        self.rollout_state()

    def analysis(self, run: dict[str, Any]) -> None:
        kind = _labels(run).get("rollout-type")
        name = _meta(run).get("name")
        rel = self.rel(run)
        if rel is None:
            self.skipped.append(
                f"{self.note}: analysis {name}: no {POD_HASH_LABEL} label, so its release is "
                "unknown (give --release)"
            )
            return
        started, ended = _run_start(run), _run_end(run)
        phase = _status(run).get("phase")
        why = f"analysis {name} {phase}"
        if _status(run).get("message"):
            why += f": {_status(run)['message']}"
        verdict = run_verdict(run)
        if kind == "Step":
            at = self.stage_at(_labels(run).get("step-index"))
            if at is None or not started:
                self.skipped.append(f"{self.note}: analysis {name}: no step index or start")
                return
            self.add(started, rel, at[0], "start", at[1])
            if verdict and ended:
                self.add(ended, rel, at[0], verdict, why=why)
        elif kind in ("Background", "PrePromotion", "PostPromotion"):
            if verdict == "rollback" and ended:
                stage = self.stage_in_force(rel, ended) if kind == "Background" else PREVIEW
                if stage is None:
                    self.skipped.append(f"{self.note}: analysis {name}: no stage in force")
                    return
                self.add(ended, rel, stage, "rollback", why=why)
            elif kind == "PrePromotion" and verdict == "proceed" and ended:
                self.add(ended, rel, PREVIEW, "proceed", why=why)
        else:
            self.skipped.append(f"{self.note}: analysis {name}: no rollout-type label")

    def stage_in_force(self, rel: str, ts: str) -> str | None:
        starts = [
            r for r in self.recs if r["action"] == "start" and r["release"] == rel and r["ts"] <= ts
        ]
        if starts:
            return str(max(starts, key=lambda r: r["ts"])["stage"])
        at = self.stage_at(self.status.get("currentStepIndex") or 0)
        return at[0] if at and rel == self.rel() else None

    def experiment(self, exp: dict[str, Any]) -> None:
        name = str(_meta(exp).get("name") or "")
        rel = self.rel(exp)
        m = _EXPERIMENT_STEP.search(name)
        started = _text(_status(exp).get("availableAt")) or _run_start(exp)
        if rel is None or m is None or not started:
            self.skipped.append(f"{self.note}: experiment {name}: its release or step is unknown")
            return
        at = self.stage_at(m.group(2))
        if at is None:
            return
        self.add(started, rel, at[0], "start", at[1])
        verdict = run_verdict(exp)
        ended = _run_end(exp) or _cond(_status(exp), "Progressing", "lastTransitionTime")
        if verdict and ended:
            self.add(
                str(ended), rel, at[0], verdict, why=f"experiment {name} {_status(exp)['phase']}"
            )

    def pauses(self) -> list[tuple[str, str]]:
        out = [
            (str(p["startTime"]), str(p.get("reason") or "paused"))
            for p in _list(self.status.get("pauseConditions"))
            if isinstance(p, dict) and p.get("startTime")
        ]
        if self.status.get("pauseStartTime"):  # before v0.6, one pause time and no reason
            out.append((str(self.status["pauseStartTime"]), "paused"))
        return out

    def aborted_at(self) -> str | None:
        if not self.status.get("abort"):
            return None
        return _text(self.status.get("abortedAt")) or _text(
            _cond(self.status, "Progressing", "lastTransitionTime")
        )

    def promoted_at(self) -> str | None:
        """When the current pod template became stable (the rollout completed)."""
        if self.status.get("abort"):
            return None
        stable = (
            self.status.get("stableRS")
            or _dict(self.status.get("canary")).get("stableRS")
            or _dict(self.status.get("blueGreen")).get("activeSelector")
        )
        if stable != self.current_hash:
            return None
        return (
            _text(_cond(self.status, "Completed", "lastTransitionTime"))
            or _text(
                _cond(self.status, "Progressing", "lastUpdateTime")
                if _cond(self.status, "Progressing", "reason") == "NewReplicaSetAvailable"
                else None
            )
            or _text(_cond(self.status, "Available", "lastTransitionTime"))
        )

    def progressing(self) -> tuple[str | None, str | None]:
        """When the Progressing condition last changed, as the time a step began, or (the
        second) only as a last resort: a deadline exceeded, an abort or an availability
        reset it long after."""
        t = _text(_cond(self.status, "Progressing", "lastTransitionTime"))
        late = ("RolloutAborted", "ProgressDeadlineExceeded", "NewReplicaSetAvailable")
        if _cond(self.status, "Progressing", "reason") in late:
            return None, t
        return t, None

    def after_start(
        self, rel: str, stage: str, aborted: str | None, done: str | None, promoted: str
    ) -> None:
        """A started stage's holds (each pause) and its end: an abort is a rollback with
        the rollout's message; a promotion completes it, `promoted` saying how."""
        for t, reason in self.pauses():
            self.add(t, rel, stage, "hold", why=f"paused ({reason})")
        if aborted:
            msg = self.status.get("message") or _cond(self.status, "Progressing", "message")
            self.add(aborted, rel, stage, "rollback", why="aborted" + (f": {msg}" if msg else ""))
        elif done:
            self.add(done, rel, stage, "complete", why=promoted)

    def rollout_state(self) -> None:
        rel = self.rel()
        assert rel is not None  # read() requires a current hash
        done = self.promoted_at()
        steps = _weights(self.ro)
        index = len(steps) - 1 if done and steps else self.status.get("currentStepIndex")
        at = self.stage_at(index if index is not None else 0)
        if at is None:
            return
        stage, weight = at
        aborted = self.aborted_at()
        started = [
            r
            for r in self.recs
            if r["action"] == "start" and (r["release"], r["stage"]) == (rel, stage)
        ]
        if not started:
            background = [
                _run_start(r) for r in self.runs
                if _labels(r).get("rollout-type") == "Background" and self.rel(r) == rel
            ]  # fmt: skip
            progressing, late = self.progressing()
            first_step = not steps or (index is not None and int(index) == 0)
            t = (
                _first([p for p, _ in self.pauses()] + [progressing])
                or (_first(background) if first_step else None)
                or aborted
                or done
                or late
            )
            if t:
                self.add(t, rel, stage, "start", weight)
        self.after_start(rel, stage, aborted, done, "fully promoted")

    # -- blue-green

    def blue_green(self) -> None:
        rel = self.rel()
        assert rel is not None
        for run in sorted(self.runs, key=lambda r: _run_start(r) or ""):
            if _labels(run).get("rollout-type") in ("PrePromotion", "PostPromotion"):
                self.analysis(run)
        done, aborted = self.promoted_at(), self.aborted_at()
        t = (
            _first(
                [p for p, _ in self.pauses()]
                + [r["ts"] for r in self.recs if r["release"] == rel]
                + [
                    _run_start(r)
                    for r in self.runs
                    if _labels(r).get("rollout-type") == "PrePromotion" and self.rel(r) == rel
                ]  # fmt: skip
            )
            or self.progressing()[0]
            or aborted
            or done
            or self.progressing()[1]
        )
        if not t:
            self.skipped.append(f"{self.note}: blue-green preview without a time")
            return
        self.add(t, rel, PREVIEW, "start", 0.0)
        self.after_start(rel, PREVIEW, aborted, done, "promoted (the preview is active)")


# -- Flagger -----------------------------------------------------------------------------

_AGGREGATED = "(combined from similar events): "
_ADVANCE = re.compile(r"^Advance \S+ canary weight (\d+(?:\.\d+)?)")
_ITERATION = re.compile(r"^Advance \S+ canary iteration (\d+)/(\d+)")
_HALT = re.compile(r"^Halt ")
_ROLLBACK = re.compile(r"^(Rolling back|Canary failed)")
_PROMOTING = re.compile(r"^(Copying \S+ template spec to|Routing all traffic to canary)")
_PROMOTED = re.compile(r"^Promotion completed!? Scaling down")
_RESTART = re.compile(r"^New revision detected")


def event_message(ev: dict[str, Any]) -> str:
    """An event's text (core/v1 `message`, events.k8s.io/v1 `note`), without client-go's
    aggregation prefix."""
    msg = str(ev.get("message") or ev.get("note") or "")
    return msg[len(_AGGREGATED) :] if msg.startswith(_AGGREGATED) else msg


def event_time(ev: dict[str, Any]) -> str | None:
    series = _dict(ev.get("series"))
    return _text(
        ev.get("lastTimestamp")
        or series.get("lastObservedTime")
        or ev.get("deprecatedLastTimestamp")
        or ev.get("eventTime")
        or ev.get("firstTimestamp")
        or ev.get("deprecatedFirstTimestamp")
        or _meta(ev).get("creationTimestamp")
    )


def event_subject(ev: dict[str, Any]) -> dict[str, Any]:
    return _dict(ev.get("involvedObject") or ev.get("regarding"))


def flagger_strategy(canary: dict[str, Any]) -> str:
    """`canary`, `ab-test` or `blue-green`, as Flagger decides it (DeploymentStrategy)."""
    spec = _spec(canary)
    analysis = _dict(spec.get("analysis") or spec.get("canaryAnalysis"))
    if analysis.get("iterations"):
        return "ab-test" if analysis.get("match") else "blue-green"
    return "canary"


def _final_stage(canary: dict[str, Any]) -> tuple[str, float | None]:
    """The stage a Canary is promoted from: its last weight, or the one stage of an A/B
    test or blue/green."""
    kind = flagger_strategy(canary)
    if kind == "ab-test":
        return AB_TEST, None
    if kind == "blue-green":
        return PREVIEW, 0.0
    analysis = _dict(_spec(canary).get("analysis") or _spec(canary).get("canaryAnalysis"))
    try:
        steps = [float(w) for w in _list(analysis.get("stepWeights"))]
        if steps:
            return stage_for(steps[-1]), steps[-1]
        if analysis.get("maxWeight") is not None and analysis.get("stepWeight"):
            top, step = float(analysis["maxWeight"]), float(analysis["stepWeight"])
            last = min(top, step * -(-top // step))  # Flagger caps the last step at maxWeight
            return stage_for(last), last
    except (TypeError, ValueError):
        pass
    return CANARY, None


def _instant(ts: Any) -> datetime | None:
    try:
        t = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def _reached(
    starts: Iterable[dict[str, Any]], release: str, until: str | None
) -> tuple[str, float | None] | None:
    """The stage of `release` started last at or before `until`, among rollout records
    (what an earlier import of the same objects, or an operator, recorded)."""
    end = _instant(until) if until else None
    best: tuple[datetime, str, float | None] | None = None
    for rec in starts:
        at = _instant(rec.get("ts"))
        if rec.get("action") != "start" or rec.get("release") != release or at is None:
            continue
        if end is not None and at > end:
            continue
        if best is None or at >= best[0]:
            pct = rec.get("percent")
            num = pct if isinstance(pct, int | float) and not isinstance(pct, bool) else None
            best = (at, str(rec["stage"]), None if num is None else float(num))
    return (best[1], best[2]) if best else None


def _flagger(
    canary: dict[str, Any],
    events: list[dict[str, Any]],
    release: str | None,
    scope: str | None,
    known: list[dict[str, Any]] | None = None,
) -> Reading:
    ns, name = _ident(canary)
    status = _status(canary)
    note = f"flagger canary {ns}/{name}"
    out = Reading()
    r = (
        release
        or _text(_annotations(canary).get(RELEASE_ANNOTATION))
        or _text(status.get("lastAppliedSpec"))
    )
    if not r:
        out.skipped.append(
            f"{note}: no release (no lastAppliedSpec, no {RELEASE_ANNOTATION} annotation): "
            "give --release"
        )
        return out

    def add(ts: str, stage: str, action: str, weight: float | None = None, why: str = "") -> None:
        out.records.append(
            _rec(ts, r, stage, action, percent=weight if action == "start" else None,
                 scope=scope, note=note + (f": {why}" if why else ""), actor="flagger")
        )  # fmt: skip

    kind = flagger_strategy(canary)
    one_stage = AB_TEST if kind == "ab-test" else PREVIEW
    stage: str | None = None
    for ev in sorted(events, key=lambda e: event_time(e) or ""):
        msg, t = event_message(ev), event_time(ev)
        if not t:
            continue
        if m := _ADVANCE.match(msg):
            stage = stage_for(m.group(1))
            add(t, stage, "start", float(m.group(1)))
        elif _ITERATION.match(msg):
            if stage != one_stage:
                stage = one_stage
                add(t, stage, "start", 0.0 if stage == PREVIEW else None)
        elif _RESTART.match(msg):
            stage = None  # a new revision: its next advance starts again
        elif stage and _HALT.match(msg):
            add(t, stage, "hold", why=msg)
        elif stage and _ROLLBACK.match(msg):
            add(t, stage, "rollback", why=msg)
        elif stage and _PROMOTING.match(msg):
            add(t, stage, "proceed", why=msg)
        elif stage and _PROMOTED.match(msg):
            add(t, stage, "complete", why=msg)

    # The Canary's phase: what the events (expired, or not imported) no longer show.
    phase = str(status.get("phase") or "")
    t = _text(status.get("lastTransitionTime"))
    began = _text(_cond(status, "Promoted", "lastTransitionTime")) or t
    final, final_w = _final_stage(canary)
    current, current_w = final, final_w
    if stage is not None:
        current, current_w = (
            stage,
            next((x.get("percent") for x in reversed(out.records) if x["stage"] == stage), None),
        )
    weight = status.get("canaryWeight")
    # What the rollout log already holds of this release: an earlier import saw the
    # weights that the Canary's status has since reset.
    reached = _reached(known or [], r, t) if stage is None else None
    if phase == "Failed" and stage is None:
        # Flagger sets the weight to 0 on failure: without events, the stage is the last
        # one the log saw start, else it is not known.
        if kind != "canary":
            current, current_w = one_stage, final_w
        else:
            current, current_w = reached or (CANARY, None)
    elif phase != "Progressing" and stage is None and current == CANARY and reached:
        current, current_w = reached
    if phase == "Progressing" and stage is None and t:
        if weight:
            current, current_w = stage_for(weight), float(weight)
        elif kind == "canary":
            current, current_w = CANARY, None
        else:
            current, current_w = one_stage, (0.0 if kind == "blue-green" else None)
    action = {
        "Progressing": None,
        "WaitingPromotion": "hold",
        "Promoting": "proceed",
        "Finalising": "proceed",
        "Succeeded": "complete",
        "Failed": "rollback",
    }.get(phase, "")
    if (
        t
        and action != ""
        and not any(x["stage"] == current and x["action"] == action for x in out.records)
    ):
        # A stage already started (here, or in the log) is not started again: a second
        # start would move its window to the phase's time.
        started = [x for x in out.records if x["action"] == "start"]
        if stage is None:
            started += [x for x in known or [] if x.get("release") == r]
        if not any(x["stage"] == current and x.get("action") == "start" for x in started):
            add(min(began or t, t), current, "start", current_w)
        if action:
            add(t, current, action, why=f"phase {phase}")
    if not out.records:
        out.skipped.append(
            f"{note}: phase {phase or 'unknown'} and no events of a canary run: nothing to record"
        )
    return out


def _rec(
    ts: str,
    release: str,
    stage: str,
    action: str,
    percent: float | None = None,
    scope: str | None = None,
    note: str | None = None,
    actor: str = "argo-rollouts",
) -> dict[str, Any]:
    rec = {
        "schema": "mcpRollout.v1",
        "ts": ts,
        "release": release,
        "stage": stage,
        "action": action,
        "percent": percent,
        "scope": scope if action == "start" else None,
        "actor": actor,
        "note": note,
    }
    return {k: v for k, v in rec.items() if v is not None}


ORDER = {"start": 0, "hold": 1, "proceed": 2, "rollback": 3, "complete": 4}


def read(
    docs: Iterable[Any],
    release: str | None = None,
    scope: str | None = None,
    known: list[dict[str, Any]] | None = None,
) -> Reading:
    """Rollout records, oldest first, from `kubectl get` documents, and per object that
    gave none, the reason. `known` are the records the rollout log already holds: a
    Canary whose status no longer shows its stage (Failed, with its events expired) is
    attributed to the last stage the log saw start."""
    objs = flatten(docs)
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    experiments: dict[tuple[str, str], list[dict[str, Any]]] = {}
    events: dict[tuple[str, str], list[dict[str, Any]]] = {}
    out = Reading()
    rollouts = {_ident(o) for o in objs if _is(o, ARGO_GROUP, "Rollout")}
    exps = {_ident(o) for o in objs if _is(o, ARGO_GROUP, "Experiment")}
    for o in objs:
        if _is(o, ARGO_GROUP, "AnalysisRun"):
            ns, name = _ident(o)
            if owner := _owner(o, "Rollout"):
                runs.setdefault((ns, owner), []).append(o)
            elif exp := _owner(o, "Experiment"):
                # An experiment's runs are read as the experiment (its phase is theirs).
                if (ns, exp) not in exps:
                    out.skipped.append(f"analysis {ns}/{name}: its Experiment {exp} is not given")
            else:
                # Argo sets the owner on every run it creates; without one (a run created
                # by hand, or stripped by an export) nothing says which rollout or step it
                # judged.
                out.skipped.append(
                    f"analysis {ns}/{name}: no Rollout owns it (no ownerReferences), so "
                    "its rollout and step are unknown"
                )
        elif _is(o, ARGO_GROUP, "Experiment") and (owner := _owner(o, "Rollout")):
            experiments.setdefault((_ident(o)[0], owner), []).append(o)
            out.experiments[_ident(o)] = owner
        elif _is(o, ARGO_GROUP, "Experiment"):
            out.skipped.append(
                "experiment {}/{}: no Rollout owns it (a stand-alone experiment is no "
                "rollout step)".format(*_ident(o))
            )
        elif o.get("kind") == "Event":
            inv = event_subject(o)
            if inv.get("kind") == "Canary":
                key = (str(inv.get("namespace") or _meta(o).get("namespace") or ""),
                       str(inv.get("name") or ""))  # fmt: skip
                events.setdefault(key, []).append(o)
    for key in runs.keys() - rollouts:
        out.skipped.append(f"analysis of rollout {key[0]}/{key[1]}: its Rollout is not given")
    for o in objs:
        if _is(o, ARGO_GROUP, "Rollout"):
            argo = _Argo(o, runs.get(_ident(o), []), experiments.get(_ident(o), []), release, scope)
            argo.read()
            out.records += argo.recs
            out.skipped += argo.skipped
            if argo.recs:
                out.sources.add(("Rollout", *_ident(o)))
            if not argo.recs and not argo.skipped:
                out.skipped.append(f"{argo.note}: no stage to record")
        elif _is(o, FLAGGER_GROUP, "Canary"):
            got = _flagger(o, events.get(_ident(o), []), release, scope, known)
            out.records += got.records
            out.skipped += got.skipped
            if got.records:
                out.sources.add(("Canary", *_ident(o)))
    if not any(_is(o, ARGO_GROUP, "Rollout") or _is(o, FLAGGER_GROUP, "Canary") for o in objs):
        kinds = sorted({str(o.get("kind")) for o in objs})
        out.skipped.append(
            "no Argo Rollout or Flagger Canary among the objects"
            + (f" ({', '.join(kinds)})" if kinds else "")
        )
    seen: set[tuple[str, ...]] = set()
    unique = []
    for rec in sorted(out.records, key=lambda x: (x["ts"], ORDER[x["action"]])):
        k = (rec["ts"], rec["release"], rec["stage"], rec["action"])
        if k not in seen:
            seen.add(k)
            unique.append(rec)
    out.records = unique
    return out


def records(
    docs: Iterable[Any], release: str | None = None, scope: str | None = None
) -> list[dict[str, Any]]:
    """Rollout records, oldest first, from `kubectl get` documents."""
    return read(docs, release, scope).records
