"""The one guard every file replaygate writes goes through (`gates --junit`, `report -o`,
`report --bundle`, `rollout ... --to`, `simulate --out`, watch's heartbeat, the files of
`probe --out`).

An output path is judged by where it really lands: its parent folders resolved, so a
relative path from another folder or a link among the folders cannot make it miss the
database, its WAL, its decision history, its writer lock, the configuration or an
ingested input (inputs are known by their absolute path, recorded at ingest). A path
that is itself a symbolic link is refused: whatever it points at, writing there is
not what the name says. A file is written whole to a new temporary file in the same
folder and renamed over its name, so a reader never sees half a report, a crash
leaves the old file, and a hard link to an input keeps the input's bytes. A file that
grows by appends (the probe's evidence) is judged the same way and opened without
following a link planted after the check.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from replaygate.core.errors import ReplaygateError
from replaygate.core.lock import lock_path
from replaygate.ingest import staging

from . import decisionlog

DATABASE = "the database"
HISTORY = "the database's decision history"
CONFIGURATION = "the configuration"
INPUT = "an ingested input"


class OutputRefused(ReplaygateError):
    """An output path that would destroy something replaygate reads."""


def _real(path: str | os.PathLike[str]) -> Path:
    """Where a name really is: its folders resolved, its last component kept (a link
    there is judged as a link, not as what it points at)."""
    p = Path(os.path.abspath(os.fspath(path)))
    return p.parent.resolve() / p.name


@dataclass
class Guard:
    """The files an output must not land on, each with what it is."""

    protected: dict[Path, str] = field(default_factory=dict)

    def protect(self, path: str | os.PathLike[str] | None, what: str) -> None:
        if not path or os.fspath(path) == ":memory:":
            return
        for p in {_real(path), Path(os.path.abspath(os.fspath(path))).resolve()}:
            self.protected.setdefault(p, what)

    def check(self, out: str | os.PathLike[str]) -> Path:
        """The real path `out` writes to, or a one-line refusal."""
        real = _real(out)
        try:
            attrs = os.lstat(real)
        except FileNotFoundError:
            attrs = None
        except OSError as exc:
            raise OutputRefused(f"{out}: cannot write there ({exc.strerror})") from None
        if attrs is not None and stat.S_ISLNK(attrs.st_mode):
            raise OutputRefused(
                f"{out}: is a symbolic link; refusing to write through it "
                "(remove it, or give the path it points to)"
            )
        if attrs is not None and not stat.S_ISREG(attrs.st_mode):
            raise OutputRefused(f"{out}: is not a regular file; refusing to replace it")
        what = self.protected.get(real)
        if what is None and attrs is not None:
            what = self._same_file(attrs)
        if what is not None:
            raise OutputRefused(f"{out}: is {what}; refusing to overwrite it")
        return real

    def _same_file(self, attrs: os.stat_result) -> str | None:
        # A second name for a protected file (a hard link, a bind mount) is that file.
        for p, what in self.protected.items():
            with contextlib.suppress(OSError):
                o = os.stat(p)
                if (o.st_dev, o.st_ino) == (attrs.st_dev, attrs.st_ino):
                    return what
        return None

    @contextlib.contextmanager
    def replacing(self, out: str | os.PathLike[str]) -> Iterator[Path]:
        """A new temporary file beside `out` to write; renamed over `out` when the block
        ends without an error, removed otherwise."""
        real = self.check(out)
        real.parent.mkdir(parents=True, exist_ok=True)
        # Held while it is written; one a killed run left beside the name is removed.
        with staging.temp_file(real.parent, f".{real.name}.", ".tmp") as tmp:
            yield tmp
            # Checked again just before: a link planted meanwhile is refused, not replaced.
            self.check(out)
            os.replace(tmp, real)

    def move_into(self, staged: Path, out: str | os.PathLike[str]) -> Path:
        """Put a file written elsewhere in the same file system (a folder of staged
        outputs, such as a simulated fleet) at `out`: judged like any output, then
        renamed over the name."""
        real = self.check(out)
        os.replace(staged, real)
        return real

    def write_bytes(self, out: str | os.PathLike[str], data: bytes) -> Path:
        with self.replacing(out) as tmp, open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        return _real(out)

    def write_text(self, out: str | os.PathLike[str], text: str) -> Path:
        return self.write_bytes(out, text.encode("utf-8"))

    def append_bytes(self, out: str | os.PathLike[str], data: bytes) -> Path:
        """Append `data` to `out` (created if missing), judged like any output. The name
        is opened without following a link and without blocking on a FIFO, and what was
        opened is judged again by identity: a link or a second name of a protected file
        planted between the check and the open is refused, not written through."""
        real = self.check(out)
        real.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(real, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as exc:
            raise OutputRefused(f"{out}: cannot write there ({exc.strerror})") from None
        try:
            attrs = os.fstat(fd)
            if not stat.S_ISREG(attrs.st_mode):
                raise OutputRefused(f"{out}: is not a regular file; refusing to append to it")
            what = self._same_file(attrs)
            if what is not None:
                raise OutputRefused(f"{out}: is {what}; refusing to append to it")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return real


def for_database(
    db_path: str | os.PathLike[str] | None,
    con: duckdb.DuckDBPyConnection | None = None,
    config_source: str | os.PathLike[str] | None = None,
    extra: Iterable[tuple[str | os.PathLike[str], str]] = (),
) -> Guard:
    """The guard for outputs of a command on a database: the database, its WAL, its
    history and lock, the configuration, and (given a connection) every input it holds."""
    g = Guard()
    if db_path and os.fspath(db_path) != ":memory:":
        db = os.fspath(db_path)
        g.protect(db, DATABASE)
        g.protect(db + ".wal", DATABASE)
        g.protect(lock_path(db), DATABASE)
        g.protect(decisionlog.file_for_db(db), HISTORY)
    if config_source and os.fspath(config_source) != "built-in defaults":
        g.protect(config_source, CONFIGURATION)
    if con is not None:
        for name in inputs(con):
            g.protect(name, INPUT)
    for path, what in extra:
        g.protect(path, what)
    return g


def inputs(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every input file the database was loaded from: by the absolute path recorded at
    ingest, and by the path as given (all that databases of older versions kept)."""
    cols = {r[0] for r in con.execute("DESCRIBE files").fetchall()}
    wanted = "path, abspath" if "abspath" in cols else "path"
    rows = con.execute(f"SELECT DISTINCT {wanted} FROM files").fetchall()
    return sorted({p for row in rows for p in row if p})
