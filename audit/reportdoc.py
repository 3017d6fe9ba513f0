"""The audit report as data: everything an auditor needs to read and recompute a decision.

Deterministic: the same database and configuration give the same document. Times
come from the data (the as-of time is the newest record), never from the clock.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from replaygate.core.config import Config
from replaygate.core.db import one_row
from replaygate.core.errors import ReplaygateError
from replaygate.core.timefmt import iso_ms as _iso
from replaygate.ingest import identity
from replaygate.ingest.readers import GZIP
from replaygate.queries import catalog, escape, fieldguide, freshness, gatedefs, gates, runner

from . import decisionlog

REPORT_VERSION = "1"


def _inputs(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    rows = con.execute(
        """SELECT path, format, compression, size, sha256, rows_loaded, rows_quarantined,
                  rows_by_type, abspath, consumed, digest, raw_digest
           FROM files WHERE status = 'loaded' ORDER BY path"""
    ).fetchall()
    out = []
    for p, f, c, z, s, r, q, t, abspath, consumed, digest, raw in rows:
        gz = c == GZIP
        if not s:
            # A file read again after it grew: the ingest left its SHA-256 to whoever
            # needs it (hashing the whole file again every cycle would cost the append
            # more than its own rows): what was read of it, if it is still there unchanged.
            s = identity.read_sha256(abspath, consumed, digest, gz, raw)
            z = z if gz or s is None else consumed
        out.append(
            {
                "path": p,
                "format": f,
                "compression": c,
                "bytes": z,
                "sha256": s,
                "rows": r,
                "quarantined": q,
                "rows_by_type": json.loads(t) if t else {},
            }
        )
    return out


def _scope(con: duckdb.DuckDBPyConnection, stage: dict[str, Any]) -> dict[str, Any]:
    # The stage's cohort: sessions whose cohort key is one of the stage's (macros.sql).
    in_cohort = """stage_key(true, cohort) IN
                   (SELECT key FROM a_stage_windows WHERE stage = $s)"""
    cohort = one_row(
        con.execute(f"SELECT count(*) FROM a_sessions WHERE {in_cohort}", {"s": stage["stage"]})
    )[0]
    revisions = con.execute(
        f"""SELECT coalesce(protocol_version, 'unknown') AS v, count(*) FROM a_sessions
           WHERE {in_cohort} GROUP BY v ORDER BY v""",
        {"s": stage["stage"]},
    ).fetchall()
    return {
        "stage": stage["stage"],
        "scope": stage["scope"],
        "window": stage["window"],
        "rolled_back": stage["rolled_back"],
        "cohort_sessions": cohort,
        "protocol_revisions": {v: n for v, n in revisions},
    }


def _findings(con: duckdb.DuckDBPyConnection, stage: str, top: int) -> dict[str, Any]:
    summary = con.execute(
        """SELECT detector, severity, count(*) FROM findings WHERE stage = $s
           GROUP BY ALL ORDER BY detector, severity""",
        {"s": stage},
    ).fetchall()
    by_detector: dict[str, dict[str, Any]] = {}
    for det, sev, n in summary:
        by_detector.setdefault(det, {"count": 0, "by_severity": {}})
        by_detector[det]["count"] += n
        by_detector[det]["by_severity"][sev] = n
    rows = runner.list_findings(con, stage=stage)
    tops: dict[str, list[Any]] = {}
    for f in rows:
        bucket = tops.setdefault(f["detector"], [])
        if len(bucket) < top:
            bucket.append(f)
    for det, items in tops.items():
        by_detector[det]["top"] = items
    return {
        "total": sum(d["count"] for d in by_detector.values()),
        "by_detector": dict(sorted(by_detector.items())),
    }


# A timeline entry as the report keeps it: the row's fields (the history's one list of
# them) but the stage (a report is of one), the evaluation's detail (its gates are shown
# as gates) and the chain's link, and the change the entry is.
_HISTORY_KEYS = (
    *(f for f in decisionlog.FIELDS if f not in ("stage", "reasons", "gates", "prev_sha256")),
    "previous",
    "until",
    "evaluations",
)


def _decision_history(con: duckdb.DuckDBPyConnection, stage: str) -> dict[str, Any]:
    """When the stage's recorded decision changed, and what operators did about it."""
    path = decisionlog.file_for(con)
    decisionlog.checked(con, path)  # a broken history stops the report (HistoryBroken)
    timeline = decisionlog.timeline(path, stage)
    return {
        "timeline": [{k: e.get(k) for k in _HISTORY_KEYS} for e in timeline],
        "chain": "intact",
    }


