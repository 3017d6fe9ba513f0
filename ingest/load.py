"""Load files into DuckDB: manifest, staging, typed insert and quarantine, in transactions.

Per file: hash it (same content already loaded -> nothing to do; same path with
new content -> the old rows are replaced), stage it with a reader, then insert
the rows that meet the contract and quarantine the rest with file, position
and reason. Files are loaded in batches (at most BATCH_FILES files, BATCH_BYTES of
content), each staged and then loaded in one transaction: an interrupted ingest leaves
every file wholly loaded or not at all, and the next run goes on from the batches
that were committed. A run of no more than one batch (every `watch` cycle of fewer
than 256 files) is one transaction, as before.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import re
import tempfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import duckdb

from . import adapters, capabilities, identity, readers, staging, validate
from .config import Config
from .contract import RECORD_TYPES, RecordType, all_field_names
from .db import get_meta, memory_limit, one_row, set_meta, transaction
from .errors import ReplaygateError
from .redact import padded_keys

# A batch's staging folder in the temporary folder (ingest/staging.py).
STAGING_PREFIX = "replaygate-"


@dataclass
class FileResult:
    path: str
    status: str  # loaded | appended | replaced | unchanged | duplicate | waiting | unreadable
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    note: str = ""
    facts: dict[str, Any] | None = None  # a proxy log: the facts it can show and those it cannot
    # What was read this time, so that rows + quarantined + blank = lines can be checked:
    # a format whose rows are its lines: lines (a gzip stream's break is one); one of
    # data rows (readers.Format.row_positions): data rows.
    lines: int | None = None
    blank: int = 0


# A plain-text access log line (nginx's and Apache's default `combined`/`common`):
# `addr ident user [time] "request" ...`.
_ACCESS_LOG_LINE = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "')


def _plain_text_log_hint(f: FileResult) -> str | None:
    """One line when a file's rows were quarantined because it is a plain-text access
    log: the proxy writes its default format, not the JSON one replaygate reads. Read
    once per such file (its first line), never per row."""
    if f.status == "unreadable" or not f.quarantined or f.quarantined * 2 < (f.lines or 0):
        return None
    opener = gzip.open if f.path.lower().endswith(readers.GZ) else open
    try:
        with opener(f.path, "rt", encoding="utf-8", errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
    except (OSError, EOFError, zlib.error):
        # A hint is no reason to fail: the file's own result already says what happened.
        return None
    if not _ACCESS_LOG_LINE.match(first):
        return None
    return (
        f"{f.path}: its lines are a plain-text access log (nginx's or Apache's default "
        "`combined` format), not JSON: configure the JSON log format of docs/sources.md "
        '("nginx", "Caddy" or "Envoy") and ingest the new log'
    )


@dataclass
class IngestReport:
    files: list[FileResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    quarantine_reasons: Counter[str] = field(default_factory=Counter)

    def rows_by_type(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.rows)
        return dict(total)

    @property
    def quarantined(self) -> int:
        return sum(f.quarantined for f in self.files)


class Progress(Protocol):
    """What an ingest reports its progress to (NullProgress: nothing)."""

    def start(self, total_bytes: int, n_files: int) -> None: ...
    def file_started(self, name: str, size: int, poll: Callable[[], Any] | None = None) -> None: ...
    def file_done(self, size: int) -> None: ...
    def stop(self) -> None: ...


class NullProgress:
    def start(self, total_bytes: int, n_files: int) -> None: ...
    def file_started(self, name: str, size: int, poll: Callable[[], Any] | None = None) -> None: ...
    def file_done(self, size: int) -> None: ...
    def stop(self) -> None: ...


def discover(
    paths: list[str | os.PathLike[str]], force_proxy: bool = False
) -> tuple[list[readers.Source], list[str]]:
    """Input files under the given paths (folders recursively), and names skipped.
    With force_proxy every file is a proxy access log, whatever its name."""
    found: list[readers.Source] = []
    skipped: list[str] = []
    for p in map(Path, paths):
        if p.is_dir():
            children = sorted(p.rglob("*"))
            for child in children:
                why = _not_regular(child)
                if why:
                    skipped.append(f"{child} ({why})")
            for child in (c for c in children if _regular(c)):
                src = readers.detect(child, force_proxy)
                if src:
                    found.append(src)
                else:
                    skipped.append(str(child))
        elif p.is_file():
            src = readers.detect(p, force_proxy)
            if src is None:
                raise ReplaygateError(
                    f"{p}: not an input file (expected {readers.expected_names()})"
                )
            found.append(src)
        else:
            raise ReplaygateError(f"{p}: no such file or folder")
    return found, skipped


def _regular(path: Path) -> bool:
    """A regular file reached without a symlink (a link could point outside the folder)."""
    return not path.is_symlink() and path.is_file()


def _not_regular(path: Path) -> str | None:
    """Why a folder entry is not read, or None for a regular file or a plain folder."""
    if path.is_symlink():
        if not path.exists():
            return "broken symlink"
        return "symlinked folder, not followed" if path.is_dir() else "symlink, not followed"
    if path.is_dir() or path.is_file():
        return None
    return "not a regular file (FIFO, socket or device)"


def _readable(src: readers.Source) -> str | None:
    """Why a file cannot be read at all, or None. Checked before anything else reads it,
    so one such file costs its own rows and never the run."""
    try:
        with open(src.path, "rb") as fh:
            head = fh.read(2)
        if src.gzip and head and head != b"\x1f\x8b":
            return "unreadable file: named .gz but not gzip"
    except OSError as exc:
        return f"unreadable file ({type(exc).__name__})"
    return None


def _sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())


def _gunzip_prefix(path: Path, out: Path) -> int:
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


_TRIMMED = "rtrim(csv_line, chr(13) || chr(10))"
_LINES_IN_RECORD = f"1 + length({_TRIMMED}) - length(replace({_TRIMMED}, chr(10), ''))"


@dataclass
class _Staged:
    """A file read into a temporary table, waiting for the load transaction.

    `typed` names the record type when the file was staged already cast and checked
    (one pass: the common case of a file of one type); otherwise the staging table
    holds text columns and each type present is cast and checked while loading.
    """

    src: readers.Source
    shown: str
    sha: str
    table: str | None  # None when the file could not be read at all
    typed: RecordType | None = None
    replaces: list[int] = field(default_factory=list)
    notes: list[tuple[int | None, str]] = field(default_factory=list)  # (line, reason)
    rejects: str | None = None
    decision: identity.Decision | None = None
    # Reading from the middle of a file: the lines (or data rows) before what was read.
    line_shift: int = 0
    row_shift: int = 0
    rows_staged: int = 0
    info: str = ""  # a note for the report that is not a quarantine row
    ids_dropped: int = 0  # rows whose raw session id was dropped (no HMAC key)
    lines: int | None = None  # lines read (or data rows, by its format's row_positions)
    key_facts: set[str] = field(default_factory=set)  # shown by a proxy log's keys
    # Lines longer than readers.MAX_LINE left out of what was read (drop_long_lines).
    dropped_lines: list[int] | None = None

    @property
    def fmt(self) -> readers.Format:
        return readers.FORMATS[self.src.format]

    @property
    def shift(self) -> int:
        return self.row_shift if self.fmt.row_positions else self.line_shift


@dataclass
class _Moved:
    """A loaded file found under another name with nothing new: only its path changes."""

    file_id: int
    src: readers.Source
    shown: str
    decision: identity.Decision


class _Loader:
    """Stages files outside the transaction (a failed read aborts a DuckDB
    transaction), then loads all staged files inside one."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        config: Config,
        report: IngestReport,
        source: str = "auto",
    ):
        self.con = con
        self.source = source
        self.report = report
        key = config.hmac_key()
        self.key_available = key is not None
        self.params = padded_keys(key) if key else {}
        # Held for the run and removed after it; one left by a killed run is removed by
        # the next (ingest/staging.py): its copies and scratch database can be gigabytes.
        self._staging = contextlib.ExitStack()
        self.tmp = self._staging.enter_context(
            staging.folder(tempfile.gettempdir(), STAGING_PREFIX)
        )
        self.raw_without_key = 0
        self.temp_tables: list[str] = []
        self.field_maps = config.field_maps()
        self.scratch = False  # the batch's scratch database is attached (_staging_table)
        self.content = 0  # content bytes of the file being staged

    def release(self) -> None:
        """Drop what a loaded batch staged: its temporary tables and scratch files."""
        for t in self.temp_tables:
            with contextlib.suppress(duckdb.Error):
                self.con.execute(f"DROP TABLE IF EXISTS {t}")
        self.temp_tables.clear()
        if self.scratch:
            with contextlib.suppress(duckdb.Error):
                self.con.execute(f"DETACH {SCRATCH}")
            self.scratch = False
        for p in self.tmp.iterdir():
            if p.name == staging.LOCK:
                continue
            with contextlib.suppress(OSError):
                p.unlink()

    def close(self) -> None:
        self.release()
        self._staging.close()

    def _exec(self, sql: str, params: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
        return self.con.execute(sql, params or {})

    def _staging_table(self, n: int, read_path: Path) -> str:
        """Where file `n` is staged: a temporary table, or for a file over SCRATCH_BYTES a
        table of the batch's scratch database (a file of its own in the loader's folder,
        released with the batch)."""
        if max(read_path.stat().st_size, self.content) <= SCRATCH_BYTES:
            return f"rg_stage_{n}"
        if not self.scratch:
            where = str(self.tmp / "scratch.duckdb").replace("'", "''")
            self._exec(f"ATTACH '{where}' AS {SCRATCH}")
            self.scratch = True
        return f"{SCRATCH}.rg_stage_{n}"

    # -- phase 1: outside the transaction -------------------------------------------------
    def stage(
        self, src: readers.Source, n: int, d: identity.Decision
    ) -> _Staged | FileResult | _Moved:
        """Read what is new in one file into a staging table, as `d` (identity.plan) says."""
        shown = _display(src.path)
        if d.action == "unreadable":
            return FileResult(shown, "unreadable", note=d.note)
        if d.action in ("empty", "duplicate"):
            return FileResult(shown, d.action, note=d.note)
        if d.action in ("unchanged", "moved"):
            if d.known and (d.known.path != shown or d.action == "moved"):
                return _Moved(d.known.file_id, src, shown, d)
            return FileResult(shown, "unchanged")
        sc = d.scanned
        fmt = readers.FORMATS[src.format]
        self.content = sc.length - d.start  # decompressed: a gzip file's size says little
        waits = not src.gzip and fmt.lines and sc.length > sc.complete
        if sc.complete == 0 and src.gzip and sc.broken:
            # Not one line before the break: the file is its break.
            staged = _Staged(src, shown, _sha256(src.path), None, decision=d)
            staged.notes.append((1, identity.break_reason(sc.broken, 0)))
            return staged
        if sc.complete == 0:
            return FileResult(shown, "waiting", note="no complete line yet")
        if d.action == "append":
            k = d.known
            assert k is not None  # an append continues a known file (identity.plan)
            read_path = self.tmp / f"{n}.tail"
            header = identity.first_line(src.path, src.gzip) if fmt.header else b""
            identity.write_tail(src.path, src.gzip, k.consumed, sc.complete, read_path, header)
            staged = self._stage_file(
                src, n, shown, "", read_path, sc.overlong or sc.unit_sep, self._fast(sc, d)
            )
            staged.line_shift = k.lines - (1 if header else 0)
            staged.row_shift = k.rows
        elif src.gzip and sc.broken:
            # Read the complete lines before the break; the break is one quarantine row.
            read_path = self.tmp / f"{n}.part"
            identity.write_tail(src.path, True, 0, sc.complete, read_path)
            staged = self._stage_file(src, n, shown, None, read_path, sc.overlong or sc.unit_sep)
            staged.sha = _sha256(src.path)
            staged.replaces = list(d.retire)
        else:
            read_path = None
            if waits:
                read_path = self.tmp / f"{n}.lines"
                identity.copy_prefix(src.path, sc.complete, read_path)
            # Hash while DuckDB reads (both release the GIL).
            with ThreadPoolExecutor(1) as pool:
                digest = pool.submit(_sha256, src.path)
                staged = self._stage_file(
                    src, n, shown, None, read_path, sc.overlong or sc.unit_sep, self._fast(sc, d)
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
            fresh = self._stage_file(src, n, shown, None, cr_path, sc.overlong or sc.unit_sep)
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

    @classmethod
    def _fast(cls, sc: identity.Scan, d: identity.Decision) -> int | None:
        """The lines a fast read (readers.Format.fast) must give one row each, or None
        when the scan found a tab or a CR (see readers.jsonl_fast_sql)."""
        return cls._expected_lines(sc, d) if FAST_READS and sc.plain else None

    @staticmethod
    def _expected_lines(sc: identity.Scan, d: identity.Decision | None) -> int:
        """The lines of what is read this time, as the scan counted them."""
        append = d is not None and d.action == "append" and d.known is not None
        lines = sc.lines - (d.known.lines if append and d and d.known else 0)
        return lines + (1 if sc.tail_open else 0)

    def _split_at_cr(self, st: _Staged, sc: identity.Scan, d: identity.Decision) -> bool:
        """Did the reader split a line at a CR (a format whose rows are its lines: more
        lines than there are), or a record's end at a CR go unnoticed (a format of data
        rows: a rejected record holds a CR)?"""
        if st.fmt.bare_cr is None:
            return False
        if st.fmt.row_positions:
            return bool(
                st.rejects and one_row(self._exec(f"SELECT bool_or(has_cr) FROM {st.rejects}"))[0]
            )
        got = one_row(
            self._exec(
                f"SELECT (SELECT count(*) FROM {st.table}) + (SELECT count(*) FROM {st.rejects})"
            )
        )[0]
        return bool(got > self._expected_lines(sc, d))

    def _find_lost_lines(self, st: _Staged, sc: identity.Scan, read_path: Path | None) -> int:
        """Every line read is a staged row or a rejected line. DuckDB's reader loses a
        line over 2 GiB without rejecting it (and the rows after it shift up): if lines
        are missing, find the overlong ones and reject them, so they are quarantined and
        the positions after them are right."""
        expected = self._expected_lines(sc, st.decision)
        rejected = one_row(self._exec(f"SELECT count(*) FROM {st.rejects}"))[0]
        if st.rows_staged + rejected >= expected:
            return expected
        if st.dropped_lines is not None:
            long = st.dropped_lines
            # The reader numbered the copy without them: its rejects, back to the file's
            # lines (the j-th dropped line, 0-based, follows line - 1 - j copied ones).
            self._exec(
                f"""UPDATE {st.rejects} SET line = line + (
                        SELECT count(*) FROM (SELECT x - row_number() OVER (ORDER BY x) + 1
                                              AS from_line FROM unnest($d) AS t(x))
                        WHERE from_line <= line)""",
                {"d": long},
            )
        else:
            path, gz = (read_path, False) if read_path else (st.src.path, st.src.gzip)
            long = identity.long_lines(path, gz, readers.MAX_LINE)
        self._exec(
            f"""INSERT INTO {st.rejects} SELECT line, 'LINE SIZE OVER MAXIMUM', 1, false
                FROM unnest($lines) AS t(line)
                WHERE line NOT IN (SELECT line FROM {st.rejects})""",
            {"lines": long},
        )
        return expected

    def _drop(self, staged: _Staged) -> None:
        for t in (staged.table, staged.rejects):
            if t:
                self._exec(f"DROP TABLE IF EXISTS {t}")

    def _stage_file(
        self,
        src: readers.Source,
        n: int,
        shown: str,
        sha: str | None,
        read_path: Path | None = None,
        overlong: bool = False,
        lines: int | None = None,
    ) -> _Staged:
        """Stage the file, or `read_path` instead: its new lines, already decompressed.
        `overlong`: the scan saw a line longer than readers.MAX_LINE, or the line
        reader's delimiter (identity.drop_long_lines). `lines`: what is read has that
        many lines, and may be read by its format's fast reader (_stage_fast)."""
        staged = _Staged(src, shown, sha or "", None)
        compression = "gzip" if src.gzip and read_path is None else "none"
        fmt = readers.FORMATS[src.format]
        if overlong and fmt.lines and not fmt.row_positions:
            # Read a copy without the overlong lines: they are quarantined by number
            # (_find_lost_lines), and DuckDB never holds one in memory. A delimiter byte
            # would cut a line short (read as blank, or as the JSON before it).
            short = self.tmp / f"{n}.short"
            staged.dropped_lines = identity.drop_long_lines(
                read_path or src.path, compression == "gzip", readers.MAX_LINE, short
            )
            read_path, compression = short, "none"
        read_path = read_path or src.path
        table = self._staging_table(n, read_path)
        typed = src.default_type
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
                try:
                    staged.key_facts = self._stage(src, read_path, "none", table, typed)
                except duckdb.Error as exc2:
                    staged.notes.append((None, _unreadable(exc2)))
                    return staged
            elif fmt.bare_cr is not None and read_path.suffix != ".lf":
                # DuckDB's reader gives up on some mixes of LF, CRLF and bare CR (one
                # file of LF lines with a CRLF row): read a copy with LF line ends only.
                lf_path = self.tmp / f"{n}.lf"
                identity.lf_only(read_path, compression == "gzip", lf_path, fmt.bare_cr)
                read_path, compression = lf_path, "none"
                try:
                    staged.key_facts = self._stage(src, read_path, compression, table, typed)
                except duckdb.Error as exc2:
                    staged.notes.append((None, _unreadable(exc2)))
                    return staged
            elif compression != "gzip":
                staged.notes.append((None, _unreadable(exc)))
                return staged
            else:
                staged.key_facts = self._restage_gzip(staged, src, n, table, typed)
                if staged.notes[-1][0] is None:
                    return staged
                read_path, compression = self.tmp / f"{n}.part", "none"
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
        if readers.FORMATS[src.format].rejected:
            staged.rejects = f"rg_rejects_{n}"
            # One reason per line: a line can break two rules (bad UTF-8 and a stray
            # delimiter) and must still be counted once.
            self._exec(
                f"CREATE OR REPLACE TEMP TABLE {staged.rejects} AS "
                "SELECT line, min(error_type) AS error_type, "
                # The physical lines a rejected record covers (an open quote joins
                # the lines after it into one record).
                f"coalesce(max({_LINES_IN_RECORD}), 1) AS spans, "
                "coalesce(bool_or(contains(csv_line, chr(13))), false) AS has_cr "
                "FROM rg_rejects GROUP BY line"
            )
            self.temp_tables.append(staged.rejects)
        staged.table = table
        staged.typed = typed
        return staged

    def _restage_gzip(
        self, staged: _Staged, src: readers.Source, n: int, table: str, typed: RecordType | None
    ) -> set[str]:
        """A gzip stream DuckDB cannot read to the end: keep the complete lines that
        decompress, quarantine the break (a note whose line is None: unreadable)."""
        read_path = self.tmp / f"{n}.part"
        lines = _gunzip_prefix(src.path, read_path)
        staged.notes.append((lines + 1, identity.break_reason("corrupt", lines)))
        try:
            return self._stage(src, read_path, "none", table, typed)
        except duckdb.Error as exc:
            staged.notes.append((None, _unreadable(exc)))
            return set()

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
        gave one row per line (so a row's rowid is its line) and no row that could be a
        `null` line. False (nothing staged) when the file must be read line by line."""
        fmt = readers.FORMATS[src.format]
        if fmt.fast is None:
            return False
        self._exec("DROP TABLE IF EXISTS rg_rejects")
        self._exec("DROP TABLE IF EXISTS rg_scans")
        reading = readers.Reading(
            src,
            read_path,
            compression,
            [f.name for f in typed.fields],
            self.key_available,
            self.con,
            self.source,
            self.field_maps,
            typed=typed,
        )
        inner = fmt.fast(reading)
        if inner is None:
            return False
        sql = validate.checked_sql(typed, f"({inner})", reading.native)
        params: dict[str, Any] = {"path": str(read_path), "compression": compression}
        if "$hmac_ipad" in sql:
            params.update(self.params)
        temp = "" if table.startswith(f"{SCRATCH}.") else "TEMP "
        try:
            self._exec(f"CREATE OR REPLACE {temp}TABLE {table} AS {sql}", params)
        except duckdb.Error:
            # Anything the reader cannot take (bad JSON, a line not an object, a line over
            # its object size): the line-exact reader tells which lines, and why.
            self._exec(f"DROP TABLE IF EXISTS {table}")
            return False
        rows, empty = one_row(
            self._exec(f"SELECT count(*), count(*) FILTER (WHERE rg_empty) FROM {table}")
        )
        if rows != lines or empty:
            self._exec(f"DROP TABLE {table}")
            return False
        # What the line reader leaves for load.py: no line rejected.
        self._exec(
            "CREATE TEMP TABLE rg_rejects (line BIGINT, error_type VARCHAR, csv_line VARCHAR)"
        )
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
        self._exec("DROP TABLE IF EXISTS rg_rejects")
        self._exec("DROP TABLE IF EXISTS rg_scans")
        reading = readers.Reading(
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
        sql = readers.FORMATS[src.format].build(reading)
        if typed is not None:
            sql = validate.checked_sql(typed, f"({sql})", reading.native)
        params: dict[str, Any] = {"path": str(read_path)}
        if "$hmac_ipad" in sql:
            params.update(self.params)
        if "$compression" in sql:
            params["compression"] = compression
        temp = "" if table.startswith(f"{SCRATCH}.") else "TEMP "
        self._exec(f"CREATE OR REPLACE {temp}TABLE {table} AS {sql}", params)
        return reading.facts

    # -- phase 2: inside the transaction --------------------------------------------------
    def _note_changes(self, rt: RecordType, file_id: int, shift: int) -> None:
        """What the next analysis must look at again (queries/incremental.py): the
        sessions of the new rows; anything else (the rollout log, rows replaced) asks
        for a full analysis."""
        if "session_hmac" not in {f.name for f in rt.stored_fields}:
            set_meta(self.con, "analysis_pending_full", "1")
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

    def _identity(
        self, file_id: int, src: readers.Source, shown: str, d: identity.Decision, rows: int
    ) -> None:
        """What identifies the file by content next time (identity.py)."""
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
        # Quarantine rows name the file where their line can be found now.
        self._exec(
            "UPDATE quarantine SET path = $p WHERE file_id = $id AND path <> $p",
            {"id": file_id, "p": shown},
        )

    def move(self, mv: _Moved) -> FileResult:
        known = mv.decision.known
        assert known is not None  # a moved file is a known one (identity.plan)
        self._identity(mv.file_id, mv.src, mv.shown, mv.decision, known.rows)
        return FileResult(mv.shown, "unchanged", note=mv.decision.note)

    def load(self, st: _Staged) -> FileResult:
        self._retire(st.replaces)
        file_id = one_row(self._exec("SELECT nextval('file_ids')"))[0]
        d = st.decision if st.decision is not None and st.decision.action == "append" else None
        appending = d is not None and d.known is not None
        # Appended rows join the file's earlier rows; its new quarantine rows are counted
        # under a fresh id first, then join them too.
        rows_id = d.known.file_id if d is not None and d.known is not None else file_id
        result = FileResult(st.shown, "replaced" if st.replaces else "loaded")
        if st.replaces:
            result.note = (st.decision.note if st.decision else "") or (
                "content changed since it was last ingested; old rows replaced"
            )
        if d is not None and d.known is not None:
            result.status = "appended"
            result.note = d.note or f"read from line {d.known.lines + 1}"
        if st.info:
            result.note = f"{result.note}; {st.info}" if result.note else st.info
        for line, reason in st.notes:
            self._exec(
                "INSERT INTO quarantine VALUES ($f, $p, $line, NULL, NULL, $r)",
                {"f": file_id, "p": st.shown, "line": line, "r": reason},
            )
        if st.table is None:
            result.status = "unreadable"
        else:
            self._insert(st, file_id, result, rows_id)
            result.lines = st.lines
            if st.fmt.blank_lines:
                result.blank = one_row(self._exec(f"SELECT count(*) FROM {st.table} WHERE blank"))[
                    0
                ]
        for reason, n in self._exec(
            "SELECT reason, count(*) FROM quarantine WHERE file_id = $f GROUP BY ALL",
            {"f": file_id},
        ).fetchall():
            self.report.quarantine_reasons[_reason_class(reason)] += n
            result.quarantined += n
        if appending:
            self._exec(
                "UPDATE quarantine SET file_id = $k WHERE file_id = $f",
                {"k": rows_id, "f": file_id},
            )
            self._extend(rows_id, st, result)
        else:
            self._manifest(file_id, st.src, st.shown, st.sha, result, st.ids_dropped)
        if st.decision is not None and st.table is not None:
            self._identity(rows_id, st.src, st.shown, st.decision, st.row_shift + st.rows_staged)
        if st.table is not None:
            tables = list(_rows_by_type(self.con, rows_id)) or list(result.rows)
            capabilities.record(self.con, rows_id, tables, st.key_facts, grown=appending)
            if "proxy" in tables:
                result.facts = capabilities.proxy_summary(capabilities.shown(self.con, rows_id))
        return result

    def _extend(self, file_id: int, st: _Staged, result: FileResult) -> None:
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
                "dropped": st.ids_dropped,
                "fmt": st.src.format,
                "compression": st.src.compression,
                "rows": _json(
                    dict(Counter(_rows_by_type(self.con, file_id)) + Counter(result.rows))
                ),
            },
        )

    def _position(self, st: _Staged) -> str:
        """SQL for a staged row's position: rowid + 1, plus the lines the reader skipped
        (rejected) before it (a format whose rows are its lines)."""
        if (
            st.fmt.row_positions
            or not st.rejects
            or not one_row(self._exec(f"SELECT count(*) FROM {st.rejects}"))[0]
        ):
            return "rowid + 1"
        # The j-th rejected line (0-based, by line) comes after line - 1 - j kept rows.
        return (
            f"rowid + 1 + (SELECT count(*) FROM (SELECT line - row_number() OVER "
            f"(ORDER BY line) AS kept FROM (SELECT DISTINCT line FROM {st.rejects})) r "
            f"WHERE r.kept <= rowid)"
        )

    def _insert(
        self, st: _Staged, file_id: int, result: FileResult, rows_id: int | None = None
    ) -> None:
        table = st.table
        line_col, row_col = ("NULL", "pos") if st.fmt.row_positions else ("pos", "NULL")
        # $shift: the lines (or data rows) before the staged part of the file.
        pos = f"({self._position(st)}) + $shift"
        shift = {"shift": st.shift}
        base = {"f": file_id, "p": st.shown}
        self._exec(
            f"""INSERT INTO quarantine SELECT $f, $p, {line_col}, {row_col}, NULL, bad
                FROM (SELECT {pos} AS pos, bad FROM {table}) WHERE bad IS NOT NULL""",
            {**base, **shift},
        )
        if st.rejects:
            self._exec(
                f"""INSERT INTO quarantine
                   SELECT $f, $p, line + $lines, NULL, NULL, {st.fmt.rejected}
                   FROM {st.rejects}""",
                {**base, "lines": st.line_shift},
            )
        if st.typed is not None:
            present = [st.typed]
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
            checked = rows if st.typed is not None else f"({validate.checked_sql(rt, rows)})"
            self._exec(
                f"""INSERT INTO quarantine
                    SELECT $f, $p, {line_col}, {row_col}, $schema, reason
                    FROM {checked} WHERE reason IS NOT NULL""",
                {**base, **shift, "schema": rt.schema, "t": rt.table},
            )
            cols, exprs = validate.target_columns(rt)
            n = one_row(
                self._exec(
                    f"""INSERT INTO {rt.table} ({", ".join(cols)})
                    SELECT {", ".join(exprs)} FROM {checked} WHERE reason IS NULL""",
                    {"file_id": file_id if rows_id is None else rows_id, "t": rt.table, **shift},
                )
            )[0]
            if n:
                result.rows[rt.table] = n
                self._note_changes(rt, file_id if rows_id is None else rows_id, st.shift)
            if rt.table == "proxy" and not self.key_available:
                st.ids_dropped += one_row(
                    self._exec(
                        f"SELECT count(*) FROM {checked} WHERE t_raw_session_id",
                        {"t": rt.table, **shift},
                    )
                )[0]
        self.raw_without_key += st.ids_dropped


def _knowns(con: duckdb.DuckDBPyConnection) -> list[identity.Known]:
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
    import json

    row = con.execute(
        "SELECT rows_by_type FROM files WHERE file_id = $f", {"f": file_id}
    ).fetchone()
    return json.loads(row[0]) if row and row[0] else {}


def _unreadable(exc: Exception) -> str:
    # DuckDB's message can quote file content, so only its class is kept.
    return f"unreadable file ({type(exc).__name__})"


def _reason_class(reason: str) -> str:
    """Group reasons for the summary (line numbers inside a reason are not a class)."""
    if " (a quote left open" in reason and reason.endswith(" one row)"):
        return reason.split(" (a quote left open")[0]
    return reason.split(":")[0] if reason.startswith(("truncated gzip", "corrupt gzip")) else reason


def _json(d: dict[str, Any]) -> str:
    import json

    return json.dumps(d, sort_keys=True)


# Files staged before one load transaction: staging every file of a run first held
# 20,000 small temporary tables (out of memory) or 42 GB of staged rows (out of disk).
BATCH_FILES = 256
BATCH_BYTES = 2 << 30  # content bytes (decompressed)
# A file of more content than this is staged into a scratch database, compressed on disk
# as the database's own tables are: DuckDB spills a temporary table to disk uncompressed
# (a 100M-event fleet, 13.6 GB of Parquet, staged 42 GB), and one such file is a batch of
# its own. Compressing costs CPU (about a quarter more for the file), so smaller files,
# whose staging a batch bounds, stay in temporary tables.
SCRATCH_BYTES = 4 << 30
SCRATCH = "rg_scratch"
# Stage files proven clean with their format's fast reader (readers.Format.fast). Off
# (REPLAYGATE_FAST_READS=0), every file is read line by line: the tests and the load
# benchmark compare both.
FAST_READS = os.environ.get("REPLAYGATE_FAST_READS", "1") != "0"


def _batches(
    todo: list[tuple[int, tuple[readers.Source, int, identity.Decision]]],
) -> Iterator[list[tuple[int, tuple[readers.Source, int, identity.Decision]]]]:
    """The files in load order, cut into batches of at most BATCH_FILES files and, past
    the first file of a batch, BATCH_BYTES of content; each batch is one transaction."""
    batch: list[tuple[int, tuple[readers.Source, int, identity.Decision]]] = []
    held = 0
    for item in todo:
        _, (_, size, d) = item
        n_bytes = d.scan.length - d.start if d.scan is not None else size
        if batch and (len(batch) >= BATCH_FILES or held + n_bytes > BATCH_BYTES):
            yield batch
            batch, held = [], 0
        batch.append(item)
        held += n_bytes
    if batch:
        yield batch


def ingest(
    con: duckdb.DuckDBPyConnection,
    paths: list[str | os.PathLike[str]],
    config: Config,
    progress: Progress | None = None,
    source: str = "auto",
) -> IngestReport:
    """Load files and folders into the database: in one transaction per batch of files
    (BATCH_FILES, BATCH_BYTES), so staging stays bounded; a batch that fails rolls back
    alone, and the batches before it stay loaded (a rerun goes on from them).

    `source` forces how proxy access logs are read: an adapter name (caddy, nginx,
    envoy: every given file is then such a log), contract, or auto (by shape).
    """
    if source not in adapters.sources():
        raise ReplaygateError(f"unknown source {source!r} ({', '.join(adapters.sources())})")
    progress = progress or NullProgress()
    sources, skipped = discover(paths, force_proxy=source in adapters.PROXIES)
    report = IngestReport(skipped=skipped)
    unreadable = []
    for src in list(sources):
        why = _readable(src)
        if why:
            sources.remove(src)
            unreadable.append(FileResult(_display(src.path), "unreadable", note=why))
    # Bounded memory: staging tables spill to disk beyond this (files larger than RAM).
    con.execute("SET memory_limit = $m", {"m": memory_limit("ingest")})
    # Timestamp plausibility bounds, read by validate.reason_sql.
    for name, key in (("rg_ts_min", "min"), ("rg_ts_max", "max")):
        con.execute(f"SET VARIABLE {name} = CAST($v AS TIMESTAMPTZ)", {"v": config.ts_bounds[key]})
    sizes = [s.path.stat().st_size for s in sources]
    progress.start(sum(sizes), len(sources))
    loader = _Loader(con, config, report, source)
    try:
        # Which loaded file each one continues, by content (identity.py).
        decisions = identity.plan(
            sources, [_display(s.path) for s in sources], _knowns(con), loader.key_available
        )
        report.files.extend(unreadable)
        todo = list(enumerate(zip(sources, sizes, decisions, strict=True)))
        for batch in _batches(todo):
            # Staging needs the reader's order (rowid = position); the copy does not,
            # and is faster without it.
            con.execute("RESET preserve_insertion_order")
            plan: list[_Staged | FileResult | _Moved] = []
            for n, (src, size, d) in batch:
                # query_progress() may be called from another thread while a query runs.
                progress.file_started(src.name, size, poll=con.query_progress)
                try:
                    plan.append(loader.stage(src, n, d))
                except (OSError, ValueError, EOFError, zlib.error) as exc:
                    # A fault of this file (bad bytes, broken gzip): it costs this file only.
                    why = f"unreadable file ({type(exc).__name__})"
                    plan.append(FileResult(_display(src.path), "unreadable", note=why))
                progress.file_done(size)
            con.execute("SET preserve_insertion_order = false")
            with transaction(con):
                changed = False
                for item in plan:
                    if isinstance(item, FileResult):
                        result = item
                    elif isinstance(item, _Moved):
                        result = loader.move(item)
                        changed = True  # findings name files
                    else:
                        result = loader.load(item)
                    changed |= result.status in ("loaded", "appended", "replaced", "unreadable")
                    report.files.append(result)
                if changed:
                    version = int(get_meta(con, "data_version", "0")) + 1
                    if get_meta(con, "analysis_noted_through") == str(version - 1):
                        # Every change since the last analysis is noted
                        # (queries/incremental.py).
                        set_meta(con, "analysis_noted_through", str(version))
                    set_meta(con, "data_version", str(version))
            loader.release()
    finally:
        con.execute("RESET preserve_insertion_order")
        con.execute("SET memory_limit = $m", {"m": memory_limit()})
        loader.close()
        progress.stop()
    for f in report.files:
        hint = _plain_text_log_hint(f)
        if hint:
            report.warnings.append(hint)
    if loader.raw_without_key:
        report.warnings.append(
            f"{loader.raw_without_key} proxy records carried a raw session id, but no HMAC key "
            f"is set in ${config.hmac_key_env}: the ids were discarded, not stored, and these "
            "requests cannot be joined to the ledgers. Set the key and ingest the same "
            "files again: they are read again and their ids hashed (their rows replaced)."
        )
    return report
