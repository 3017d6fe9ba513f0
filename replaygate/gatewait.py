"""`replaygate gates --wait`: ingest (when given paths) and gate one stage again and again
until it concludes (PROCEED or ROLLBACK) or the time is up (HOLD) — one command for a CD
step that waits for its canary's evidence."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from replaygate.api import Config, Decision, ReplaygateError

from . import duration
from .options import progress_note, say


def ingest_paths(db: str, paths: list[str], conf: Config, source: str = "auto") -> None:
    """Load what is new under paths and refresh the analysis (one short write)."""
    from replaygate import api
    from replaygate.api import db as dbm
    from replaygate.api import ingest

    con = dbm.connect(db, role="ingest")
    try:
        report = ingest(con, list(paths), conf, source=source)
        api.analyse(con, conf, note=progress_note)
    finally:
        dbm.close(con)
    for w in report.warnings:
        say(f"warning: {w}", err=True)


def evaluate_once(db: str, conf: Config, stage: str | None, release: str | None) -> dict[str, Any]:
    """The gates document of the one stage meant by stage/release (newest by default)."""
    from replaygate import api

    con = api.open_analysed(db, conf, note=progress_note)
    try:
        key = api.resolve_stage(con, stage, release)
        return api.gates_doc(con, conf, stage=key)
    finally:
        con.close()


def wait(
    db: str,
    conf: Config,
    stage: str | None,
    release: str | None,
    paths: list[str],
    timeout_s: float | None,
    every_s: float,
    source: str = "auto",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Evaluate until PROCEED or ROLLBACK, or until timeout_s has passed (then the last
    evaluation, whose decision is HOLD). Without timeout_s: one evaluation."""
    deadline = None if timeout_s is None else clock() + timeout_s
    n = 0
    while True:
        n += 1
        if paths:
            ingest_paths(db, paths, conf, source)
        try:
            doc, missing = evaluate_once(db, conf, stage, release), None
        except ReplaygateError as exc:
            # The stage may not be in the rollout log yet: during a wait, that is a HOLD.
            if deadline is None or "no stage" not in str(exc):
                raise
            doc, missing = None, exc
        if deadline is None:
            assert doc is not None  # without a deadline, a failed evaluation raised above
            return doc
        stages = doc["stages"] if doc is not None else []
        decision = stages[0]["decision"] if stages else Decision.HOLD
        shown = stages[0]["stage"] if stages else (stage or release)
        left = deadline - clock()
        say(
            f"gates {shown}: {decision} (evaluation {n}, {duration.show(max(left, 0))} left)",
            err=True,
        )
        if decision in (Decision.PROCEED, Decision.ROLLBACK) or left <= 0:
            break
        sleep(min(every_s, left))
    if missing is not None:
        raise ReplaygateError(f"{missing} (waited {duration.show(timeout_s or 0)})")
    assert doc is not None  # the last evaluation either succeeded or set `missing`
    return doc
