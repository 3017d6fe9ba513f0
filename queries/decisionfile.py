"""The decision history's file as the analysis reads it: where it is, its rows' canonical
form and hash chain, the head anchored in the database, and the `decision_history` table
the detectors read (`load_table`, made by every analysis).

The history itself (what is recorded, by whom, and what an auditor reads of it) is the
audit package's (`replaygate.audit.decisionlog`, which appends through the chain defined
here): the analysis reads the file as one more input and imports nothing of audit.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import blake3
import duckdb

from replaygate.core import timefmt
from replaygate.core.db import get_meta
from replaygate.core.errors import ReplaygateError

from .outcome import Decision

DECISIONS = tuple(d.value for d in Decision)
# The head of the chain as the database knows it (meta keys).
ANCHOR_ROWS, ANCHOR_HEAD = "history_rows", "history_head"
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
# Fields added later: in the canonical form only when the row has them, so the digests
# of rows written before them still hold.
OPTIONAL_FIELDS = ("data_end",)

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
        attrs = path.stat() if path else None
    except FileNotFoundError:
        return "0"
    # Size alone misses an edit of the same length (PROCEED -> HOLD, a changed digit).
    return f"{attrs.st_size}:{attrs.st_mtime_ns}:{attrs.st_ino}" if attrs else "0"


# -- the row format ----------------------------------------------------------------------


def iso(ts: datetime) -> str:
    """Times in the history: UTC with microseconds, as stored and as hashed."""
    return ts.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    """An ISO 8601 time as given on the command line (no zone: UTC)."""
    try:
        ts = timefmt.parse(text)
    except ValueError:
        raise ReplaygateError(f"not an ISO 8601 time: {text!r}") from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def canonical(row: dict[str, Any]) -> bytes:
    """The bytes a row's sha256 is computed over (docs/audit.md)."""
    body = {k: row.get(k) for k in FIELDS}
    body.update({k: row[k] for k in OPTIONAL_FIELDS if k in row})
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(row: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(row)).hexdigest()


def row_line(row: dict[str, Any]) -> str:
    keys = (*FIELDS, *(k for k in OPTIONAL_FIELDS if k in row), "sha256")
    return json.dumps({k: row.get(k) for k in keys}, ensure_ascii=False) + "\n"


def parse_rows(text: str) -> list[dict[str, Any]]:
    """The rows of a history's text; a line that is not a JSON object is kept as a
    row marked `unreadable` (`verify_chain` passes over it)."""
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
        return parse_rows(path.read_bytes().decode("utf-8", "replace"))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ReplaygateError(
            f"cannot read the decision history {path}: {exc.strerror or exc}"
        ) from None


def _valid(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not r.get("unreadable")]


class HistoryBroken(ReplaygateError):
    """The decision history does not hold: an edit, a deletion, a cut."""


def verify_chain(history: list[dict[str, Any]], prev: str | None = None) -> str | None:
    """The first row whose digest or link does not hold (None: the chain is intact).
    A line that is not a row (cut short by a crash mid-append) is passed over: the row
    after it must link to the row before it, so a row edited into garbage still breaks
    the chain. `prev`: the digest the first row must link to (a verified prefix's)."""
    skipped = ""
    for r in history:
        if r.get("unreadable"):
            skipped = f" ({r['seq']}: not a JSON object)"
            continue
        if not isinstance(r.get("seq"), int):
            return f"decision history row {r.get('seq')!r}: not a row (no sequence number)"
        if r.get("prev_sha256") != prev:
            return f"decision history row {r.get('seq')}: previous-row link broken{skipped}"
        skipped = ""
        if digest(r) != r.get("sha256"):
            return f"decision history row {r.get('seq')}: content changed"
        prev = r["sha256"]
    return None


def anchor(con: duckdb.DuckDBPyConnection | None) -> tuple[int, str | None]:
    """The head of the chain as the database recorded it: (rows, newest digest)."""
    if con is None:
        return 0, None
    rows = get_meta(con, ANCHOR_ROWS)
    return (int(rows) if rows and rows.isdigit() else 0), get_meta(con, ANCHOR_HEAD)


def against_anchor(valid: list[dict[str, Any]], rows: int, head: str | None) -> str | None:
    """Whether the history still holds the head the database (or a bundle) recorded:
    fewer rows, or another row where the head was, is a cut."""
    if rows <= 0:
        return None
    if len(valid) < rows:
        return (
            f"decision history has {len(valid)} rows where {rows} were recorded: "
            "its newest rows were deleted"
        )
    if valid[rows - 1].get("sha256") != head:
        return f"decision history row {rows}: not the row recorded as row {rows}"
    return None


def problem(con: duckdb.DuckDBPyConnection | None, rows: list[dict[str, Any]]) -> str | None:
    """What is wrong with a history as read, against its chain and its anchor."""
    return verify_chain(rows) or against_anchor(_valid(rows), *anchor(con))