def build(
    con: duckdb.DuckDBPyConnection,
    config: Config,
    stage: str | None = None,
    *,
    db_path: str = "replaygate.duckdb",
    config_path: str | None = None,
    top: int = 5,
) -> dict[str, Any]:
    """The report document (the JSON format is exactly this)."""
    from replaygate import __version__

    doc = gates.document(con, config, stage=stage)
    if not doc["stages"]:
        raise ReplaygateError("no rollout stages in the data: nothing to report on")
    judged = doc["stages"][0]
    # Records dated after the last ingest are left out (freshness.py): a clock years
    # ahead does not date the report.
    fresh = freshness.sources(con)
    as_of = freshness.as_of(
        {t: fresh[t] for t in ("proxy", "sessions", "events", "rollout") if t in fresh}
    )
    reproduce = ["replaygate", "report", "--db", db_path, "--stage", judged["stage"]]
    if config_path:
        reproduce += ["--config", config_path]
    methodology = [
        {
            "detector": q.name,
            "severity": q.header.get("severity"),
            "invariant": q.invariant,
            "needs": list(q.needs),
        }
        for q in catalog.detectors().values()
    ]
    gate_rows = [
        {
            k: g[k]
            for k in (
                "id",
                "status",
                "value",
                "threshold",
                "sample",
                "min_sample",
                "upper_bound_95",
                "reason",
            )
        }
        | {
            "title": gates.title(g["id"]),
            "display_status": gates.display_status(g),
            "display_value": gates.display_value(g),
            "display_threshold": gates.display_threshold(g),
            "display_bound": gates.display_bound(g),
            "evidence_count": g["evidence"]["count"],
            "evidence_detectors": g["evidence"]["detectors"],
        }
        for g in judged["gates"]
    ]
    quarantined = one_row(con.execute("SELECT count(*) FROM quarantine"))[0]
    found = _findings(con, judged["stage"], top)
    return {
        "report_version": REPORT_VERSION,
        "tool": {"name": "replaygate", "version": __version__},
        "as_of": _iso(as_of),
        "scope": _scope(con, judged),
        "decision": judged["decision"],
        "reasons": judged["reasons"],
        "gates": gate_rows,
        "by_revision": judged["by_revision"],
        "rollback_verification": doc["rollback_verification"],
        "decision_history": _decision_history(con, judged["stage"]),
        "findings": found,
        # The guide entries of the detectors behind this stage's findings (the whole
        # guide: docs/field-guide.md).
        "field_guide": [fieldguide.entry(d) for d in found["by_detector"]],
        "coverage": runner.coverage_doc(con),
        # This stage's units that no file could show a needed fact for (by the stage rule).
        "cannot_tell": judged["cannot_tell"],
        "inputs": {"files": _inputs(con), "quarantined_rows": quarantined},
        "configuration": {**gatedefs.effective_settings(config), "source": config.source},
        "methodology": methodology,
        "redaction": (
            "Session identifiers appear only as HMAC-SHA256 digests (key from the "
            f"environment variable {config.hmac_key_env}, never stored). Raw Mcp-Session-Id "
            "values found in proxy logs were replaced by their HMAC during ingest and were "
            "not stored, logged or reported; quarantined rows keep no content."
        ),
        # Quoted for a POSIX shell: a stage name or path cannot add a command.
        "reproduce": escape.shell_command(reproduce),
    }
