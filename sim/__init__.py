"""Fleet simulator: writes the contract's files for a synthetic MCP fleet and a
truth.json of every fault it injected (see docs/simulator.md)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import numpy as np

from replaygate.audit import outputs
from replaygate.core.config import Config
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import staging

from . import bulk, writers
from .faults import CATALOGUE
from .fleet import SEC, T0, Fleet, Stage
from .scenarios import normal_session, refused_origin, sessionless
from .truth import expected_decisions, undecided_by_blind_logs

DEMO_KEY = "replaygate-demo-key"
EVENTS_PER_SESSION = 21  # measured average; --events is turned into a session count
STAGES = (  # name, scope, percent
    ("shadow-10pct", "shadow", 10.0),
    ("resume-read-25pct", "read", 25.0),
    ("write-10pct", "write", 10.0),
    ("write-10pct-v2", "write", 10.0),
)


def _timeline(f: Fleet, n_sessions: int) -> int:
    """Lay out the rollout; returns the end of the data (ms)."""
    span = max(8 * 3_600_000, n_sessions * 1_500)
    w = span // 4
    starts = [T0, T0 + w, T0 + 2 * w, T0 + 3 * w]
    for (name, scope, pct), start in zip(STAGES, starts, strict=True):
        f.stages.append(Stage(name, scope, pct, start))
    for a, b in zip(f.stages, f.stages[1:], strict=False):
        a.end = b.start
    f.rollback_at = T0 + 2 * w + w // 2
    f.stages[2].end = f.rollback_at
    f.rollout(T0, "shadow-10pct", "start", "shadow", 10.0)
    f.rollout(T0 + w - 60 * SEC, "shadow-10pct", "proceed")
    f.rollout(T0 + w, "resume-read-25pct", "start", "read", 25.0)
    f.rollout(T0 + w + w // 2, "resume-read-25pct", "hold", note="waiting for sample")
    f.rollout(T0 + 2 * w - 60 * SEC, "resume-read-25pct", "proceed")
    f.rollout(T0 + 2 * w, "write-10pct", "start", "write", 10.0)
    f.rollout(f.rollback_at, "write-10pct", "rollback", note="duplicate writes after resume")
    f.rollout(T0 + 3 * w, "write-10pct-v2", "start", "write", 10.0)
    return T0 + span


def _cohort(f: Fleet, t: int, margin: int) -> str | None:
    for stage in f.stages:
        end = stage.end if stage.end is not None else t + margin + 1
        if stage.start <= t < end - margin and f.rng.random() < stage.percent / 100:
            return stage.name
    return None


def _placements(f: Fleet, needs: str, end: int) -> tuple[int, str | None, bool]:
    """Where a fault goes: (time, cohort, resumable)."""
    rng = f.rng
    margin = 10 * 60 * SEC
    if needs == "rollback":
        assert f.rollback_at is not None, "the timeline is laid out first"
        return f.rollback_at - 3 * 60 * SEC, "write-10pct", True
    if needs in ("sessionless", "unrecorded"):
        cands = [stage for stage in f.stages[:3]]
        stage = rng.choice(cands)
        stop = stage.end if stage.end is not None else end
        return rng.randint(stage.start + margin, stop - margin), None, False
    options: list[str | None] = [None]
    for stage in f.stages[:3]:  # the current stage is kept clean for the demo story
        if needs == "resumable" and stage.scope == "shadow":
            continue
        if needs == "write" and stage.scope != "write":
            continue
        options.append(stage.name)
    if needs == "resumable":
        options = [o for o in options if o is not None]
    cohort = rng.choice(options)
    if cohort is None:
        # Baseline traffic too stays out of the current stage's window: its sessionless
        # requests (an initialize, a refused Origin) are staged by window. And out of the
        # rollback's hygiene window, which its own faults judge: a baseline fault's resume
        # there is a new stream resumed after the rollback.
        assert f.rollback_at is not None, "the timeline is laid out first"
        return rng.randint(T0 + margin, f.rollback_at - margin), None, False
    stage = f.stage_named(cohort)
    stop = stage.end if stage.end is not None else end
    return rng.randint(stage.start + margin, stop - margin), cohort, stage.scope != "shadow"


MARGIN = 15 * 60 * SEC  # sessions start this long before their stage's window ends
VECTOR_FROM_SESSIONS = 20_000  # `auto` uses the vector engine from this fleet size
STAGING_PREFIX = ".simulate-"  # the fleet is written here inside `out`, then moved


def _python_traffic(f: Fleet, n_sessions: int, end: int) -> None:
    """Ordinary traffic, every session played event by event."""
    rng = f.rng
    assert f.rollback_at is not None
    starts = sorted(rng.randint(T0, end - MARGIN) for _ in range(n_sessions))
    for t in starts:
        roll = rng.random()
        if roll < 0.1:
            sessionless(f, t)
            continue
        if roll < 0.12:
            refused_origin(f, t)
        cohort = _cohort(f, t, MARGIN)
        resumable = cohort is not None and f.stage_named(cohort).scope != "shadow"
        if f.rollback_at <= t < f.stages[3].start:
            cohort, resumable = None, False
        normal_session(f, t, cohort, resumable=resumable)


def _vector_traffic(f: Fleet, n_sessions: int, end: int, seed: int) -> None:
    """The same traffic drawn column-wise: the same shares of sessionless requests, refused
    Origins, cohorts and hygiene window as _python_traffic, each session a copy of one
    the Python engine played (bulk.py)."""
    assert f.rollback_at is not None
    nrng = np.random.default_rng([seed, 0x5EED])
    starts = np.sort(nrng.integers(T0, end - MARGIN, n_sessions, endpoint=True))
    roll = nrng.random(n_sessions)
    st_start = np.array([s.start for s in f.stages], np.int64)
    st_end = np.array([s.end if s.end is not None else end + MARGIN for s in f.stages], np.int64)
    pct = np.array([s.percent for s in f.stages]) / 100
    win = np.searchsorted(st_start, starts, side="right") - 1
    w = np.maximum(win, 0)
    joins = (win >= 0) & (starts < st_end[w] - MARGIN) & (nrng.random(n_sessions) < pct[w])
    hygiene = (f.rollback_at <= starts) & (starts < f.stages[3].start)
    names = [name for name, _, _ in bulk.SESSION_POOLS] + [bulk.SESSIONLESS, bulk.REFUSED]
    pool = np.where(joins & ~hygiene, w + 1, 0)  # the stages' pools follow the baseline's
    pool = np.where(roll < 0.1, names.index(bulk.SESSIONLESS), pool)
    refused = (roll >= 0.1) & (roll < 0.12)
    all_starts = np.concatenate([starts, starts[refused]])
    all_pools = np.concatenate([pool, np.full(int(refused.sum()), names.index(bulk.REFUSED))])
    order = np.lexsort((all_pools != names.index(bulk.REFUSED), all_starts))
    per_pool = min(800, max(40, n_sessions // 40))
    templates = bulk.capture(f, per_pool, random.Random(f.rng.getrandbits(64)))
    bulk.write_bulk(f, templates, all_starts[order], all_pools[order], names, nrng, seed)


def simulate(
    out: str | os.PathLike,
    seed: int = 7,
    sessions: int | None = None,
    events: int | None = None,
    faults: str = "all",
    fmt: str = "mixed",
    config: Config | None = None,
    rounds: int | None = None,
    server_only: bool = False,
    engine: str = "auto",
) -> dict:
    """Write a fleet into `out`; returns a summary. truth.json lists every fault.

    `server_only`: the fleet of an operator who has only the recorder's ledgers, event
    log and dispatch records plus proxy logs (no client inbox); truth then expects only
    what those sources show.

    `engine`: `python` plays every session event by event; `vector` writes ordinary
    traffic column-wise (bulk.py) and plays only the faults event by event; `auto` picks
    `vector` from VECTOR_FROM_SESSIONS sessions."""
    config = config or Config()
    if fmt not in writers.LAYOUTS:
        raise ReplaygateError(f"unknown format {fmt!r} ({', '.join(writers.LAYOUTS)})")
    if faults == "all":
        chosen = list(CATALOGUE)
    elif faults in ("", "none"):
        chosen = []
    else:
        chosen = [x.strip() for x in faults.split(",") if x.strip()]
        unknown = [x for x in chosen if x not in CATALOGUE]
        if unknown:
            raise ReplaygateError(f"unknown fault ids: {', '.join(unknown)}")
    n_sessions = sessions or (max(1, events // EVENTS_PER_SESSION) if events else 400)
    key = config.hmac_key() or DEMO_KEY.encode()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    # The fleet is written into a folder of its own inside `out`, then each file is moved
    # through the output guard: no file is written through a link planted in `out`.
    # A staging folder left by a run that was killed is removed first (ingest/staging.py):
    # `ingest` reads folders recursively and would read its half fleet.
    with staging.folder(out, STAGING_PREFIX) as stage:
        truth = _simulate_into(stage, seed, n_sessions, chosen, fmt, server_only, engine,
                               rounds, config, key)  # fmt: skip
        guard = outputs.for_database(None, config_source=config.source)
        staged = sorted(p for p in stage.iterdir() if p.name != staging.LOCK)
        for p in staged:  # every name judged before any is replaced: no half fleet
            guard.check(out / p.name)
        for p in staged:
            guard.move_into(p, out / p.name)
    return truth | {"out": str(out)}


def _simulate_into(
    out: Path,
    seed: int,
    n_sessions: int,
    chosen: list[str],
    fmt: str,
    server_only: bool,
    engine: str,
    rounds: int | None,
    config: Config,
    key: bytes,
) -> dict:
    if engine == "auto":
        engine = "vector" if n_sessions >= VECTOR_FROM_SESSIONS else "python"
    if engine not in ("python", "vector"):
        raise ReplaygateError(f"unknown engine {engine!r} (auto, python, vector)")
    rng = random.Random(seed)
    # The vector engine's gzip files use a fast compression level: at its sizes the
    # compression, not the traffic, would take the time.
    f = Fleet(
        out,
        rng,
        key,
        fmt,
        server_only=server_only,
        gz_level=9 if engine == "python" else 1,
        allowlist=config.origin_allowlist,
    )
    end = _timeline(f, n_sessions)
    if engine == "python":
        _python_traffic(f, n_sessions, end)
    else:
        _vector_traffic(f, n_sessions, end, seed)
    rounds = rounds or max(1, n_sessions // 2000)
    injected = []
    for r in range(rounds):
        for fid in chosen:
            fl = CATALOGUE[fid]
            if fl.needs == "once" and r > 0:
                continue
            t, cohort, resumable = _placements(f, fl.needs, end)
            played = fl.play(f, t, cohort, resumable)
            expect = [e for e in played if not e.get("undecided")]
            if server_only:
                expect = [e for e in expect if not e.get("client_only")]
            item: dict[str, Any] = {
                "id": f"{fid}#{r + 1}",
                "fault": fid,
                "seed": fl.seed,
                "description": fl.description,
                "cohort": cohort,
                "expect": expect,
            }
            undecided = [
                {k: v for k, v in e.items() if k != "undecided"}
                for e in played
                if e.get("undecided")
            ]
            if undecided:
                item["cannot_tell"] = undecided
            injected.append(item)
    f.close()
    life = {h: (f.ledger_first[h], t) for h, t in f.terminated_at.items()}
    window = config.reinit_window_s * 1000
    for item in injected:
        item["expect"], undecided = undecided_by_blind_logs(
            item["expect"], f.proxy_files, life, window
        )
        for u in undecided:
            if u["detector"] == "reinit_missing":  # a 404 judged neither way
                f.stats[u["stage"]].undecided_404 += 1
        if undecided:
            item["cannot_tell"] = item.get("cannot_tell", []) + undecided
    all_expect = [e for item in injected for e in item["expect"]]
    truth = {
        "seed": seed,
        "sessions": n_sessions,
        "events": f.events_written,
        "format": fmt,
        "server_only": server_only,
        "hmac_key_env": config.hmac_key_env,
        "stages": [
            {"stage": s.name, "scope": s.scope, "start": s.start, "end": s.end} for s in f.stages
        ],
        "rollback_at": f.rollback_at,
        "faults": injected,
        "decisions": expected_decisions(f, all_expect, config),
    }
    (out / "truth.json").write_text(json.dumps(truth, indent=1, sort_keys=True) + "\n")
    return {
        "out": str(out),
        "sessions": n_sessions,
        "events": f.events_written,
        "faults": len(injected),
        "findings_expected": len(all_expect),
        "engine": engine,
    }
