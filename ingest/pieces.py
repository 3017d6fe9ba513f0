"""A plain text file read straight into its table in pieces, side by side.

A file of lines read straight into its table numbers its rows in the read
(`row_number() OVER ()`, readers.NUMBERED), and DuckDB runs a pipeline holding such a
window on one thread: the reader, the checks and the insert's compression. Numbering
the rows after the insert instead (an UPDATE of `pos` by rowid) lets the read use every
thread, but the update of rows the transaction itself inserted makes DuckDB write them
all again into its write-ahead log at the commit (162 MB for the 1M fleet's event log).

So a large file is cut at line ends into as many pieces as DuckDB has threads, each
read by a reader of its own (a branch of a UNION ALL, which DuckDB runs side by side
when the insert need not hold the order of its rows) and numbered from the lines before
it. DuckDB's readers cannot start at an offset, so each piece reaches its reader through
a named pipe that a thread fills from the file (`os.splice`: the kernel moves the pages,
nothing passes through Python); but the first piece, which starts where the file does,
of JSON Lines (readers.Format.lead_from_file) is read from the file itself, its
reader's rows limited to the piece's lines (readers.in_pieces, `lead`), when no line of
it could give the reader no row (identity.Scan.clean_to: a blank line would let the
limit take a row of the next piece, and the count could not tell). Where the cuts come
from: the scan that digests the file notes a line end per buffer with the lines before
it (identity.Scan.cuts). A file is cut only up to the size its format allows
(readers.Format.piece_limit): DuckDB's JSON reader keeps every byte it reads from a pipe
until its statement ends, so a larger JSON Lines file is read whole, on one thread.

The load keeps the rows only if every line gave one row (commit.py), as for a file read
whole: a piece that gives fewer rows than its lines (a blank line the reader skips, a
feeder that fails) leaves the total short, and the file is staged.

Where a file is cut: at a line end nearest to equal shares (or, when its first piece is
read from the file itself, to a larger first share: LEAD_WEIGHT), among those after which
the rows before are a whole number of DuckDB's row groups (group_ends). Each piece's insert
fills row groups of its own, so only the last piece leaves a partial one; two pieces
that each left one gave the table partial groups that the next checkpoint merges by
writing their rows again, full groups between them included (the close of a 1M load of
JSON Lines or CSV: 0.6-0.75 CPU s, a twentieth of the load).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

# The least content worth a piece of its own: a smaller file is read in one piece (its
# reader, on one thread, is done before a second one would have paid for itself).
PIECE_BYTES = 8 << 20
# A first piece read from the file itself (readers.in_pieces, `lead`) takes this many
# times a piped piece's share: DuckDB's JSON reader holds every buffer it reads from a
# pipe, and a piped line costs it more than one read from the file. The 1M fleet's inbox
# and event logs in two pieces, six rounds in turn: cut at 49 % (four row groups of 8.2)
# the pipe's thread was the busier (inbox 1.33-1.54 CPU s against 1.20-1.34), at 61 %
# (five) the file's (1.53-1.59 against 1.06-1.13); the insert took 0.10 (inbox) and 0.14
# (events) CPU s less on average, its busier thread 0.05-0.13 more. 7/5 puts the cut of
# two pieces at 58 % of the file.
LEAD_WEIGHT = Fraction(7, 5)
# The rows of one of DuckDB's row groups (its storage's default, which the load's
# database keeps; tests/test_ingest_pieces.py holds DuckDB to it).
GROUP_ROWS = 122_880
# What a look for a line end past a cut of the scan reads at a time.
_SEEK_CHUNK = 1 << 20
# How long a feeder waits for its reader at a time before it looks whether the
# statement is over (a reader that never opens its pipe, or stops reading).
_POLL_MS = 50


@dataclass(frozen=True)
class Piece:
    """Bytes [start, end) of a file, and the lines before `start`."""

    start: int
    end: int
    before: int


def can_feed() -> bool:
    """Whether this system has named pipes and splice (Linux)."""
    return hasattr(os, "mkfifo") and hasattr(os, "splice")


def shares(k: int, lead: bool = False) -> list[Fraction]:
    """Where k pieces are cut, as fractions of the whole: equal shares, or with the first
    piece LEAD_WEIGHT times each other's (`lead`: it is read from the file itself)."""
    w = LEAD_WEIGHT if lead else Fraction(1)
    return [(w + i - 1) / (w + k - 1) for i in range(1, k)]