def checked(
    con: duckdb.DuckDBPyConnection | None, path: Path | None = None
) -> list[dict[str, Any]]:
    """Every row of the history of `con`'s database (or of `path`), checked against its
    chain and the database's anchor; HistoryBroken if it does not hold."""
    if path is None and con is not None:
        path = file_for(con)
    rows = read(path)
    broken = problem(con, rows)
    if broken:
        raise HistoryBroken(
            f"{broken} ({path}): the decision history was changed outside replaygate; "
            "restore it from a backup or a bundle (docs/audit.md)"
        )
    return _valid(rows)


def checked_for_db(db: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """`checked()` for a database file given by name (its anchor read if it can be
    opened now; a database a writer holds is checked against the chain alone)."""
    from replaygate.core import db as dbm

    con = None
    if Path(db).exists():
        try:
            con = dbm.connect(str(db), read_only=True)
        except ReplaygateError:
            con = None
    try:
        return checked(con, file_for_db(db))
    finally:
        if con is not None:
            con.close()


def advance_anchor_to(con: duckdb.DuckDBPyConnection, rows: int, head: str | None) -> None:
    """Record the checked history's head in the database (only ever forward: the check
    refused a history that does not extend the recorded head)."""
    from replaygate.core.db import set_meta

    set_meta(con, ANCHOR_ROWS, str(rows))
    set_meta(con, ANCHOR_HEAD, head or "")


def load_table(con: duckdb.DuckDBPyConnection) -> int:
    """(Re)create the `decision_history` table the detectors read, from the checked
    history, and advance the database's anchor; its row count.

    What was verified before is not hashed again row by row: the database keeps the
    BLAKE3 of the verified bytes (`history_verified`), and when the file still starts
    with them only the rows after them are checked. The table is read by DuckDB."""
    path = file_for(con)
    try:
        data = path.read_bytes() if path else b""
    except FileNotFoundError:
        data = b""
    except OSError as exc:
        raise ReplaygateError(
            f"cannot read the decision history {path}: {exc.strerror or exc}"
        ) from None
    rows, head = anchor(con)
    cache = _verified(con)
    if (
        cache is not None
        and (cache["rows"], cache["head"]) == (rows, head or None)
        and len(data) >= cache["bytes"]
        and blake3.blake3(data[: cache["bytes"]]).hexdigest() == cache["blake3"]
    ):
        rest = parse_rows(data[cache["bytes"] :].decode("utf-8", "replace"))
        broken = verify_chain(rest, prev=cache["head"])
        valid = _valid(rest)
        count = int(cache["rows"]) + len(valid)
        newest = valid[-1] if valid else {"sha256": cache["head"], "seq": cache["seq"]}
    else:
        parsed = parse_rows(data.decode("utf-8", "replace"))
        broken = problem(con, parsed)
        valid = _valid(parsed)
        count = len(valid)
        newest = valid[-1] if valid else {"sha256": None, "seq": 0}
    if broken:
        raise HistoryBroken(
            f"{broken} ({path}): the decision history was changed outside replaygate; "
            "restore it from a backup or a bundle (docs/audit.md)"
        )
    if count and (rows, head) != (count, newest["sha256"]):
        advance_anchor_to(con, count, newest["sha256"])
    if data.endswith(b"\n") and (cache is None or cache["bytes"] != len(data)):
        from replaygate.core.db import set_meta

        set_meta(
            con,
            _VERIFIED,
            json.dumps(
                {
                    "bytes": len(data),
                    "blake3": blake3.blake3(data).hexdigest(),
                    "rows": count,
                    "head": newest["sha256"],
                    "seq": newest["seq"],
                }
            ),
        )
    if count:
        assert path is not None
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE rg_history_rows AS SELECT {', '.join(_COLUMNS)} "
            f"FROM read_json($p, format = 'newline_delimited', ignore_errors = true, "
            f"columns = {_JSON_COLUMNS}) WHERE seq IS NOT NULL AND seq <= $last",
            {"p": str(path), "last": newest["seq"]},
        )
    else:
        con.execute(_ROWS)
    try:
        got = int(con.execute("SELECT count(*) FROM rg_history_rows").fetchall()[0][0])
        if got != count:
            raise HistoryBroken(
                f"decision history ({path}): {count} rows verified but {got} readable as rows"
            )
        con.execute(_TABLE)
    finally:
        con.execute("DROP TABLE IF EXISTS rg_history_rows")
    return count


_VERIFIED = "history_verified"
# How DuckDB reads a row (constants, not data: formatted into the query).
_JSON_COLUMNS = (
    "{"
    + ", ".join(
        f"'{f}': '{'BIGINT' if f == 'seq' else 'JSON' if f in ('reasons', 'gates') else 'VARCHAR'}'"
        for f in _COLUMNS
    )
    + "}"
)


def _verified(con: duckdb.DuckDBPyConnection) -> dict[str, Any] | None:
    try:
        doc = json.loads(get_meta(con, _VERIFIED) or "null")
    except ValueError:
        return None
    keys = ("bytes", "blake3", "rows", "head", "seq")
    return doc if isinstance(doc, dict) and all(k in doc for k in keys) else None


# -- appending -------------------------------------------------------------------------
