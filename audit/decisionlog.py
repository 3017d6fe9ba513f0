"""Decision history: what replaygate decided, when, on which data, and what operators did.

Every recorded evaluation (from `gates --record`, `watch` or `serve`) and every operator
action (`ack`, `override`) is one line appended to the history file next to the
database (`NAME.history.jsonl` for `NAME`). A file of its own, not a table: `watch`
replaces the database file as it publishes, and an operator must be able to record an
action while it runs; appends from several processes are serialised by a file lock.

The decision in force for a stage at a time T is the newest evaluation recorded at or
before T; it never depends on the data or configuration as they are today.

Rows are chained: each row's `sha256` covers its own fields and the previous row's
`sha256`, so editing or deleting a row breaks the chain from there on (`verify_chain`).
The canonical form is documented in docs/audit.md so a third party can recompute it.

The head of the chain is anchored outside the file: the database keeps the number of
rows and the newest row's digest (`history_rows`, `history_head` in `meta`; advanced
by every analysis after it checked the file against them) and a bundle's statement
carries them too, so deleting the newest rows is a break like any other. Every reader
goes through `checked()`, which raises `HistoryBroken`: a broken history is an error
wherever it is read, never silently used. A line cut short by a crash mid-append is
skipped (its write never completed, and the next row links across it); the next append
starts on a fresh line, so nothing is ever glued onto it.

The file's format, its chain and its anchor, and the table the detectors read, are the
analysis' (`replaygate.queries.decisionfile`, re-exported here): this module records and
reads the history for people.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from replaygate.core.config import Config
from replaygate.core.db import get_meta
from replaygate.core.errors import ReplaygateError
from replaygate.queries.decisionfile import (
    ANCHOR_HEAD,
    ANCHOR_ROWS,
    DECISIONS,
    FIELDS,
    OPTIONAL_FIELDS,
    SUFFIX,
    HistoryBroken,
    against_anchor,
    anchor,
    bind,
    canonical,
    checked,
    checked_for_db,
    digest,
    file_for,
    file_for_db,
    iso,
    load_table,
    parse_rows,
    parse_time,
    read,
    row_line,
    verify_chain,
    version,
)
from replaygate.queries.gatedefs import effective_settings

__all__ = [
    "ANCHOR_HEAD",
    "ANCHOR_ROWS",
    "DECISIONS",
    "FIELDS",
    "OPTIONAL_FIELDS",
    "SUFFIX",
    "HistoryBroken",
    "against_anchor",
    "anchor",
    "as_of_data",
    "bind",
    "canonical",
    "checked",
    "checked_for_db",
    "digest",
    "file_for",
    "file_for_db",
    "in_force",
    "iso",
    "load_table",
    "parse_rows",
    "parse_time",
    "read",
    "record_action",
    "record_evaluation",
    "row_line",
    "timeline",
    "verify_chain",
    "version",
]

# The gate values an evaluation row keeps.
_GATE_KEYS = ("status", "value", "sample", "min_sample", "threshold")

# -- reading, for people -----------------------------------------------------------------


def in_force(
    path: Path | None, stage: str, at: datetime | None = None, release: str | None = None
) -> dict[str, Any] | None:
    """The newest evaluation of a stage recorded at or before wall-clock `at` (default:
    now)."""
    limit = iso(at or datetime.now(UTC))
    found = None
    for r in checked(None, path):
        if r.get("kind") != "evaluation" or r.get("stage") != stage:
            continue
        if release is not None and r.get("release") != release:
            continue
        # Same fixed-width UTC format: text order is time order.
        if r["recorded_at"] > limit:
            continue
        if found is None or r["recorded_at"] >= found["recorded_at"]:
            found = r
    return found


def as_of_data(
    path: Path | None, stage: str, at: datetime, release: str | None = None
) -> dict[str, Any] | None:
    """The decision as of data time `at`: the newest evaluation of the stage made on
    data up to `at` (its `data_end`). When every evaluation was made later, on data
    reaching past `at`, the first of those, marked `evaluated_later` (the decision was
    not recorded while the data stood at `at`; this is the first that saw it). Rows
    recorded before `data_end` was kept are not considered."""
    before, after = None, None
    for r in checked(None, path):
        if r.get("kind") != "evaluation" or r.get("stage") != stage or not r.get("data_end"):
            continue
        if release is not None and r.get("release") != release:
            continue
        end = parse_time(r["data_end"])
        if end <= at:
            if before is None or (end, r["seq"]) >= (parse_time(before["data_end"]), before["seq"]):
                before = r
        elif after is None or r["seq"] < after["seq"]:
            after = r
    if before is not None:
        return {**before, "evaluated_later": False}
    return {**after, "evaluated_later": True} if after is not None else None


def timeline(path: Path | None, stage: str | None = None) -> list[dict[str, Any]]:
    """What an auditor reads: each change of a stage's evaluated decision, and every
    operator action, oldest first. Re-evaluations that kept the decision are folded into
    the change before them (`evaluations` counts them, `until` is the next change)."""
    out: list[dict[str, Any]] = []
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in checked(None, path):
        if stage is not None and r.get("stage") != stage:
            continue
        key = (r.get("stage"), r.get("release"))
        if r.get("kind") != "evaluation":
            out.append({**r, "previous": None, "until": None, "evaluations": None})
            continue
        prev = last.get(key)
        if prev is not None and prev["decision"] == r["decision"]:
            prev["evaluations"] += 1
            prev["last_evaluated"] = r["recorded_at"]
            continue
        entry = {**r, "previous": prev["decision"] if prev else None, "evaluations": 1}
        entry["last_evaluated"], entry["until"] = r["recorded_at"], None
        if prev is not None:
            prev["until"] = r["recorded_at"]
        last[key] = entry
        out.append(entry)
    return out


# -- appending -------------------------------------------------------------------------


def _now(now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)).astimezone(UTC)


_TAIL = 64 * 1024


def _newest_first(fh: Any) -> Iterator[dict[str, Any]]:
    """The rows of an open history file from its end backwards, read a chunk at a time
    (an append must not read the whole history to find the rows it needs)."""
    end = fh.seek(0, os.SEEK_END)
    carry = b""
    while end > 0:
        start = max(0, end - _TAIL)
        fh.seek(start)
        lines = (fh.read(end - start) + carry).split(b"\n")
        carry = lines.pop(0) if start > 0 else b""
        for raw in reversed(lines):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError:
                continue  # a line cut short
            if isinstance(row, dict) and isinstance(row.get("seq"), int):
                yield row
        end = start


def _tail(fh: Any) -> tuple[dict[str, Any] | None, bool]:
    """The newest row of an open history file, and whether the file ends in the middle
    of a line."""
    size = fh.seek(0, os.SEEK_END)
    if size == 0:
        return None, False
    fh.seek(size - 1)
    torn = fh.read(1) != b"\n"
    return next(_newest_first(fh), None), torn


def _append(
    path: Path | None,
    make_rows: Callable[[Callable[[], Iterator[dict[str, Any]]]], list[dict[str, Any]]],
) -> list[dict[str, Any]]:
    """Append the rows `make_rows(newest_first)` returns (none: nothing; `newest_first()`
    reads rows from the end backwards, as far as the caller looks), under an exclusive
    lock, so appends from several processes keep one chain; the rows appended."""
    if path is None:
        raise ReplaygateError("the decision history needs a database file, not :memory:")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                return _append_locked(fh, make_rows)
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
    except OSError as exc:
        raise ReplaygateError(
            f"cannot append to the decision history {path}: {exc.strerror or exc}"
        ) from None


def _append_locked(
    fh: Any, make_rows: Callable[[Callable[[], Iterator[dict[str, Any]]]], list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    rows = make_rows(lambda: _newest_first(fh))
    if not rows:
        return []
    last, torn = _tail(fh)
    seq, prev = (int(last["seq"]), last.get("sha256")) if last else (0, None)
    lines = []
    for row in rows:
        seq += 1
        row["seq"], row["prev_sha256"] = seq, prev
        row["sha256"] = prev = digest(row)
        lines.append(row_line(row))
    fh.seek(0, os.SEEK_END)
    # After a crash mid-append the file ends inside a line: start on a fresh one, so
    # the cut line stays one unreadable line instead of swallowing these rows. One
    # write of whole lines: a stop in between leaves no half line of this append.
    fh.write((b"\n" if torn else b"") + "".join(lines).encode("utf-8"))
    fh.flush()
    os.fsync(fh.fileno())
    written, torn = _tail(fh)
    if torn or written is None or written.get("sha256") != rows[-1]["sha256"]:
        raise ReplaygateError("the decision history did not take the rows (read back differs)")
    return rows


def _gate_values(stage: dict[str, Any]) -> dict[str, Any]:
    gates = {g["id"]: {k: g.get(k) for k in _GATE_KEYS} for g in stage["gates"]}
    # Through JSON once, so the hashed form is exactly what a read gives back.
    values: dict[str, Any] = json.loads(json.dumps(gates, sort_keys=True, default=str))
    return values


def _config_digest(config: Config) -> str:
    # The digest the reports show (every setting in force, defaults included).
    return str(effective_settings(config)["sha256"])


def _tool_version() -> str:
    from replaygate import __version__

    return __version__


def record_evaluation(
    con: duckdb.DuckDBPyConnection,
    doc: dict[str, Any],
    config: Config,
    source: str,
    *,
    now: datetime | None = None,
    only_changes: bool = False,
) -> list[dict[str, Any]]:
    """Append one row per stage of a gates document (`api.gates_doc`) to the history of
    `con`'s database. `con` is the connection the document was evaluated on (its data
    version is recorded). With `only_changes`, a stage whose decision, reasons, gate
    values, data version and configuration equal its last recorded evaluation is not
    recorded again (for loops that re-evaluate unchanged data).
    """
    path = file_for(con)
    ts = iso(_now(now))
    data_version = get_meta(con, "data_version", "0")
    config_sha256, tool_version = _config_digest(config), _tool_version()
    rows = []
    for stage in doc.get("stages", []):
        row = {
            "recorded_at": ts,
            "kind": "evaluation",
            "source": source,
            "stage": stage["stage"],
            "release": stage.get("release"),
            "decision": stage["decision"],
            "reasons": list(stage["reasons"]),
            "gates": _gate_values(stage),
            "data_version": data_version,
            "config_sha256": config_sha256,
            "tool_version": tool_version,
            "actor": None,
            "note": None,
            "in_force": None,
        }
        data_end = (stage.get("window") or {}).get("data_end")
        if data_end:
            # What time of the data the evaluation had seen (`history --at` asks by it).
            row["data_end"] = data_end
        rows.append(row)

    def make(newest_first: Callable[[], Iterator[dict[str, Any]]]) -> list[dict[str, Any]]:
        if not only_changes:
            return rows
        # Each stage's last recorded evaluation, found in one pass from the end that
        # stops once every stage is found (a pass per stage made 100,000 stages
        # quadratic: hours).
        wanted = {(r["stage"], r["release"]) for r in rows}
        last: dict[tuple[Any, Any], dict[str, Any]] = {}
        for r in newest_first():
            key = (r.get("stage"), r.get("release"))
            if r.get("kind") == "evaluation" and key in wanted and key not in last:
                last[key] = r
                if len(last) == len(wanted):
                    break
        keys = ("decision", "reasons", "gates", "data_version", "config_sha256")
        return [
            row
            for row in rows
            if not (
                (same := last.get((row["stage"], row["release"])))
                and all(same.get(k) == row[k] for k in keys)
            )
        ]

    # One append for the whole document: one lock, one write, one sync.
    return _append(path, make) if rows else []


def record_action(
    path: Path,
    action: str,
    stage: str,
    *,
    by: str,
    decision: str | None = None,
    reason: str | None = None,
    release: str | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Append an operator action: `ack` (the decision in force was seen) or `override`
    (the operator decides otherwise, with a reason)."""
    if action not in ("ack", "override"):
        raise ReplaygateError(f"unknown operator action {action!r}")
    if not by or not by.strip():
        raise ReplaygateError("say who acts: --by NAME")
    if decision is not None and decision not in DECISIONS:
        raise ReplaygateError(f"unknown decision {decision!r} ({', '.join(DECISIONS)})")
    if action == "override" and decision is None:
        raise ReplaygateError("an override needs --decision")
    if action == "override" and (not reason or not reason.strip()):
        raise ReplaygateError("an override needs --reason")
    ts = _now(now)

    def make(newest_first: Callable[[], Iterator[dict[str, Any]]]) -> dict[str, Any]:
        current = None
        for r in newest_first():
            if (
                r.get("kind") == "evaluation"
                and r.get("stage") == stage
                and (release is None or r.get("release") == release)
                and r["recorded_at"] <= iso(ts)
            ):
                current = r  # the last such row in the file, as before
                break
        if current is None:
            raise ReplaygateError(
                f"no recorded decision for stage {stage!r}: record one first "
                "(replaygate gates --stage STAGE --record)"
            )
        if action == "ack" and decision is not None and decision != current["decision"]:
            raise ReplaygateError(
                f"the decision in force for {stage!r} is {current['decision']} "
                f"(recorded {current['recorded_at']}), not {decision}"
            )
        return {
            "recorded_at": iso(ts),
            "kind": action,
            "source": action,
            "stage": stage,
            "release": release if release is not None else current.get("release"),
            "decision": decision if action == "override" else current["decision"],
            "reasons": None,
            "gates": None,
            "data_version": current.get("data_version"),
            "config_sha256": current.get("config_sha256"),
            "tool_version": _tool_version(),
            "actor": by.strip(),
            "note": reason.strip() if reason else None,
            "in_force": current["decision"],
        }

    (row,) = _append(path, lambda newest_first: [make(newest_first)])
    return row
