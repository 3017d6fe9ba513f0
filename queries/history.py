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
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from replaygate.ingest.config import Config
from replaygate.ingest.db import get_meta
from replaygate.ingest.errors import ReplaygateError

DECISIONS = ("PROCEED", "HOLD", "ROLLBACK")
KINDS = ("evaluation", "ack", "override")
SUFFIX = ".history.jsonl"
# A connection may be told where its history is (a working copy of the database).
_VARIABLE = "replaygate_history_file"

# The fields of a row, in the order of the table; `sha256` covers all the others.
FIELDS = (
    "seq",
    "recorded_at",
    "kind",
    "source",
    "stage",
    "release",
    "decision",
    "reasons",
    "gates",
    "data_version",
    "config_sha256",
    "tool_version",
    "actor",
    "note",
    "in_force",
    "prev_sha256",
)
_GATE_KEYS = ("status", "value", "sample", "min_sample", "threshold")

# The table the detectors read: a temporary copy of the file, made by the analysis.
_TABLE = """
CREATE OR REPLACE TEMP TABLE decision_history AS
SELECT seq, recorded_at::TIMESTAMPTZ AS recorded_at, kind, source, stage, release,
       decision, reasons::JSON AS reasons, gates::JSON AS gates, data_version,
       config_sha256, tool_version, actor, note, in_force, prev_sha256, sha256
FROM rg_history_rows
"""
_COLUMNS = (*FIELDS, "sha256")
# The file's rows as read, before _TABLE types them. Bound parameters, not Arrow: building
# an Arrow array from Python values imports pandas (0.7 s), more than the few rows cost.
_ROWS = (
    "CREATE OR REPLACE TEMP TABLE rg_history_rows ("
    + ", ".join(f"{f} {'BIGINT' if f == 'seq' else 'VARCHAR'}" for f in _COLUMNS)
    + ")"
)


# -- where the history is --------------------------------------------------------------


def file_for_db(db: str | os.PathLike[str]) -> Path:
    """The history file of a database file."""
    p = Path(db)
    return p.with_name(p.name + SUFFIX)


def bind(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Tell a connection where its history is (for a working copy of a database whose
    history belongs to the published file)."""
    con.execute(f"SET VARIABLE {_VARIABLE} = $p", {"p": str(path)})


def file_for(con: duckdb.DuckDBPyConnection) -> Path | None:
    """The history file of a connection's database (None for an in-memory database)."""
    bound = con.execute(f"SELECT getvariable('{_VARIABLE}')").fetchall()[0][0]
    if bound:
        return Path(bound)
    db = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"
    ).fetchall()[0][0]
    return file_for_db(db) if db else None


def version(con: duckdb.DuckDBPyConnection) -> str:
    """Changes with every append (findings that read the history are current for it)."""
    path = file_for(con)
    try:
        return str(path.stat().st_size) if path else "0"
    except FileNotFoundError:
        return "0"


# -- the row format ----------------------------------------------------------------------


