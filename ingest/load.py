"""Load files into DuckDB: in batches, each staged and then loaded in one transaction.

Per file: hash it (same content already loaded -> nothing to do; same path with
new content -> the old rows are replaced), stage it with a reader, then insert
the rows that meet the contract and quarantine the rest with file, position
and reason. Files are loaded in batches (at most BATCH_FILES files, BATCH_BYTES of
content), each staged and then loaded in one transaction: an interrupted ingest leaves
every file wholly loaded or not at all, and the next run goes on from the batches
that were committed. A run of no more than one batch (every `watch` cycle of fewer
than 256 files) is one transaction, as before.

This module runs the batches; the loader's parts each live in a module of their own:

- `discovery`: the input files under the given paths, and which cannot be read;
- `stagearea`: the run's staging folder, a batch's staging tables, a staged file;
- `stageplan`: what to stage of a file by its identity decision (identity.py), and its
  lines counted;
- `stagereads`: a file staged with its format's readers (fast, or line for line);
- `pieces`: a large text file read straight into its table in pieces side by side;
- `quarantine`: the quarantine rows of a staged file;
- `commit`: the transaction's writes (rows, manifest, identity, retired files);
- `results`: what the run reports.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator

import duckdb

from replaygate.core.config import Config
from replaygate.core.db import (
    get_meta,
    limit_memory,
    memory_limit,
    one_row,
    set_meta,
    transaction,
)
from replaygate.core.errors import ReplaygateError

from . import adapters, identity, readers
from .commit import Commit, knowns
from .discovery import discover, display, readable
from .results import (
    FileResult,
    IngestReport,
    NullProgress,
    Progress,
    plain_text_log_hint,
    unreadable,
)
from .stagearea import SCRATCH, STAGING_PREFIX, Moved, Staged, Unproven
from .stageplan import Planner

__all__ = [
    "BATCH_BYTES",
    "BATCH_FILES",
    "DIRECT_READS",
    "FAST_READS",
    "SCRATCH",
    "SCRATCH_BYTES",
    "STAGING_PREFIX",
    "FileResult",
    "IngestReport",
    "NullProgress",
    "Progress",
    "discover",
    "ingest",
]

# Files staged before one load transaction: staging every file of a run first held
# 20,000 small temporary tables (out of memory) or 42 GB of staged rows (out of disk).
BATCH_FILES = 256
BATCH_BYTES = 2 << 30  # content bytes (decompressed)
# A file of more content than this is staged into a scratch database, compressed on disk
# as the database's own tables are: DuckDB spills a temporary table to disk uncompressed
# (a 100M-event fleet, 13.6 GB of columnar files, staged 42 GB), and one such file is a
# batch of its own. Compressing costs CPU (about a quarter more for the file), so smaller
# files, whose staging a batch bounds, stay in temporary tables.
SCRATCH_BYTES = 4 << 30
# Stage files proven clean with their format's fast reader (readers.Format.fast). Off
# (REPLAYGATE_FAST_READS=0), every file is read line by line: the tests and the load
# benchmark compare both.
FAST_READS = os.environ.get("REPLAYGATE_FAST_READS", "1") != "0"
# Read a file of one record type straight into its table inside the transaction, when
# every line of it loads (readers.Format.direct; stagereads._direct, commit.py); the
# file is staged otherwise. Off (REPLAYGATE_DIRECT_READS=0), or with FAST_READS off,
# every file is staged: the tests and the load benchmark compare them.
DIRECT_READS = os.environ.get("REPLAYGATE_DIRECT_READS", "1") != "0"


class _Loader(Planner, Commit):
    """Stages files outside the transaction (a failed read aborts a DuckDB
    transaction), then loads all staged files inside one."""


_Todo = tuple[int, tuple[readers.Source, int, identity.Decision]]


def _batches(todo: list[_Todo]) -> Iterator[list[_Todo]]:
    """The files in load order, cut into batches of at most BATCH_FILES files and, past
    the first file of a batch, BATCH_BYTES of content; each batch is one transaction."""
    batch: list[_Todo] = []
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


def _stage(
    loader: _Loader,
    src: readers.Source,
    n: int,
    d: identity.Decision,
    file_id: int | None = None,
) -> Staged | FileResult | Moved:
    """Stage one file, outside the transaction; a staged file is given its id now (in
    the order of the run's files, as the load would), so a batch tried again keeps it."""
    try:
        item = loader.stage(src, n, d)
    except (OSError, ValueError, EOFError, zlib.error) as exc:
        # A fault of this file (bad bytes, broken gzip): it costs this file only.
        return FileResult(display(src.path), "unreadable", note=unreadable(exc))
    if isinstance(item, Staged):
        if file_id is None:
            file_id = one_row(loader.con.execute("SELECT nextval('file_ids')"))[0]
        item.file_id = file_id
    return item


def _load_order(item: Staged | FileResult | Moved) -> tuple[bool, int]:
    """Where a file goes in its batch's transaction: the files read straight into their
    tables first (see _load_batch), within each part the one with more content to read
    first. An insert writes a table's rows in DuckDB's row groups and leaves partial
    ones at its end; the checkpoint that ends the load merges runs of partial groups by
    rewriting their rows. A small file loaded before a large one puts a small group in
    front of the large one's full groups, and the merge then rewrote most of the table
    (the 71 rows of a small proxy log before a proxy log of 315,000 rows); after it,
    little is left to rewrite (the checkpoint at 1M events, measured in each of the
    simulator's three formats: 0.39-0.9 CPU s before, 0.02-0.37 after). A smaller file
    that does not load whole then rolls back the larger ones read before it, which are
    read again (a batch is still tried at most three times)."""
    if not isinstance(item, Staged):
        return (True, 0)
    d = item.decision
    content = d.scan.complete - d.start if d is not None and d.scan is not None else 0
    return (item.direct is None, -content)


def _load_batch(
    con: duckdb.DuckDBPyConnection, loader: _Loader, plan: list[Staged | FileResult | Moved]
) -> list[FileResult]:
    """Load a staged batch in one transaction; its files' results, in the batch's order.
    Files read straight into their tables go first: one that does not load whole
    (Unproven) rolls the batch back before the others' work is done. What the report
    and the loader count is put back as it was when the batch rolls back."""
    report = loader.report
    reasons, without_key = report.quarantine_reasons.copy(), loader.raw_without_key
    results: list[FileResult | None] = [None] * len(plan)
    order = sorted(range(len(plan)), key=lambda i: _load_order(plan[i]))
    try:
        with transaction(con):
            changed = False
            for i in order:
                item = plan[i]
                if isinstance(item, FileResult):
                    result = item
                elif isinstance(item, Moved):
                    result = loader.move(item)
                    changed = True  # findings name files
                else:
                    result = loader.load(item)
                changed |= result.status in ("loaded", "appended", "replaced", "unreadable")
                results[i] = result
            if changed:
                version = int(get_meta(con, "data_version", "0")) + 1
                if get_meta(con, "analysis_noted_through") == str(version - 1):
                    # Every change since the last analysis is noted
                    # (queries/incremental.py).
                    set_meta(con, "analysis_noted_through", str(version))
                set_meta(con, "data_version", str(version))
    except Unproven as exc:
        report.quarantine_reasons, loader.raw_without_key = reasons, without_key
        exc.loaded = {i for i, r in enumerate(results) if r is not None}
        raise
    return [r for r in results if r is not None]


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

    `source` forces how proxy access logs are read: the name of a registered adapter
    (`adapters.sources()`: every given file is then such a log), contract, or auto (by
    shape).
    """
    if source not in adapters.sources():
        raise ReplaygateError(f"unknown source {source!r} ({', '.join(adapters.sources())})")
    adapters.check_sources(config)
    progress = progress or NullProgress()
    sources, skipped = discover(paths, force_proxy=source in adapters.PROXIES)
    report = IngestReport(skipped=skipped)
    unreadable_files = []
    for src in list(sources):
        why = readable(src)
        if why:
            sources.remove(src)
            unreadable_files.append(FileResult(display(src.path), "unreadable", note=why))
    # Bounded memory: staging tables spill to disk beyond this (files larger than RAM).
    con.execute("SET memory_limit = $m", {"m": memory_limit("ingest")})
    # Timestamp plausibility bounds, read by validate.reason_sql.
    for name, key in (("rg_ts_min", "min"), ("rg_ts_max", "max")):
        con.execute(f"SET VARIABLE {name} = CAST($v AS TIMESTAMPTZ)", {"v": config.ts_bounds[key]})
    sizes = [s.path.stat().st_size for s in sources]
    progress.start(sum(sizes), len(sources))
    loader = _Loader(
        con,
        config,
        report,
        source,
        scratch_bytes=SCRATCH_BYTES,
        fast_reads=FAST_READS,
        direct_reads=FAST_READS and DIRECT_READS,
    )
    try:
        # Which loaded file each one continues, by content (identity.py).
        decisions = identity.plan(
            sources, [display(s.path) for s in sources], knowns(con), loader.key_available
        )
        report.files.extend(unreadable_files)
        todo = list(enumerate(zip(sources, sizes, decisions, strict=True)))
        for batch in _batches(todo):
            # Staging needs the reader's order (rowid = position); the copy does not,
            # and is faster without it.
            con.execute("RESET preserve_insertion_order")
            plan: list[Staged | FileResult | Moved] = []
            for n, (src, size, d) in batch:
                # query_progress() may be called from another thread while a query runs.
                progress.file_started(src.name, size, poll=con.query_progress)
                plan.append(_stage(loader, src, n, d))
                progress.file_done(size)
            con.execute("SET preserve_insertion_order = false")
            retried = False
            while True:
                try:
                    report.files.extend(_load_batch(con, loader, plan))
                    break
                except Unproven as exc:
                    # A file read straight into its table did not load whole: the batch
                    # rolled back. Stage it and load the batch again; the second time,
                    # also stage the files that were to be read straight in after it, so
                    # a folder of files with a bad line here and there is loaded at most
                    # three times, not once per bad file.
                    con.execute("RESET preserve_insertion_order")
                    for i, item in enumerate(plan):
                        if not isinstance(item, Staged) or not item.direct:
                            continue
                        if item is exc.staged or (retried and i not in exc.loaded):
                            loader.staged_only.add(item.n)
                            n, (src, _, d) = batch[i]
                            plan[i] = _stage(loader, src, n, d, item.file_id)
                    con.execute("SET preserve_insertion_order = false")
                    retried = True
            loader.release()
    finally:
        con.execute("RESET preserve_insertion_order")
        # Back to the analysis' limit, for the events stored now.
        limit_memory(con)
        loader.close()
        progress.stop()
    for f in report.files:
        hint = plain_text_log_hint(f)
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
