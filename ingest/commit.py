"""The load transaction's writes for one staged file: its typed rows, its manifest row
and identity, the rows it replaces, and what the next analysis must look at again.

A new file gets a fresh id and a manifest row; an append adds its rows and counts to
the file it continues; a file whose path now holds new content retires the old one's
rows. Each file's identity (identity.py) is written so that the next ingest reads only
what is new, and each new row's session is noted for the incremental analysis
(queries/incremental.py).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import duckdb

from replaygate.core.contract import RECORD_TYPES, RecordType
from replaygate.core.db import get_meta, one_row, set_meta

from . import capabilities, identity, pieces, readers, validate
from .quarantine import Quarantine
from .results import FileResult
from .stagearea import Moved, Staged, Unproven


def knowns(con: duckdb.DuckDBPyConnection) -> list[identity.Known]:
    """The loaded files, as identity.plan knows them."""
    out = []
    for r in con.execute(
        """SELECT file_id, path, abspath, format, consumed, digest, coalesce(lines, 0),
                  coalesce(rows_read, 0), raw_digest, coalesce(ids_dropped, 0),
                  compression IS NOT DISTINCT FROM $gzip
           FROM files WHERE status = 'loaded' AND consumed IS NOT NULL
           ORDER BY file_id""",
        {"gzip": readers.GZIP},
    ).fetchall():
        out.append(identity.Known(*r))
    return out


def _rows_by_type(con: duckdb.DuckDBPyConnection, file_id: int) -> dict[str, int]:
    row = con.execute(
        "SELECT rows_by_type FROM files WHERE file_id = $f", {"f": file_id}
    ).fetchone()
    out: dict[str, int] = json.loads(row[0]) if row and row[0] else {}
    return out


def shift(staged: Staged) -> dict[str, int]:
    """$shift: the lines (or data rows) before the staged part of the file."""
    return {"shift": staged.shift}


def direct_insert_sql(rt: RecordType, checked: str) -> str:
    """The insert of a file read straight into its table: every row of `checked` (a
    reader's rows through validate.checked_sql, with `pos`), or an error. A row that
    would not load fails the statement (and the file is staged) instead of being left
    out by a `WHERE`: DuckDB pushes a filter below the projection that casts the fields
    and writes each typed value into it once per mention (a timestamp's cast four times
    over in the row's reason), where a projection computes it once."""
    cols, exprs = validate.target_columns(rt)
    loads = "rtype = $t AND bad IS NULL AND reason IS NULL"
    return f"""INSERT INTO {rt.table} ({", ".join(cols)})
    SELECT {", ".join(exprs)}
    FROM (SELECT * REPLACE (
              CASE WHEN {loads} THEN pos + $shift ELSE error('a row does not load') END AS pos)
          FROM ({checked}))"""


def _json(d: dict[str, Any]) -> str:
    return json.dumps(d, sort_keys=True)


class Commit(Quarantine):
    """Phase 2, inside the transaction: load a staged file, or move a known one."""

    def move(self, mv: Moved) -> FileResult:
        known = mv.decision.known
        assert known is not None  # a moved file is a known one (identity.plan)
        self._identity(mv.file_id, mv.src, mv.shown, mv.decision, known.rows)
        return FileResult(mv.shown, "unchanged", note=mv.decision.note)

    def load(self, staged: Staged) -> FileResult:
        self._retire(staged.replaces)
        file_id = staged.file_id
        if file_id is None:
            file_id = one_row(self._exec("SELECT nextval('file_ids')"))[0]
        d = (
            staged.decision
            if staged.decision is not None and staged.decision.action == "append"
            else None
        )
        appending = d is not None and d.known is not None
        # Appended rows join the file's earlier rows; its new quarantine rows are counted
        # under a fresh id first, then join them too.
        rows_id = d.known.file_id if d is not None and d.known is not None else file_id
        result = FileResult(staged.shown, "replaced" if staged.replaces else "loaded")
        if staged.replaces:
            result.note = (staged.decision.note if staged.decision else "") or (
                "content changed since it was last ingested; old rows replaced"
            )
        if d is not None and d.known is not None:
            result.status = "appended"
            result.note = d.note or f"read from line {d.known.lines + 1}"
        if staged.info:
            result.note = f"{result.note}; {staged.info}" if result.note else staged.info
        self._quarantine_notes(staged, file_id)
        if not staged.read:
            result.status = "unreadable"
        elif staged.direct is not None:
            self._insert_direct(staged, result, rows_id)
            result.lines = staged.lines
        else:
            self._insert(staged, file_id, result, rows_id)
            result.lines = staged.lines
            if staged.fmt.blank_lines:
                result.blank = one_row(
                    self._exec(f"SELECT count(*) FROM {staged.table} WHERE blank")
                )[0]
        self._count_quarantined(file_id, result)
        if appending:
            self._join_quarantine(file_id, rows_id)
            self._extend(rows_id, staged, result)
        else:
            self._manifest(
                file_id, staged.src, staged.shown, staged.sha, result, staged.ids_dropped
            )
        if staged.decision is not None and staged.read:
            self._identity(
                rows_id,
                staged.src,
                staged.shown,
                staged.decision,
                staged.row_shift + staged.rows_staged,
                fresh=not appending,
            )
        if staged.read:
            # A new file's manifest row holds result.rows, written above (_manifest, its
            # keys sorted): not read back. An append's holds its earlier rows' too.
            tables = (
                list(_rows_by_type(self.con, rows_id)) if appending else sorted(result.rows)
            ) or list(result.rows)
            capabilities.record(
                self.con, rows_id, tables, staged.key_facts, grown=appending, fresh=not appending
            )
            if "proxy" in tables:
                result.facts = capabilities.proxy_summary(capabilities.shown(self.con, rows_id))
        return result

    def _insert(
        self, staged: Staged, file_id: int, result: FileResult, rows_id: int | None = None
    ) -> None:
        """Insert the staged rows that meet the contract into their record types' tables
        and quarantine the rest."""
        table = staged.table
        staged.ids_dropped = 0  # counted afresh when a batch is tried again
        pos = f"({self._position(staged)}) + $shift"
        self._quarantine_unread(staged, file_id, pos)
        if staged.typed is not None:
            present = [staged.typed]
        else:
            names = {
                r[0]
                for r in self._exec(
                    f"SELECT DISTINCT rtype FROM {table} WHERE bad IS NULL AND rtype IS NOT NULL"
                ).fetchall()
            }
            present = [rt for rt in RECORD_TYPES if rt.table in names]
        for rt in present:
            # A staging table is created before the transaction, so its rowids are the
            # reader's order: they give the record's line (or data row).
            rows = f"(SELECT {pos} AS pos, * FROM {table} WHERE rtype = $t AND bad IS NULL)"
            checked = rows if staged.typed is not None else f"({validate.checked_sql(rt, rows)})"
            self._quarantine_checked(staged, file_id, checked, {"schema": rt.schema, "t": rt.table})
            cols, exprs = validate.target_columns(rt)
            n = one_row(
                self._exec(
                    f"""INSERT INTO {rt.table} ({", ".join(cols)})
                    SELECT {", ".join(exprs)} FROM {checked} WHERE reason IS NULL""",
                    {
                        "file_id": file_id if rows_id is None else rows_id,
                        "t": rt.table,
                        **shift(staged),
                    },
                )
            )[0]
            if n:
                result.rows[rt.table] = n
                self._note_changes(rt, file_id if rows_id is None else rows_id, staged.shift)
            if rt.table == "proxy" and not self.key_available:
                staged.ids_dropped += one_row(
                    self._exec(
                        f"SELECT count(*) FROM {checked} WHERE t_raw_session_id",
                        {"t": rt.table, **shift(staged)},
                    )
                )[0]
        self.raw_without_key += staged.ids_dropped

    def _insert_direct(self, staged: Staged, result: FileResult, file_id: int) -> None:
        """Read a file straight into its table (stagereads._direct), in pieces side by
        side when it was cut into some (pieces.py). It is kept only if every line (or
        row) loaded: else, or when the read fails, Unproven rolls the batch back and the
        file is staged and loaded row by row with its quarantine."""
        rt = staged.typed
        assert rt is not None and staged.direct is not None  # read as one record type
        params = {**staged.direct_params, "file_id": file_id, "t": rt.table, **shift(staged)}
        try:
            if staged.pieces:
                assert staged.piece_source is not None  # set with the pieces
                with pieces.feeding(staged.piece_source, staged.pieces, staged.pipes):
                    n = one_row(self._exec(direct_insert_sql(rt, staged.direct), params))[0]
            else:
                n = one_row(self._exec(direct_insert_sql(rt, staged.direct), params))[0]
        except (duckdb.Error, OSError) as exc:
            raise Unproven(staged) from exc
        if staged.counted and n:
            staged.rows_staged = staged.lines = n
        if n != staged.rows_staged or not n:
            raise Unproven(staged)
        result.rows[rt.table] = n
        self._note_changes(rt, file_id, staged.shift)

    def _note_changes(self, rt: RecordType, file_id: int, shift: int) -> None:
        """What the next analysis must look at again (queries/incremental.py): the
        sessions of the new rows; anything else (the rollout log, rows replaced) asks
        for a full analysis. Nothing, when the next analysis is a full one whatever is
        noted: none ran yet, or a change since the last one was not noted (reading the
        new rows' sessions back costs about 0.3 CPU s per million rows)."""
        if "session_hmac" not in {f.name for f in rt.stored_fields}:
            set_meta(self.con, "analysis_pending_full", "1")
            return
        noted = get_meta(self.con, "analysis_noted_through")
        if (
            noted is None  # no analysis ran yet: one look-up, not three, per table of a file
            or noted != get_meta(self.con, "data_version", "0")
            or get_meta(self.con, "analysis_pending_full", "0") != "0"
        ):
            return
        self._exec(
            "INSERT INTO analysis_pending_rows VALUES ($t, $f, $shift)",
            {"t": rt.table, "f": file_id, "shift": shift},
        )
        self._exec(
            f"""INSERT INTO analysis_pending SELECT DISTINCT session_hmac FROM {rt.table}
                WHERE file_id = $f AND pos > $shift AND session_hmac IS NOT NULL""",
            {"f": file_id, "shift": shift},
        )

    def _retire(self, old_ids: list[int]) -> None:
        if old_ids:
            set_meta(self.con, "analysis_pending_full", "1")
        for old_id in old_ids:
            for rt in RECORD_TYPES:
                self._exec(f"DELETE FROM {rt.table} WHERE file_id = $f", {"f": old_id})
            self._exec("DELETE FROM quarantine WHERE file_id = $f", {"f": old_id})
            self._exec("DELETE FROM file_facts WHERE file_id = $f", {"f": old_id})
            self._exec("UPDATE files SET status = 'superseded' WHERE file_id = $f", {"f": old_id})

    def _manifest(
        self,
        file_id: int,
        src: readers.Source,
        shown: str,
        sha: str,
        result: FileResult,
        dropped: int = 0,
    ) -> None:
        self._exec(
            """INSERT INTO files (file_id, path, name, format, compression, size, sha256,
                   rows_loaded, rows_quarantined, rows_by_type, ingested_at, status, ids_dropped)
               VALUES ($id, $path, $name, $fmt, $compression, $size, $sha, $loaded, $q, $rows,
                   now(), 'loaded', $dropped)""",
            {
                "id": file_id,
                "path": shown,
                "name": src.name,
                "fmt": src.format,
                "compression": src.compression,
                "size": src.path.stat().st_size,
                "sha": sha,
                "loaded": sum(result.rows.values()),
                "q": result.quarantined,
                "rows": _json(result.rows),
                "dropped": dropped,
            },
        )

    def _extend(self, file_id: int, staged: Staged, result: FileResult) -> None:
        """Add an append's counts to the file's manifest row."""
        self._exec(
            """UPDATE files SET rows_loaded = rows_loaded + $loaded,
                   rows_quarantined = rows_quarantined + $q,
                   ids_dropped = coalesce(ids_dropped, 0) + $dropped,
                   rows_by_type = $rows, format = $fmt, compression = $compression,
                   sha256 = '', ingested_at = now()
               WHERE file_id = $id""",
            {
                "id": file_id,
                "loaded": sum(result.rows.values()),
                "q": result.quarantined,
                "dropped": staged.ids_dropped,
                "fmt": staged.src.format,
                "compression": staged.src.compression,
                "rows": _json(
                    dict(Counter(_rows_by_type(self.con, file_id)) + Counter(result.rows))
                ),
            },
        )

    def _identity(
        self,
        file_id: int,
        src: readers.Source,
        shown: str,
        d: identity.Decision,
        rows: int,
        fresh: bool = False,
    ) -> None:
        """What identifies the file by content next time (identity.py). `fresh`: the id
        was drawn for this load, so its quarantine rows were written here, naming `shown`."""
        sc = d.scanned
        self._exec(
            """UPDATE files SET path = $path, name = $name, abspath = $abs, size = $size,
                   consumed = $consumed, digest = $digest, lines = $lines, rows_read = $rows,
                   raw_digest = $raw
               WHERE file_id = $id""",
            {
                "id": file_id,
                "path": shown,
                "name": src.name,
                "abs": str(src.path.resolve()),
                "size": src.path.stat().st_size,
                "consumed": sc.complete,
                "digest": sc.digest,
                "lines": sc.lines,
                "rows": rows,
                "raw": sc.raw_digest,
            },
        )
        if fresh:
            return
        # Quarantine rows name the file where their line can be found now.
        self._exec(
            "UPDATE quarantine SET path = $p WHERE file_id = $id AND path <> $p",
            {"id": file_id, "p": shown},
        )