def iso(ts: datetime) -> str:
    """Times in the history: UTC with microseconds, as stored and as hashed."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as given on the command line (no zone: UTC)."""
    try:
        ts = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ReplaygateError(f"not an ISO 8601 time: {text!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def canonical(row: dict[str, Any]) -> bytes:
    """The bytes a row's sha256 is computed over (docs/audit.md)."""
    body = {k: row.get(k) for k in FIELDS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(row: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(row)).hexdigest()


def _line(row: dict[str, Any]) -> str:
    return json.dumps({k: row.get(k) for k in (*FIELDS, "sha256")}, ensure_ascii=False) + "\n"


def _parse(text: str) -> list[dict[str, Any]]:
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = {"seq": f"line {n}", "sha256": None, "unreadable": True}
        if not isinstance(row, dict):
            row = {"seq": f"line {n}", "sha256": None, "unreadable": True}
        out.append(row)
    return out


# -- reading ---------------------------------------------------------------------------


def read(path: Path | None) -> list[dict[str, Any]]:
    """Every row of a history file, oldest first (none if there is no file)."""
    if path is None:
        return []
    try:
        return _parse(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []


def _valid(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r.get("unreadable")]


def in_force(
    path: Path | None, stage: str, at: datetime | None = None, release: str | None = None
) -> dict[str, Any] | None:
    """The newest evaluation of a stage recorded at or before `at` (default: now)."""
    limit = iso(at or datetime.now(UTC))
    found = None
    for r in _valid(read(path)):
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


def timeline(path: Path | None, stage: str | None = None) -> list[dict[str, Any]]:
    """What an auditor reads: each change of a stage's evaluated decision, and every
    operator action, oldest first. Re-evaluations that kept the decision are folded into
    the change before them (`evaluations` counts them, `until` is the next change)."""
    out: list[dict[str, Any]] = []
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in _valid(read(path)):
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


def verify_chain(history: list[dict[str, Any]]) -> str | None:
    """The first row whose digest or link does not hold (None: the chain is intact)."""
    prev = None
    for r in history:
        if r.get("unreadable"):
            return f"decision history {r['seq']}: not a JSON object"
        if r.get("prev_sha256") != prev:
            return f"decision history row {r.get('seq')}: previous-row link broken"
        if digest(r) != r.get("sha256"):
            return f"decision history row {r.get('seq')}: content changed"
        prev = r["sha256"]
    return None


def load_table(con: duckdb.DuckDBPyConnection) -> int:
    """(Re)create the `decision_history` table the detectors read; its row count."""
    rows = _valid(read(file_for(con)))

    def cell(r: dict[str, Any], f: str) -> Any:
        v = r.get(f)
        if f in ("reasons", "gates") and v is not None:
            v = json.dumps(v, sort_keys=True)
        return v if f == "seq" or v is None else str(v)

    con.execute(_ROWS)
    try:
        if rows:
            con.executemany(
                f"INSERT INTO rg_history_rows VALUES ({', '.join('?' * len(_COLUMNS))})",
                [[cell(r, f) for f in _COLUMNS] for r in rows],
            )
        con.execute(_TABLE)
    finally:
        con.execute("DROP TABLE IF EXISTS rg_history_rows")
    return len(rows)


# -- appending -------------------------------------------------------------------------


def _now(now: datetime | None) -> datetime:
    return (now or datetime.now(UTC)).astimezone(UTC)


def _append(
    path: Path | None, make_row: Callable[[list[dict[str, Any]]], dict[str, Any] | None]
) -> dict[str, Any] | None:
    """Append the row `make_row(existing rows)` returns (None: nothing), under an
    exclusive lock, so appends from several processes keep one chain."""
    if path is None:
        raise ReplaygateError("the decision history needs a database file, not :memory:")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            fh.seek(0)
            existing = _parse(fh.read())
            row = make_row(existing)
            if row is None:
                return None
            last = existing[-1] if existing else None
            row["seq"] = (
                (int(last["seq"]) + 1)
                if last and isinstance(last["seq"], int)
                else (len(existing) + 1)
            )
            row["prev_sha256"] = last.get("sha256") if last else None
            row["sha256"] = digest(row)
            fh.seek(0, os.SEEK_END)
            fh.write(_line(row))
            fh.flush()
            os.fsync(fh.fileno())
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
    return row


def _gate_values(stage: dict[str, Any]) -> dict[str, Any]:
    gates = {g["id"]: {k: g.get(k) for k in _GATE_KEYS} for g in stage["gates"]}
    # Through JSON once, so the hashed form is exactly what a read gives back.
    values: dict[str, Any] = json.loads(json.dumps(gates, sort_keys=True, default=str))
    return values


def _config_digest(config: Config) -> str:
    # The digest the reports show (every setting in force, defaults included).
    from .gates import effective_settings

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
    out = []
    for st in doc.get("stages", []):
        row = {
            "recorded_at": ts,
            "kind": "evaluation",
            "source": source,
            "stage": st["stage"],
            "release": st.get("release"),
            "decision": st["decision"],
            "reasons": list(st["reasons"]),
            "gates": _gate_values(st),
            "data_version": data_version,
            "config_sha256": _config_digest(config),
            "tool_version": _tool_version(),
            "actor": None,
            "note": None,
            "in_force": None,
        }

        def make(
            existing: list[dict[str, Any]], row: dict[str, Any] = row
        ) -> dict[str, Any] | None:
            if only_changes:
                same = [
                    r
                    for r in _valid(existing)
                    if r.get("kind") == "evaluation"
                    and (r.get("stage"), r.get("release")) == (row["stage"], row["release"])
                ]
                keys = ("decision", "reasons", "gates", "data_version", "config_sha256")
                if same and all(same[-1].get(k) == row[k] for k in keys):
                    return None
            return row

        appended = _append(path, make)
        if appended is not None:
            out.append(appended)
    return out


def record_action(
    path: Path,
    kind: str,
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
    if kind not in ("ack", "override"):
        raise ReplaygateError(f"unknown operator action {kind!r}")
    if not by or not by.strip():
        raise ReplaygateError("say who acts: --by NAME")
    if decision is not None and decision not in DECISIONS:
        raise ReplaygateError(f"unknown decision {decision!r} ({', '.join(DECISIONS)})")
    if kind == "override" and decision is None:
        raise ReplaygateError("an override needs --decision")
    if kind == "override" and (not reason or not reason.strip()):
        raise ReplaygateError("an override needs --reason")
    ts = _now(now)

    def make(existing: list[dict[str, Any]]) -> dict[str, Any]:
        current = None
        for r in _valid(existing):
            if (
                r.get("kind") == "evaluation"
                and r.get("stage") == stage
                and (release is None or r.get("release") == release)
                and r["recorded_at"] <= iso(ts)
            ):
                current = r
        if current is None:
            raise ReplaygateError(
                f"no recorded decision for stage {stage!r}: record one first "
                "(replaygate gates --stage STAGE --record)"
            )
        if kind == "ack" and decision is not None and decision != current["decision"]:
            raise ReplaygateError(
                f"the decision in force for {stage!r} is {current['decision']} "
                f"(recorded {current['recorded_at']}), not {decision}"
            )
        return {
            "recorded_at": iso(ts),
            "kind": kind,
            "source": kind,
            "stage": stage,
            "release": release if release is not None else current.get("release"),
            "decision": decision if kind == "override" else current["decision"],
            "reasons": None,
            "gates": None,
            "data_version": current.get("data_version"),
            "config_sha256": current.get("config_sha256"),
            "tool_version": _tool_version(),
            "actor": by.strip(),
            "note": reason.strip() if reason else None,
            "in_force": current["decision"],
        }

    row = _append(path, make)
    assert row is not None  # make() returns a row or raises
    return row
