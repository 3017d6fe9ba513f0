"""`replaygate probe`: a synthetic MCP client that runs resumability scenarios against a
live Streamable HTTP endpoint — through its real proxy — and writes what it received as
client evidence (inbox receipts, and its own session and stream facts) for `ingest`, plus
a `probe-<run>.json` summary. Built on the official MCP Python SDK client (discovery and
the 2026-07-28 re-send) and raw HTTP where the SDK hides what a probe needs (cutting a
stream, choosing a cursor, a foreign Origin). Needs the `probe` extra:
`pip install 'replaygate[probe]'`."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from . import evidence
from .trials import DEFAULT_SCENARIOS, SCENARIOS, Probe, Settings, Verdict, summary_line
from .wire import CLEANUP_GRACE, PRINCIPAL

__all__ = [
    "DEFAULT_SCENARIOS",
    "EXIT_CODES",
    "ROUND_DEADLINE",
    "SCENARIOS",
    "Settings",
    "default_deadline",
    "new_run_id",
    "run",
]

# Like `replaygate gates`: 0 every scenario passed, 2 some could not tell, 3 some failed.
EXIT_CODES = {"pass": 0, "skipped": 0, "cannot_tell": 2, "fail": 3}
_RANK = {"pass": 0, "skipped": 0, "cannot_tell": 1, "fail": 2}
# A round of the default scenarios takes the tool's running time plus a few seconds; this
# leaves room for a slow endpoint and still ends a run that waits on a silent one.
ROUND_DEADLINE = 120.0


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def worst(statuses: list[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default="pass")


def default_deadline(count: int, every: float | None) -> float:
    """The run's deadline when none is given: ROUND_DEADLINE per round, the rounds of
    `--every` taking their span."""
    if every:
        return (count - 1) * every + ROUND_DEADLINE
    return count * ROUND_DEADLINE


def run(
    s: Settings,
    *,
    count: int = 1,
    every: float | None = None,
    deadline: float | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the scenarios `count` times (`every` seconds apart) within `deadline` seconds
    (default: default_deadline), write the summary, and return it; `echo` gets one line
    per scenario per round. Past the deadline no request starts (but the DELETEs of the
    sessions opened, for a short grace), the scenarios not run say so, and a scenario
    still waiting is abandoned: the run always ends."""
    from .discover import discover

    # Every name the run will write is judged before the endpoint sees a request.
    for path in (*evidence.paths(s.out, s.run_id).values(), evidence.summary_path(s.out, s.run_id)):
        s.sink.check(path)
    limit = default_deadline(count, every) if deadline is None else deadline
    t_start = time.monotonic()
    end = s.deadline = t_start + limit
    s.agent = s.agent or f"{PRINCIPAL}/{_version()} ({s.run_id})"
    started = time.time()
    found = discover(
        s.url,
        run_id=s.run_id,
        agent=s.agent,
        origin=s.allowed_origin(),
        timeout=s.timeout,
        limit=limit,
    )
    probe = Probe(s, found)
    rounds: list[dict[str, Any]] = []
    running: dict[str, Any] = {}
    lock = threading.Lock()

    def rounds_of_scenarios() -> None:
        for n in range(1, count + 1):
            t0 = time.monotonic()
            done: list[dict[str, Any]] = []
            current = {"round": n, "ts": int(time.time() * 1000), "scenarios": done}
            with lock:
                rounds.append(current)
            for name in s.scenarios:
                if time.monotonic() >= end:
                    v = Verdict(name, "cannot_tell", f"not run: the deadline ({limit:g} s) passed")
                else:
                    with lock:
                        running.update(round=current, scenario=name)
                    v = probe.run(name)
                with lock:
                    running.clear()
                    done.append(v.as_dict())
                echo(("" if count == 1 else f"#{n} ") + summary_line(v))
            if every and n < count:
                probe.pacer.pause(max(0.0, every - (time.monotonic() - t0)))

    worker = threading.Thread(target=rounds_of_scenarios, daemon=True)
    worker.start()
    # Every request is bounded by the deadline; this bounds what is not a request (the
    # SDK's teardown, a thread that never returns): past the cleanup grace the scenario in
    # progress is abandoned and the summary written all the same.
    worker.join(max(0.0, end + CLEANUP_GRACE + 1.0 - time.monotonic()))
    with lock:
        if worker.is_alive() and running:
            v = Verdict(
                running["scenario"],
                "cannot_tell",
                f"abandoned: still waiting on the endpoint at the deadline ({limit:g} s)",
            )
            running["round"]["scenarios"].append(v.as_dict())
            echo(("" if count == 1 else f"#{running['round']['round']} ") + summary_line(v))
        snapshot = json.loads(json.dumps(rounds, default=str))
    rounds = snapshot
    statuses = [sc["status"] for r in rounds for sc in r["scenarios"]]
    if len(rounds) < count or any(len(r["scenarios"]) < len(s.scenarios) for r in rounds):
        statuses.append("cannot_tell")  # rounds or scenarios the deadline left out
    doc = {
        "run_id": s.run_id,
        "url": s.url,
        "started": int(started * 1000),
        "ended": int(time.time() * 1000),
        "release": s.release,
        "stage": s.stage,
        "principal": "replaygate-probe",
        "user_agent": s.agent,
        "protocol_version": s.version,
        "discovery": {
            "protocol_version": found.protocol_version,
            "server": found.server_name,
            "modern": found.modern,
            "tools": [t.name for t in found.tools],
            "read_only_tools": [t.name for t in found.tools if t.read_only],
            "error": found.error,
        },
        "requests": probe.pacer.sent,
        "deadline_s": limit,
        "seconds": round(time.monotonic() - t_start, 2),
        "rounds": rounds,
        "verdict": worst(statuses),
        "files": probe.ev.files(),
    }
    path = evidence.summary_path(s.out, s.run_id)
    s.sink.write_bytes(path, (json.dumps(doc, indent=2, default=str) + "\n").encode("utf-8"))
    doc["summary"] = str(path)
    return doc


def _version() -> str:
    from replaygate import __version__

    return __version__
