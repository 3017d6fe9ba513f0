"""Where a batch of files is staged before its load transaction, and what a staged file is.

Files are read into staging tables outside the transaction (a failed read aborts a
DuckDB transaction), then loaded inside one. The staging area holds, for one run, a
folder of its own in the temporary folder (copies of files: new lines, decompressed
prefixes, repaired line ends) and, per batch, temporary tables and a scratch database
for files too large for a temporary table; `release()` drops a batch's, `close()` the
run's. `StagingArea` is the state every part of the loader shares (its connection,
the HMAC parameters, the report); `Staged` and `Moved` are what staging hands to the
transaction.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from replaygate.core.config import Config
from replaygate.core.contract import RecordType

from . import identity, readers, staging
from .pieces import Piece
from .redact import padded_keys
from .results import IngestReport

# A batch's staging folder in the temporary folder (ingest/staging.py).
STAGING_PREFIX = "replaygate-"
# The batch's scratch database, attached while it holds a staged file (see load.py's
# SCRATCH_BYTES).
SCRATCH = "rg_scratch"


@dataclass
class Staged:
    """A file read into a temporary table, waiting for the load transaction.

    `typed` names the record type when the file was staged already cast and checked
    (one pass: the common case of a file of one type); otherwise the staging table
    holds text columns and each type present is cast and checked while loading.
    """

    src: readers.Source
    shown: str
    sha: str
    table: str | None  # None when the file could not be read at all
    n: int = -1  # its place among the run's files
    file_id: int | None = None  # given when staged, kept when the batch is retried
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
    # Not staged: proven to load whole, read by this SQL (with `pos`) straight into its
    # table inside the transaction (readers.Format.direct), binding `direct_params`.
    direct: str | None = None
    direct_params: dict[str, Any] = field(default_factory=dict)
    # The direct read's rows are counted by its insert, which loads every row the reader
    # gives or fails (not known before: in a text format of delimited records, a file's
    # data rows are not its lines).
    counted: bool = False
    # A direct read in pieces side by side (pieces.py): the file they are cut from, the
    # pieces and their named pipes (None: the first piece, read from the file itself,
    # readers.in_pieces `lead`); none for a read of the file whole.
    piece_source: Path | None = None
    pieces: list[Piece] = field(default_factory=list)
    pipes: list[Path | None] = field(default_factory=list)

    @property
    def read(self) -> bool:
        """Whether the file was read (staged, or proven for its direct read)."""
        return self.table is not None or self.direct is not None

    @property
    def fmt(self) -> readers.Format:
        return readers.FORMATS[self.src.format]

    @property
    def shift(self) -> int:
        return self.row_shift if self.fmt.row_positions else self.line_shift


class Unproven(Exception):
    """A file read straight into its table did not load whole (a line or row refused,
    or the read failed): the load transaction rolls back and the file is staged."""

    def __init__(self, staged: Staged) -> None:
        super().__init__(staged.shown)
        self.staged = staged
        self.loaded: set[int] = set()  # the batch's files loaded before it (load.py)


@dataclass
class Moved:
    """A loaded file found under another name with nothing new: only its path changes."""

    file_id: int
    src: readers.Source
    shown: str
    decision: identity.Decision


class StagingArea:
    """The loader's state for a run: its connection, keys and report, the staging folder,
    and the batch's staging tables."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        config: Config,
        report: IngestReport,
        source: str = "auto",
        *,
        scratch_bytes: int,
        fast_reads: bool,
        direct_reads: bool = False,
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
        self.scratch_bytes = scratch_bytes  # a file of more content is staged in scratch
        self.fast_reads = fast_reads  # a file proven clean may take its format's fast read
        self.direct_reads = direct_reads  # such a file may be read straight into its table
        # Files (by their place in the run) that a direct read did not load whole.
        self.staged_only: set[int] = set()

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
        """Where file `n` is staged: a temporary table, or for a file over scratch_bytes a
        table of the batch's scratch database (a file of its own in the loader's folder,
        released with the batch)."""
        if max(read_path.stat().st_size, self.content) <= self.scratch_bytes:
            return f"rg_stage_{n}"
        if not self.scratch:
            where = str(self.tmp / "scratch.duckdb").replace("'", "''")
            self._exec(f"ATTACH '{where}' AS {SCRATCH}")
            self.scratch = True
        return f"{SCRATCH}.rg_stage_{n}"

    def _read_params(self, sql: str, read_path: Path, compression: str) -> dict[str, Any]:
        """The parameters a reader's SQL over `read_path` names (`$path`, `$compression`,
        the HMAC key's pads)."""
        params: dict[str, Any] = {"path": str(read_path)}
        if "$hmac_ipad" in sql:
            params.update(self.params)
        if "$compression" in sql:
            params["compression"] = compression
        return params

    def _create(self, table: str, sql: str, read_path: Path, compression: str) -> None:
        """Create staging table `table` from a reader's SQL over `read_path`."""
        temp = "" if table.startswith(f"{SCRATCH}.") else "TEMP "
        params = self._read_params(sql, read_path, compression)
        self._exec(f"CREATE OR REPLACE {temp}TABLE {table} AS {sql}", params)
