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
nothing passes through Python). Where the cuts come from: the scan that digests the file
notes a line end per buffer with the lines before it (identity.Scan.cuts).

The load keeps the rows only if every line gave one row (commit.py), as for a file read
whole: a piece that gives fewer rows than its lines (a blank line the reader skips, a
feeder that fails) leaves the total short, and the file is staged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The least content worth a piece of its own: a smaller file is read in one piece (its
# reader, on one thread, is done before a second one would have paid for itself).
PIECE_BYTES = 8 << 20
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


def cut(cuts: list[tuple[int, int]], end: int, k: int, least: int | None = None) -> list[Piece]:
    """Pieces of bytes [0, end): at most `k`, each of at least `least` bytes (default
    PIECE_BYTES), cut at the line ends of `cuts` (identity.Scan.cuts: (offset, lines
    before it)) nearest to equal shares. One piece, the whole, when it cannot be cut so."""
    least = PIECE_BYTES if least is None else max(least, 1)
    k = min(k, end // least)
    chosen: list[tuple[int, int]] = []
    for i in range(1, k):
        target = end * i // k
        prev = chosen[-1][0] if chosen else 0
        usable = [c for c in cuts if prev + least <= c[0] <= end - least]
        if usable:
            chosen.append(min(usable, key=lambda c: abs(c[0] - target)))
    bounds = [(0, 0), *chosen, (end, -1)]
    return [
        Piece(a[0], b[0], a[1]) for a, b in zip(bounds, bounds[1:], strict=False) if b[0] > a[0]
    ]


def pipe_paths(folder: Path, name: str, pieces: list[Piece]) -> list[Path]:
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
def feeding(source: Path, pieces: list[Piece], pipes: list[Path]) -> Iterator[None]:
    """Create the pieces' named pipes and fill each from `source` while the statement
    that reads them runs (the body); then stop the feeders and remove the pipes. A
    feeder's failure (the file gone or shorter) is raised as an OSError after the body."""
    stop = threading.Event()
    feeders: list[_Feeder] = []
    try:
        for pipe, piece in zip(pipes, pieces, strict=True):
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
            pipe.unlink(missing_ok=True)
    failed = [f.error for f in feeders if f.error is not None]
    if failed:
        raise OSError(f"a piece of {source} could not be read: {failed[0]}")
