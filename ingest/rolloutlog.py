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
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from replaygate.core import timefmt
from replaygate.core.config import Config
from replaygate.core.contract import ROLLOUT
from replaygate.core.db import get_meta, one_row, set_meta, transaction
from replaygate.core.errors import ReplaygateError

from . import readers, validate

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


_SCALAR = {
    "text": (str,),
    "ts": (str, int, float),
    "float": (int, float),
    "enum": (str,),
}


def _odd_type(rec: Any) -> str | None:
    """A value JSON or YAML gave in a shape the contract's text form cannot hold (an
    object, a list, true/false for a number): named precisely, before the SQL check."""
    if not isinstance(rec, dict):
        return f"not an object but {type(rec).__name__}"
    for f in ROLLOUT.fields:
        v = rec.get(f.name)
        if v is None:
            continue
        want = _SCALAR.get(f.type, (str, int, float))
        if isinstance(v, bool) or not isinstance(v, want):
            what = {"text": "text", "enum": "text", "ts": "RFC 3339 text or epoch ms",
                    "float": "a number"}.get(f.type, f.type)  # fmt: skip
            return f"{f.name}: expected {what}, not {type(v).__name__}"
    return None


def problems(records: list[dict[str, Any]], config: Config | None = None) -> list[str | None]:
    """Per record, the first contract rule it breaks (as ingest would quarantine it, with
    the configuration's [ts_bounds]), or None."""
    if not records:
        return []
    odd = [_odd_type(r) for r in records]
    if any(odd):
        return odd
    # Imported where used: every command's start loads this module through the facade,
    # and pyarrow alone takes 0.2 s to import.
    import pyarrow as pa

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
    bounds = (config or Config()).ts_bounds
    for name, key in (("rg_ts_min", "min"), ("rg_ts_max", "max")):
        con.execute(f"SET VARIABLE {name} = CAST($v AS TIMESTAMPTZ)", {"v": bounds[key]})
    con.register("rg_rollout_new", pa.table(cols))
    rows = con.execute(
        f"SELECT reason FROM ({validate.checked_sql(ROLLOUT, 'rg_rollout_new')}) ORDER BY pos"
    ).fetchall()
    return [r[0] for r in rows]


def check(records: list[dict[str, Any]], config: Config | None = None) -> None:
    """Raise on the first record that breaks the contract."""
    for i, why in enumerate(problems(records, config)):
        if why:
            what = f"record {i + 1}: " if len(records) > 1 else ""
            raise ReplaygateError(f"invalid rollout record: {what}{why}")


def _norm_ts(ts: str) -> str:
    try:
        return iso_ms(timefmt.parse(ts))
    except ValueError:
        return ts


def line(rec: dict[str, Any]) -> str:
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n"


def _key(rec: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(str(rec.get(k)) for k in ("ts", "release", "stage", "action"))


def append_file(
    path: str | os.PathLike[str],
    records: list[dict[str, Any]],
    dedupe: bool = False,
    config: Config | None = None,
    append: Callable[[Path, bytes], object] | None = None,
) -> int:
    """Append validated records to a JSON Lines rollout log, one whole write; with dedupe,
    records already in the file (same time, release, stage and action) are left out.
    `append` writes the bytes (the CLI's output guard, which never follows a link);
    by default a plain append. Returns the number written."""
    check(records, config)
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
    if append is not None:
        if p.exists() and p.stat().st_size and _last_byte(p) != b"\n":
            data = b"\n" + data  # never glue a record onto a torn last line
        append(p, data)
        return len(records)
    with open(p, "ab") as fh:
        if fh.tell() and _last_byte(p) != b"\n":
            data = b"\n" + data
        fh.write(data)
    return len(records)


def written_format() -> readers.Source:
    """How the records written here would be read: as the rollout log `append_file`
    writes (JSON Lines), the format the registry reads such a file with."""
    src = readers.detect(Path(f"{ROLLOUT.table}.jsonl"))
    if src is None:  # a registry without JSON Lines: nothing could read the records back
        raise ReplaygateError("no input format reads a JSON Lines rollout log")
    return src


def _last_byte(p: Path) -> bytes:
    with open(p, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1)


def insert_db(
    con: duckdb.DuckDBPyConnection,
    records: list[dict[str, Any]],
    origin: str = "replaygate rollout",
    dedupe: bool = False,
    config: Config | None = None,
) -> int:
    """Insert validated records into the `rollout` table, as one input of their own in
    `files`, and mark the data changed (so findings are refreshed); with dedupe, records
    already in the table (same time, release, stage and action) are left out. Returns the
    number inserted."""
    check(records, config)
    if dedupe and records:
        # The time as text in SQL: a stored time Python cannot hold (year 0) must not
        # break every later import.
        have = {
            _key({"ts": t, "release": r, "stage": s, "action": a})
            for t, r, s, a in con.execute(
                """SELECT strftime(ts AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%g') || 'Z',
                          release, stage, action FROM rollout"""
            ).fetchall()
        }
        records = [r for r in records if _key({**r, "ts": _norm_ts(r["ts"])}) not in have]
    if not records:
        return 0
    text = "".join(line(r) for r in records)
    src = written_format()
    import pyarrow as pa  # where used (above)

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
                """INSERT INTO files (file_id, path, name, format, compression, size, sha256,
                                      rows_loaded, rows_quarantined, rows_by_type, ingested_at,
                                      status)
                   VALUES ($id, $path, $name, $fmt, $compression, $size, $sha, $n, 0,
                           $by_type, now(), 'loaded')""",
                {
                    "id": file_id,
                    "fmt": src.format,
                    "compression": src.compression,
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
            version = int(get_meta(con, "data_version", "0")) + 1
            # Stage windows change with the rollout log: the next analysis is a full one.
            # That is the change noted, as ingest notes its own (ingest/load.py): an
            # analysis up to date before stays one that knows what changed since.
            set_meta(con, "analysis_pending_full", "1")
            if get_meta(con, "analysis_noted_through") == str(version - 1):
                set_meta(con, "analysis_noted_through", str(version))
            set_meta(con, "data_version", str(version))
    finally:
        con.unregister("rg_rollout_rows")
    return len(records)


def started_in_file(path: str | os.PathLike[str], release: str | None, stage: str) -> bool:
    """Whether a JSON Lines rollout log holds a start of this stage of this release."""
    return any(r["stage"] == stage and r.get("release") == release for r in starts_in_file(path))


def started_in_db(con: duckdb.DuckDBPyConnection, release: str | None, stage: str) -> bool:
    """Whether the database's rollout log holds a start of this stage of this release."""
    try:
        rows = con.execute(
            """SELECT count(*) FROM rollout WHERE action = 'start' AND stage = $stage
               AND release IS NOT DISTINCT FROM $release""",
            {"stage": stage, "release": release},
        ).fetchall()  # read whole: an unread result blocks the connection
    except duckdb.CatalogException:  # a new database: nothing started yet
        return False
    return bool(rows[0][0])


def starts_in_file(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The start records of a JSON Lines rollout log (none when it does not exist)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    with open(p, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and rec.get("action") == "start" and rec.get("stage"):
                out.append(rec)
    return out


def starts_in_db(con: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The start records of the database's rollout log."""
    try:
        rows = con.execute(
            """SELECT strftime(ts AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%S.%gZ'), release, stage,
                      percent
               FROM rollout WHERE action = 'start' ORDER BY ts"""
        ).fetchall()
    except duckdb.CatalogException:  # a new database: nothing started yet
        return []
    return [
        {"ts": t, "release": r, "stage": s, "action": "start", "percent": p} for t, r, s, p in rows
    ]
