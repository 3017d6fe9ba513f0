"""Reading one file into a staging table with its format's reader.

Two reads give the same staged rows: the fast read (readers.Format.fast) of a file of
one record type, kept only when it proves line for line what the line-exact read would
stage, and the line-exact read (readers.Format.build), which also keeps the lines its
reader rejects, with their numbers. When the line-exact read fails, a copy it can read
is staged instead, as the format says: its fallback copy (a value DuckDB cannot
convert), a copy with LF line ends only (a mix of line ends the reader gives up on), or
the complete lines before a gzip stream breaks; a file still unreadable is a note.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from replaygate.core.contract import RecordType, all_field_names
from replaygate.core.db import one_row

from . import identity, pieces, readers, validate
from .results import unreadable
from .stagearea import Staged, StagingArea


def gunzip_prefix(path: Path, out: Path) -> int:
    """Decompress the complete lines before a gzip stream breaks into `out`; return how
    many there are (a partial line at the break is left out: it is part of the break)."""
    end = lines = complete = 0
    with open(out, "wb") as dst:
        for chunk in identity.content_chunks(path, True):
            lines += chunk.count(b"\n")
            dst.write(chunk)
            end += len(chunk)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                complete = end - len(chunk) + nl + 1
    with open(out, "r+b") as dst:
        dst.truncate(complete)
    return lines


class Reads(StagingArea):
    """Stage a file (or a copy of part of it) with its format's readers."""

    def _stage_file(
        self,
        src: readers.Source,
        n: int,
        shown: str,
        sha: str | None,
        read_path: Path | None = None,
        overlong: bool = False,
        lines: int | None = None,
        scan: identity.Scan | None = None,
    ) -> Staged:
        """Stage the file, or `read_path` instead: its new lines, already decompressed.
        `overlong`: the scan saw a line longer than readers.MAX_LINE, or the line
        reader's delimiter (identity.drop_long_lines). `lines`: what is read has that
        many lines, and may be read by its format's fast reader (_stage_fast). `scan`:
        what is read is the scanned content from its start (its cuts: pieces.py)."""
        staged = Staged(src, shown, sha or "", None, n=n)
        compression = readers.GZIP if src.gzip and read_path is None else "none"
        fmt = readers.FORMATS[src.format]
        if overlong and fmt.lines and not fmt.row_positions:
            # Read a copy without the overlong lines: they are quarantined by number
            # (_find_lost_lines), and DuckDB never holds one in memory. A delimiter byte
            # would cut a line short (read as blank, or as the JSON before it).
            short = self.tmp / f"{n}.short"
            staged.dropped_lines = identity.drop_long_lines(
                read_path or src.path, compression == readers.GZIP, readers.MAX_LINE, short
            )
            read_path, compression = short, "none"
        read_path = read_path or src.path
        typed = src.default_type
        # Overlong: a text file's line over MAX_LINE (a copy without it is read).
        if (
            self.direct_reads
            and typed is not None
            and not (overlong and fmt.lines)
            and self._direct(staged, read_path, compression, typed, lines, scan)
        ):
            return staged
        table = self._staging_table(n, read_path)
        try:
            fast = (
                lines is not None
                and not overlong
                and typed is not None
                and self._stage_fast(src, read_path, compression, table, typed, lines)
            )
            if not fast:
                staged.key_facts = self._stage(src, read_path, compression, table, typed)
        except duckdb.Error as exc:
            if fmt.fallback is not None and isinstance(exc, duckdb.ConversionException):
                # A value beyond what DuckDB holds (a timestamp past 2^62 ms) fails the
                # whole read: read the format's fallback copy, one row's bad value.
                read_path = self.tmp / f"{n}{fmt.fallback_suffix}"
                fmt.fallback(src.path, read_path)
                compression = "none"
            elif fmt.bare_cr is not None and read_path.suffix != ".lf":
                # DuckDB's reader gives up on some mixes of LF, CRLF and bare CR (one
                # file of LF lines with a CRLF row): read a copy with LF line ends only.
                lf_path = self.tmp / f"{n}.lf"
                identity.lf_only(read_path, compression == readers.GZIP, lf_path, fmt.bare_cr)
                read_path, compression = lf_path, "none"
            elif compression != readers.GZIP:
                staged.notes.append((None, unreadable(exc)))
                return staged
            else:
                # A gzip stream DuckDB cannot read to the end: keep the complete lines
                # that decompress, quarantine the break.
                read_path, compression = self.tmp / f"{n}.part", "none"
                done = gunzip_prefix(src.path, read_path)
                staged.notes.append((done + 1, identity.break_reason("corrupt", done)))
            try:
                staged.key_facts = self._stage(src, read_path, compression, table, typed)
            except duckdb.Error as exc2:
                staged.notes.append((None, unreadable(exc2)))
                return staged
        self.temp_tables.append(table)
        if typed is not None:
            foreign = one_row(
                self._exec(
                    f"SELECT count(*) FROM {table} WHERE rtype IS NOT NULL AND rtype <> $t",
                    {"t": typed.table},
                )
            )[0]
            if foreign:
                # Rows of other types in a prefixed file: read it again, as text.
                typed = None
                self._stage(src, read_path, compression, table, None)
        if fmt.rejected:
            staged.rejects = f"rg_rejects_{n}"
            self._exec(
                f"CREATE OR REPLACE TEMP TABLE {staged.rejects} AS {readers.rejects_by_line_sql()}"
            )
            self.temp_tables.append(staged.rejects)
        staged.table = table
        staged.typed = typed
        return staged

    def _reading(
        self, src: readers.Source, read_path: Path, compression: str, typed: RecordType | None
    ) -> readers.Reading:
        """What a format's reader is given to read `read_path` (`typed`: every row as that
        record type, already checked; None: each row as text, as its own type)."""
        readers.clear_rejects(self.con)
        return readers.Reading(
            src,
            read_path,
            compression,
            [f.name for f in typed.fields] if typed else all_field_names(),
            self.key_available,
            self.con,
            self.source,
            self.field_maps,
            typed=typed,
        )

    def _direct(
        self,
        staged: Staged,
        read_path: Path,
        compression: str,
        typed: RecordType,
        lines: int | None,
        scan: identity.Scan | None = None,
    ) -> bool:
        """Whether the file is read straight into its table inside the transaction
        instead of staged (readers.Format.direct): a file of one record type whose rows
        are to be proven by count, `lines` lines for a text format of lines (the scan's
        count, for a file _fast allows), the rows its reader gives for a format of rows,
        and for a text format of data rows (delimited records; also only a file _fast
        allows) the rows the insert loads, which fails on any row it would not load
        (`Staged.counted`). The load keeps the rows only when every one of them loaded;
        any other file is staged (commit.py). A large plain file of lines read from its
        start (`scan`) is read in pieces side by side (_pieces)."""
        fmt = staged.fmt
        if fmt.direct is None or staged.n in self.staged_only or (fmt.lines and lines is None):
            return False
        if typed.table == "proxy" and not self.key_available:
            # Without a key, a proxy row's dropped id is counted from its staged rows.
            return False
        reading = self._reading(staged.src, read_path, compression, typed)
        try:
            inner = fmt.direct(reading)
            if inner is None:
                return False
            cut = self._pieces(fmt, read_path, compression, lines, scan)
            # The first piece read from the file itself, limited to its lines: only when
            # none of them could give no row (the limit would then take rows of the next
            # piece, and the count could not tell).
            lead = (
                len(cut) > 1
                and fmt.lead_from_file
                and scan is not None
                and scan.clean_to >= cut[1].start
            )
            if len(cut) > 1:
                inner = readers.in_pieces(inner, len(cut), lead)
            sql = validate.checked_sql(typed, f"({inner})", reading.native)
            params = self._read_params(sql, read_path, compression)
            if len(cut) > 1:
                staged.piece_source, staged.pieces = read_path, cut
                staged.pipes = pieces.pipe_paths(self.tmp, str(staged.n), cut)
                if lead:
                    staged.pipes[0] = None
                    params["rows_0"] = cut[1].before
                del params["path"]
                for i, (piece, pipe) in enumerate(zip(cut, staged.pipes, strict=True)):
                    params[f"path_{i}"] = str(read_path if pipe is None else pipe)
                    # Of a format with a header line, the data rows before a piece
                    # are its lines before, less that one.
                    params[f"before_{i}"] = piece.before - (1 if i and fmt.header else 0)
                    params[f"header_{i}"] = i == 0
            else:
                params.update({"before": 0, "header": True})
            params = {k: v for k, v in params.items() if f"${k}" in sql}
            if not fmt.lines:
                # A format of rows, not lines: counted by its reader (from metadata).
                lines = one_row(self._exec(f"SELECT count(*) FROM ({inner})", params))[0]
        except duckdb.Error:
            return False  # what the reader cannot take, the staged read tells
        if not lines:
            return False
        staged.direct, staged.direct_params = sql, params
        staged.typed = typed
        # Data rows of text (a quoted field may hold a line end) are counted by the
        # insert, which loads every row the reader gives or fails; read in pieces, every
        # line but the header is one (_pieces), which the count then proves.
        staged.counted = fmt.lines and fmt.row_positions and not staged.pieces
        staged.rows_staged = staged.lines = 0 if staged.counted else lines
        if staged.pieces and fmt.header:
            staged.rows_staged = staged.lines = lines - 1
        return True

    def _pieces(
        self,
        fmt: readers.Format,
        read_path: Path,
        compression: str,
        lines: int | None,
        scan: identity.Scan | None,
    ) -> list[pieces.Piece]:
        """The pieces a direct read of a format of lines reads side by side (pieces.py):
        as many as DuckDB has threads, each but the last of whole row groups
        (pieces.group_ends), for a plain file read from its start whose every line is
        one row (of a format of data rows, a file without a double quote after its
        header: a quoted field may hold a line end), no larger than its format reads so
        (readers.Format.piece_limit); one piece, the whole, otherwise."""
        whole = [pieces.Piece(0, 0, 0)]
        if (
            scan is None
            or lines is None
            or not fmt.lines
            or (fmt.piece_limit is not None and scan.complete > fmt.piece_limit)
            or compression != "none"
            or not pieces.can_feed()
            or (fmt.row_positions and scan.quoted)
            or read_path.stat().st_size < scan.complete
        ):
            return whole
        threads = int(one_row(self._exec("SELECT current_setting('threads')"))[0])
        header = 1 if fmt.header else 0
        # A first piece that may be read from the file itself takes a larger share
        # (pieces.LEAD_WEIGHT), if its lines are clean that far (else equal shares).
        for lead in (True, False) if fmt.lead_from_file and scan.clean_to else (False,):
            ends = pieces.group_ends(read_path, scan.cuts, lines, threads, header, lead)
            cut = pieces.cut(ends, scan.complete, threads, lead=lead)
            if not lead or (len(cut) > 1 and scan.clean_to >= cut[1].start):
                break
        return cut if len(cut) > 1 else whole

    def _stage_fast(
        self,
        src: readers.Source,
        read_path: Path,
        compression: str,
        table: str,
        typed: RecordType,
        lines: int,
    ) -> bool:
        """Stage a file of `lines` lines with its format's fast reader, and keep the rows
        only if they are what the line-exact reader would stage: the read succeeded and
        gave one row per line (so a row's rowid is its line) and no row it is unsure of
        (readers.jsonl_fast_sql: one that could be a `null` line, or a number it spells
        otherwise). False (nothing staged) when the file must be read line by line."""
        fmt = readers.FORMATS[src.format]
        if fmt.fast is None:
            return False
        reading = self._reading(src, read_path, compression, typed)
        inner = fmt.fast(reading)
        if inner is None:
            return False
        sql = validate.checked_sql(typed, f"({inner})", reading.native)
        try:
            self._create(table, sql, read_path, compression)
        except duckdb.Error:
            # Anything the reader cannot take (bad JSON, a line not an object, a line over
            # its object size): the line-exact reader tells which lines, and why.
            self._exec(f"DROP TABLE IF EXISTS {table}")
            return False
        rows, unsure = one_row(
            self._exec(f"SELECT count(*), count(*) FILTER (WHERE rg_unsure) FROM {table}")
        )
        if rows != lines or unsure:
            self._exec(f"DROP TABLE {table}")
            return False
        # What the line reader leaves for the load: no line rejected.
        self._exec(readers.NO_REJECTS)
        return True

    def _stage(
        self,
        src: readers.Source,
        read_path: Path,
        compression: str,
        table: str,
        typed: RecordType | None,
    ) -> set[str]:
        """Stage the file with its format's reader; return the facts a proxy log shows
        by its keys."""
        reading = self._reading(src, read_path, compression, typed)
        sql = readers.FORMATS[src.format].build(reading)
        if typed is not None:
            sql = validate.checked_sql(typed, f"({sql})", reading.native)
        self._create(table, sql, read_path, compression)
        return reading.facts