def cut(
    cuts: list[tuple[int, int]],
    end: int,
    k: int,
    least: int | None = None,
    lead: bool = False,
) -> list[Piece]:
    """Pieces of bytes [0, end): at most `k`, each of at least `least` bytes (default
    PIECE_BYTES), cut at the line ends of `cuts` (identity.Scan.cuts: (offset, lines
    before it)) nearest to the shares (`lead`: as shares). One piece, the whole, when it
    cannot be cut so."""
    least = PIECE_BYTES if least is None else max(least, 1)
    k = min(k, end // least)
    chosen: list[tuple[int, int]] = []
    for share in shares(k, lead):
        target = int(end * share)
        prev = chosen[-1][0] if chosen else 0
        usable = [c for c in cuts if prev + least <= c[0] <= end - least]
        if usable:
            chosen.append(min(usable, key=lambda c: abs(c[0] - target)))
    bounds = [(0, 0), *chosen, (end, -1)]
    return [
        Piece(a[0], b[0], a[1]) for a, b in zip(bounds, bounds[1:], strict=False) if b[0] > a[0]
    ]


def group_ends(
    path: Path,
    cuts: list[tuple[int, int]],
    lines: int,
    k: int,
    header: int = 0,
    lead: bool = False,
) -> list[tuple[int, int]]:
    """Line ends at which `k` pieces of a file of `lines` lines may be cut so that every
    piece but the last holds whole row groups (GROUP_ROWS rows; `header`: the lines
    before the first row), as (offset just after the line end, the lines before it):
    for each of the k - 1 shares (`lead`: as shares), the whole number of groups below
    it and above it. `cuts`: where the scan noted a line end (identity.Scan.cuts), to
    start from."""
    rows = lines - header
    wanted: set[int] = set()
    for fraction in shares(k, lead):
        share = int(rows * fraction)
        for groups in (share // GROUP_ROWS, share // GROUP_ROWS + 1):
            if 0 < groups * GROUP_ROWS < rows:
                wanted.add(header + groups * GROUP_ROWS)
    out = []
    for before in sorted(wanted):
        offset = _line_end(path, cuts, before)
        if offset is not None:
            out.append((offset, before))
    return out


def _line_end(path: Path, cuts: list[tuple[int, int]], target: int) -> int | None:
    """The offset just after the `target`-th line end of a file (None: it has fewer),
    read from the nearest of `cuts` before it (a scan notes one per buffer)."""
    offset, seen = max(((o, n) for o, n in [(0, 0), *cuts] if n <= target), key=lambda c: c[1])
    with open(path, "rb") as fh:
        fh.seek(offset)
        while seen < target:
            chunk = fh.read(_SEEK_CHUNK)
            if not chunk:
                return None
            count = chunk.count(b"\n")
            if seen + count < target:
                seen, offset = seen + count, offset + len(chunk)
                continue
            at = -1
            for _ in range(target - seen):
                at = chunk.index(b"\n", at + 1)
            return offset + at + 1
    return offset


def pipe_paths(folder: Path, name: str, pieces: list[Piece]) -> list[Path | None]:
    """Where each piece's named pipe goes (in the load's staging folder)."""
    return [folder / f"{name}.piece{i}" for i in range(len(pieces))]


class _Feeder(threading.Thread):
    """Fills one named pipe with one piece of the file."""

    def __init__(self, source: Path, pipe: Path, piece: Piece, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.source, self.pipe, self.piece, self.stop = source, pipe, piece, stop
        self.error: BaseException | None = None

    def _open(self) -> int | None:
        """The pipe's write end once its reader opened it (None: the statement ended)."""
        while True:
            try:
                return os.open(self.pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
            if self.stop.wait(0.001):
                return None

    def run(self) -> None:
        try:
            fd = self._open()
            if fd is None:
                return
            try:
                self._send(fd)
            finally:
                os.close(fd)
        except BrokenPipeError:
            pass  # the reader stopped early: its statement failed, the count tells
        except BaseException as exc:  # noqa: BLE001 - reported by feeding()
            self.error = exc

    def _send(self, fd: int) -> None:
        with contextlib.suppress(OSError):
            # Fewer, larger moves (the default pipe holds 64 KB); best effort.
            import fcntl

            fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        src = os.open(self.source, os.O_RDONLY)
        try:
            pos, end = self.piece.start, self.piece.end
            while pos < end:
                try:
                    n = os.splice(src, fd, end - pos, offset_src=pos, flags=os.SPLICE_F_NONBLOCK)
                except BlockingIOError:
                    if self.stop.is_set():
                        return
                    poll.poll(_POLL_MS)
                    continue
                if n == 0:
                    raise OSError(f"{self.source} ended before byte {end}")
                pos += n
        finally:
            os.close(src)


@contextlib.contextmanager
def feeding(source: Path, pieces: list[Piece], pipes: list[Path | None]) -> Iterator[None]:
    """Create the pieces' named pipes and fill each from `source` while the statement
    that reads them runs (the body); then stop the feeders and remove the pipes. A
    piece without a pipe (None) is read from the file itself. A feeder's failure (the
    file gone or shorter) is raised as an OSError after the body."""
    stop = threading.Event()
    feeders: list[_Feeder] = []
    try:
        for pipe, piece in zip(pipes, pieces, strict=True):
            if pipe is None:
                continue
            pipe.unlink(missing_ok=True)
            os.mkfifo(pipe, 0o600)
            feeders.append(_Feeder(source, pipe, piece, stop))
        for f in feeders:
            f.start()
        yield
    finally:
        stop.set()
        for f in feeders:
            f.join()
        for pipe in pipes:
            if pipe is not None:
                pipe.unlink(missing_ok=True)
    failed = [f.error for f in feeders if f.error is not None]
    if failed:
        raise OSError(f"a piece of {source} could not be read: {failed[0]}")
