"""Quarantine accounting: every line (or data row) read that is not loaded is one row of
the `quarantine` table, with its file, position and reason.

A staged file's quarantine rows come from four places: notes made while staging (a
gzip stream's break, a file that could not be read), rows its reader could not read
(`bad`), lines the reader rejected (with the format's reason for the reader's error),
and records that fail the contract's checks. A row's position is its line (or data row,
readers.Format.row_positions) in the whole file: the rows before what was read, plus
its place among the lines read, rejected ones included.
"""

from __future__ import annotations

from typing import Any

from replaygate.core.db import one_row

from .results import FileResult, reason_class
from .stagearea import Staged, StagingArea


class Quarantine(StagingArea):
    """Phase 2, inside the transaction: the quarantine rows of a staged file."""

    def _position(self, staged: Staged) -> str:
        """SQL for a staged row's position: rowid + 1, plus the lines the reader skipped
        (rejected) before it (a format whose rows are its lines)."""
        if (
            staged.fmt.row_positions
            or not staged.rejects
            or not one_row(self._exec(f"SELECT count(*) FROM {staged.rejects}"))[0]
        ):
            return "rowid + 1"
        # The j-th rejected line (0-based, by line) comes after line - 1 - j kept rows.
        return (
            f"rowid + 1 + (SELECT count(*) FROM (SELECT line - row_number() OVER "
            f"(ORDER BY line) AS kept FROM (SELECT DISTINCT line FROM {staged.rejects})) r "
            f"WHERE r.kept <= rowid)"
        )

    @staticmethod
    def _position_columns(staged: Staged) -> tuple[str, str]:
        """The quarantine columns a position goes to: (line, row)."""
        return ("NULL", "pos") if staged.fmt.row_positions else ("pos", "NULL")

    def _quarantine_notes(self, staged: Staged, file_id: int) -> None:
        """What staging noted: a note's line, or None (the file could not be read)."""
        for line, reason in staged.notes:
            self._exec(
                "INSERT INTO quarantine VALUES ($f, $p, $line, NULL, NULL, $r)",
                {"f": file_id, "p": staged.shown, "line": line, "r": reason},
            )

    def _quarantine_unread(self, staged: Staged, file_id: int, pos: str) -> None:
        """Rows the reader could not read (`bad`) and the lines it rejected. `pos`: a
        staged row's position in the file (SQL, binding `$shift`)."""
        line_col, row_col = self._position_columns(staged)
        base = {"f": file_id, "p": staged.shown}
        self._exec(
            f"""INSERT INTO quarantine SELECT $f, $p, {line_col}, {row_col}, NULL, bad
                FROM (SELECT {pos} AS pos, bad FROM {staged.table}) WHERE bad IS NOT NULL""",
            {**base, "shift": staged.shift},
        )
        if staged.rejects:
            self._exec(
                f"""INSERT INTO quarantine
                   SELECT $f, $p, line + $lines, NULL, NULL, {staged.fmt.rejected}
                   FROM {staged.rejects}""",
                {**base, "lines": staged.line_shift},
            )

    def _quarantine_checked(
        self, staged: Staged, file_id: int, checked: str, params: dict[str, Any]
    ) -> None:
        """Records that fail the contract's checks: `checked` gives each staged row of one
        record type with its `reason` (validate.checked_sql), binding `params`."""
        line_col, row_col = self._position_columns(staged)
        self._exec(
            f"""INSERT INTO quarantine
                SELECT $f, $p, {line_col}, {row_col}, $schema, reason
                FROM {checked} WHERE reason IS NOT NULL""",
            {"f": file_id, "p": staged.shown, "shift": staged.shift, **params},
        )

    def _count_quarantined(self, file_id: int, result: FileResult) -> None:
        """Add the file's quarantine rows to its result and, by reason, to the report."""
        for reason, n in self._exec(
            "SELECT reason, count(*) FROM quarantine WHERE file_id = $f GROUP BY ALL",
            {"f": file_id},
        ).fetchall():
            self.report.quarantine_reasons[reason_class(reason)] += n
            result.quarantined += n

    def _join_quarantine(self, fresh_id: int, file_id: int) -> None:
        """An append's quarantine rows, counted under a fresh id, join the file's."""
        self._exec(
            "UPDATE quarantine SET file_id = $k WHERE file_id = $f",
            {"k": file_id, "f": fresh_id},
        )
