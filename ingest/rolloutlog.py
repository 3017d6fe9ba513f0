"""Write the rollout log: `mcpRollout.v1` records checked against the contract, appended to
a JSON Lines file or inserted straight into the database.

The records come from the `replaygate rollout` command (one action) or from the Argo
Rollouts and Flagger readers (cdobjects.py). Validation is the ingest's own contract
SQL (validate.py), so a record written here is one that ingest would load.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from . import validate
from .contract import ROLLOUT
from .db import get_meta, one_row, set_meta, transaction
from .errors import ReplaygateError

# The command's verbs and the contract's actions they write.
ACTIONS = {
    "start": "start",
    "proceed": "proceed",
    "hold": "hold",
    "rollback": "rollback",
    "finish": "complete",
}


def iso_ms(ts: datetime) -> str:
    """RFC 3339 UTC with milliseconds, the contract's spelling."""
    ts = ts.astimezone(UTC)
    return ts.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ts.microsecond // 1000:03d}Z"


def default_actor() -> str:
    """Who acts: $REPLAYGATE_ACTOR, else the login name."""
    if os.environ.get("REPLAYGATE_ACTOR"):
        return os.environ["REPLAYGATE_ACTOR"]
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name in some containers
        return "unknown"


def record(
    action: str,
    *,
    release: str | None,
    stage: str,
    ts: datetime | str | None = None,
    percent: float | None = None,
    scope: str | None = None,
    actor: str | None = None,
    note: str | None = None,
) -> dict[str, Any]:
    """One rollout record (not yet validated); absent fields are left out."""
    if isinstance(ts, datetime):
        ts = iso_ms(ts)
    rec = {
        "schema": ROLLOUT.schema,
        "ts": ts or iso_ms(datetime.now(UTC)),
        "release": release,
        "stage": stage,
        "action": action,
        "percent": percent,
        "scope": scope,
        "actor": actor,
        "note": note,
    }
    return {k: v for k, v in rec.items() if v is not None}


def problems(records: list[dict[str, Any]]) -> list[str | None]:
    """Per record, the first contract rule it breaks (as ingest would quarantine it), or
    None."""
    if not records:
        return []
    names = [f.name for f in ROLLOUT.fields]
    cols = {"pos": pa.array(range(len(records)), pa.int64())}
    for n in names:
        cols[f"f_{n}"] = pa.array(
            [None if r.get(n) is None else str(r[n]) for r in records], pa.string()
        )
    # Imported JSON may hold any value (a number, an object) as its schema: compared as text.
    schemas = {str(r["schema"]) for r in records if r.get("schema") is not None}
    if record_schema := schemas - {ROLLOUT.schema}:
        raise ReplaygateError(f"not a rollout record: schema {sorted(record_schema)[0]!r}")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("rg_rollout_new", pa.table(cols))
    rows = con.execute(
        f"SELECT reason FROM ({validate.checked_sql(ROLLOUT, 'rg_rollout_new')}) ORDER BY pos"
    ).fetchall()
    return [r[0] for r in rows]


def check(records: list[dict[str, Any]]) -> None:
    """Raise on the first record that breaks the contract."""
    for i, why in enumerate(problems(records)):
        if why:
            what = f"record {i + 1}: " if len(records) > 1 else ""
            raise ReplaygateError(f"invalid rollout record: {what}{why}")


def _norm_ts(ts: str) -> str:
    try:
        return iso_ms(datetime.fromisoformat(ts.replace("Z", "+00:00")))
    except ValueError:
        return ts


def line(rec: dict[str, Any]) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n"


def _key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(rec.get(k)) for k in ("ts", "release", "stage", "action"))


def append_file(
    path: str | os.PathLike[str], records: list[dict[str, Any]], dedupe: bool = False
) -> int:
    """Append validated records to a JSON Lines rollout log, one whole write; with dedupe,
    records already in the file (same time, release, stage and action) are left out.
    Returns the number written."""
    check(records)
    p = Path(path)
    if dedupe and p.exists():
        have = set()
        for raw in p.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                have.add(_key(json.loads(raw)))
            except (json.JSONDecodeError, AttributeError):
                continue
        records = [r for r in records if _key(r) not in have]
    if not records:
        return 0
    p.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line(r) for r in records).encode()
    with open(p, "ab") as fh:
        if fh.tell() and _last_byte(p) != b"\n":
            data = b"\n" + data  # never glue a record onto a torn last line
        fh.write(data)
    return len(records)


def _last_byte(p: Path) -> bytes:
    with open(p, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def insert_db(
    con: duckdb.DuckDBPyConnection,
    records: list[dict[str, Any]],
    origin: str = "replaygate rollout",
    dedupe: bool = False,
) -> int:
    """Insert validated records into the `rollout` table, as one input of their own in
    `files`, and mark the data changed (so findings are refreshed); with dedupe, records
    already in the table (same time, release, stage and action) are left out. Returns the
    number inserted."""
    check(records)
    if dedupe and records:
        have = {
            _key({"ts": iso_ms(t), "release": r, "stage": s, "action": a})
            for t, r, s, a in con.execute(
                "SELECT ts, release, stage, action FROM rollout"
            ).fetchall()
        }
        records = [r for r in records if _key({**r, "ts": _norm_ts(r["ts"])}) not in have]
    if not records:
        return 0
    text = "".join(line(r) for r in records)
    names = [f.name for f in ROLLOUT.stored_fields]
    table = pa.table(
        {
            "pos": pa.array(range(1, len(records) + 1), pa.int64()),
            **{
                f"f_{n}": pa.array(
                    [None if r.get(n) is None else str(r[n]) for r in records], pa.string()
                )
                for n in names
            },
        }
    )
    con.register("rg_rollout_rows", table)
    try:
        with transaction(con):
            file_id = one_row(con.execute("SELECT nextval('file_ids')"))[0]
            con.execute(
                """INSERT INTO files (file_id, path, name, format, size, sha256, rows_loaded,
                                      rows_quarantined, rows_by_type, ingested_at, status)
                   VALUES ($id, $path, $name, 'jsonl', $size, $sha, $n, 0, $by_type,
                           now(), 'loaded')""",
                {
                    "id": file_id,
                    "path": f"({origin})",
                    "name": f"rollout records written by {origin}",
                    "size": len(text.encode()),
                    "sha": hashlib.sha256(text.encode()).hexdigest(),
                    "n": len(records),
                    "by_type": json.dumps({"rollout": len(records)}),
                },
            )
            cols, exprs = validate.target_columns(ROLLOUT)
            con.execute(
                f"""INSERT INTO rollout ({", ".join(cols)})
                    SELECT {", ".join(exprs)}
                    FROM ({validate.checked_sql(ROLLOUT, "rg_rollout_rows")})""",
                {"file_id": file_id},
            )
            set_meta(con, "data_version", str(int(get_meta(con, "data_version", "0")) + 1))
            # Stage windows change with the rollout log: the next analysis is a full one.
            set_meta(con, "analysis_pending_full", "1")
    finally:
        con.unregister("rg_rollout_rows")
    return len(records)
