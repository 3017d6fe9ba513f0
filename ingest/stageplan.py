"""What to stage of one file, as its identity decision says, and how many lines it held.

identity.plan decides per file: nothing to read (unchanged, moved, a duplicate, empty),
its new lines only (an append), the complete lines before a gzip stream breaks, or the
whole file up to its last complete line (a line still being written waits). Staging
copies what is to be read where needed (stagereads.py stages it), reads it again with LF
line ends when the reader split a line at a CR, and counts the lines read as the scan
counted them, rejecting a line the reader lost so that every line is a row, a blank
line or a quarantine row.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replaygate.core.db import one_row

from . import identity, readers
from .discovery import display, sha256
from .results import FileResult
from .stagearea import Moved, Staged
from .stagereads import Reads


class Planner(Reads):
    """Phase 1, outside the transaction: stage what is new in each file."""

    def stage(
        self, src: readers.Source, n: int, d: identity.Decision
    ) -> Staged | FileResult | Moved:
        """Read what is new in one file into a staging table, as `d` (identity.plan) says."""
        shown = display(src.path)
        if d.action == "unreadable":
            return FileResult(shown, "unreadable", note=d.note)
        if d.action in ("empty", "duplicate"):
            return FileResult(shown, d.action, note=d.note)
        if d.action in ("unchanged", "moved"):
            if d.known and (d.known.path != shown or d.action == "moved"):
                return Moved(d.known.file_id, src, shown, d)
            return FileResult(shown, "unchanged")
        sc = d.scanned
        fmt = readers.FORMATS[src.format]
        self.content = sc.length - d.start  # decompressed: a gzip file's size says little
        waits = not src.gzip and fmt.lines and sc.length > sc.complete
        if sc.complete == 0 and src.gzip and sc.broken:
            # Not one line before the break: the file is its break.
            staged = Staged(src, shown, sha256(src.path), None, decision=d)
            staged.notes.append((1, identity.break_reason(sc.broken, 0)))
            return staged
        if sc.complete == 0:
            return FileResult(shown, "waiting", note="no complete line yet")
        overlong = sc.overlong or sc.unit_sep
        read_path: Path | None = None  # a copy of what is read, or None: the file itself
        if d.action == "append":
            k = d.known
            assert k is not None  # an append continues a known file (identity.plan)
            read_path = self.tmp / f"{n}.tail"
            header = identity.first_line(src.path, src.gzip) if fmt.header else b""
            identity.write_tail(src.path, src.gzip, k.consumed, sc.complete, read_path, header)
            staged = self._stage_file(src, n, shown, "", read_path, overlong, self._fast(sc, d))
            staged.line_shift = k.lines - (1 if header else 0)
            staged.row_shift = k.rows
        elif src.gzip and sc.broken:
            # Read the complete lines before the break; the break is one quarantine row.
            read_path = self.tmp / f"{n}.part"
            identity.write_tail(src.path, True, 0, sc.complete, read_path)
            staged = self._stage_file(src, n, shown, None, read_path, overlong)
            staged.sha = sha256(src.path)
            staged.replaces = list(d.retire)
        else:
            if waits:
                read_path = self.tmp / f"{n}.lines"
                identity.copy_prefix(src.path, sc.complete, read_path)
            if sc.sha256:
                # Taken by the scan (identity.scan), in the read that digested the file.
                staged = self._stage_file(
                    src, n, shown, sc.sha256, read_path, overlong, self._fast(sc, d), sc
                )
            else:
                # Hash while DuckDB reads (both release the GIL).
                with ThreadPoolExecutor(1) as pool:
                    digest = pool.submit(sha256, src.path)
                    staged = self._stage_file(
                        src, n, shown, None, read_path, overlong, self._fast(sc, d), sc
                    )
                    staged.sha = digest.result()
            staged.replaces = list(d.retire)
        if staged.table and fmt.bare_cr is not None and self._split_at_cr(staged, sc, d):
            # DuckDB's reader ends a line at a CR (a bare one, or a CRLF's in a file of
            # LF lines) in some places and not in others: read a copy whose lines end
            # at LF only, a bare CR as its format says (readers.Format.bare_cr).
            cr_path = self.tmp / f"{n}.lf"
            lf_src = read_path or src.path
            identity.lf_only(lf_src, src.gzip and not read_path, cr_path, fmt.bare_cr)
            fresh = self._stage_file(src, n, shown, None, cr_path, overlong)
            fresh.sha, fresh.replaces = staged.sha, staged.replaces
            fresh.line_shift, fresh.row_shift = staged.line_shift, staged.row_shift
            staged = fresh
        staged.decision = d
        if src.gzip and sc.broken:
            staged.notes.append((sc.lines + 1, identity.break_reason(sc.broken, sc.lines)))
        if waits:
            staged.info = "the last line has no newline yet: it is read once complete"
        if staged.table:
            staged.rows_staged = one_row(self._exec(f"SELECT count(*) FROM {staged.table}"))[0]
            if not fmt.row_positions:
                # Lines as the scan counted them, not as the reader returned them.
                staged.lines = self._find_lost_lines(staged, sc, read_path) + len(staged.notes)
            else:
                # A data row is a staged row or a rejected record; a break is one more.
                rejected = 0
                if staged.rejects:
                    rejected = one_row(self._exec(f"SELECT count(*) FROM {staged.rejects}"))[0]
                staged.lines = staged.rows_staged + rejected + len(staged.notes)
        return staged

    def _fast(self, sc: identity.Scan, d: identity.Decision) -> int | None:
        """The lines a fast read (readers.Format.fast) must give one row each, or None
        when the scan found a tab or a CR (see identity.Scan.plain)."""
        return self._expected_lines(sc, d) if self.fast_reads and sc.plain else None

    @staticmethod
    def _expected_lines(sc: identity.Scan, d: identity.Decision | None) -> int:
        """The lines of what is read this time, as the scan counted them."""
        append = d is not None and d.action == "append" and d.known is not None
        lines = sc.lines - (d.known.lines if append and d and d.known else 0)
        return lines + (1 if sc.tail_open else 0)

    def _split_at_cr(self, staged: Staged, sc: identity.Scan, d: identity.Decision) -> bool:
        """Did the reader split a line at a CR (a format whose rows are its lines: more
        lines than there are), or a record's end at a CR go unnoticed (a format of data
        rows: a rejected record holds a CR)?"""
        if staged.fmt.bare_cr is None:
            return False
        if staged.fmt.row_positions:
            return bool(
                staged.rejects
                and one_row(self._exec(f"SELECT bool_or(has_cr) FROM {staged.rejects}"))[0]
            )
        got = one_row(
            self._exec(
                f"SELECT (SELECT count(*) FROM {staged.table})"
                f" + (SELECT count(*) FROM {staged.rejects})"
            )
        )[0]
        return bool(got > self._expected_lines(sc, d))

    def _find_lost_lines(self, staged: Staged, sc: identity.Scan, read_path: Path | None) -> int:
        """Every line read is a staged row or a rejected line. DuckDB's reader loses a
        line over 2 GiB without rejecting it (and the rows after it shift up): if lines
        are missing, find the overlong ones and reject them, so they are quarantined and
        the positions after them are right."""
        expected = self._expected_lines(sc, staged.decision)
        rejected = one_row(self._exec(f"SELECT count(*) FROM {staged.rejects}"))[0]
        if staged.rows_staged + rejected >= expected:
            return expected
        if staged.dropped_lines is not None:
            long = staged.dropped_lines
            # The reader numbered the copy without them: its rejects, back to the file's
            # lines (the j-th dropped line, 0-based, follows line - 1 - j copied ones).
            self._exec(
                f"""UPDATE {staged.rejects} SET line = line + (
                        SELECT count(*) FROM (SELECT x - row_number() OVER (ORDER BY x) + 1
                                              AS from_line FROM unnest($d) AS t(x))
                        WHERE from_line <= line)""",
                {"d": long},
            )
        else:
            path, gz = (read_path, False) if read_path else (staged.src.path, staged.src.gzip)
            long = identity.long_lines(path, gz, readers.MAX_LINE)
        self._exec(
            f"""INSERT INTO {staged.rejects} SELECT line, 'LINE SIZE OVER MAXIMUM', 1, false
                FROM unnest($lines) AS t(line)
                WHERE line NOT IN (SELECT line FROM {staged.rejects})""",
            {"lines": long},
        )
        return expected
