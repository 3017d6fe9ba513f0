"""`replaygate probe`: a synthetic MCP client that runs resumability scenarios against a
live Streamable HTTP endpoint — through its real proxy — and writes what it received as
client evidence (inbox receipts, and its own session and stream facts) for `ingest`, plus
a `probe-<run>.json` summary. Built on the official MCP Python SDK client (discovery and
the 2026-07-28 re-send) and raw HTTP where the SDK hides what a probe needs (cutting a
stream, choosing a cursor, a foreign Origin). Needs the `probe` extra:
`pip install 'replaygate[probe]'`."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from .scenarios import DEFAULT_SCENARIOS, SCENARIOS, Probe, Settings, Verdict, summary_line

__all__ = ["DEFAULT_SCENARIOS", "SCENARIOS", "Settings", "EXIT_CODES", "new_run_id", "run"]

# Like `replaygate gates`: 0 every scenario passed, 2 some could not tell, 3 some failed.
EXIT_CODES = {"pass": 0, "skipped": 0, "cannot_tell": 2, "fail": 3}
_RANK = {"pass": 0, "skipped": 0, "cannot_tell": 1, "fail": 2}


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def worst(statuses: list[str]) -> str:
    return max(statuses, key=lambda s: _RANK[s], default="pass")


def run(
    s: Settings,
    *,
    count: int = 1,
    every: float | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the scenarios `count` times (`every` seconds apart), write the summary, and
    return it; `echo` gets one line per scenario per round."""
    from .discover import discover

    s.agent = s.agent or f"replaygate-probe/{_version()} ({s.run_id})"
    started = time.time()
    found = discover(
        s.url, run_id=s.run_id, agent=s.agent, origin=s.allowed_origin(), timeout=s.timeout
    )
    probe = Probe(s, found)
    rounds: list[dict[str, Any]] = []
    for n in range(1, count + 1):
        t0 = time.monotonic()
        verdicts: list[Verdict] = []
        for name in s.scenarios:
            v = probe.run(name)
            verdicts.append(v)
            echo(("" if count == 1 else f"#{n} ") + summary_line(v))
        rounds.append(
            {
                "round": n,
                "ts": int(time.time() * 1000),
                "scenarios": [v.as_dict() for v in verdicts],
            }
        )
        if every and n < count:
            time.sleep(max(0.0, every - (time.monotonic() - t0)))
    statuses = [sc["status"] for r in rounds for sc in r["scenarios"]]
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
        "rounds": rounds,
        "verdict": worst(statuses),
        "files": probe.ev.files(),
    }
    path = s.out / f"probe-{s.run_id}.json"
    path.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    doc["summary"] = str(path)
    return doc


def _version() -> str:
    from replaygate import __version__

    return __version__
