"""One writer per database: an advisory lock every command that writes a database takes.

The lock is `flock` on a small file beside the database (`.NAME.lock`), never on the
database itself: `watch` replaces the database file at every publish, and a lock on a
replaced file would guard nothing. Whoever holds the lock writes who it is (pid, role)
into the file, so a refused writer can say why.

Writers of data (`ingest`, `rollout`, `record`) are refused at once while `watch` holds
the database: watch works on a private copy and publishes it by rename, so a row
written beside it would be silently gone at the next publish. Between other writers the
later one waits (a short ingest) and then gives up with a one-line error. The analysis
only refreshes derived tables and takes no lock: beside watch its work is replaced by
watch's own analysis at the next publish, which is harmless.

The kernel drops an flock when its holder dies, `kill -9` included, so a lock can never
be left behind; `holder()` is also how a reader tells a live watch from a dead one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ReplaygateError

WATCH = "watch"
# Roles that write data: each would be lost under a watch. The analysis, which only
# refreshes derived tables, takes no lock (DuckDB's own file lock serialises it).
ROLES = ("ingest", "rollout", "record", WATCH)
WAIT_SECONDS = 10.0


class DatabaseBusy(ReplaygateError):
    """Another process holds the database for writing."""


def lock_path(db: str | os.PathLike[str]) -> Path:
    p = Path(db).absolute()
    return p.with_name(f".{p.name}.lock")


@dataclass
class _Held:
    fd: int
    role: str
    count: int


# Locks this process holds, by resolved lock file (re-entrant: a command that opens the
# database twice holds it once).
_HELD: dict[str, _Held] = {}


@dataclass
class Lock:
    key: str
    role: str
    released: bool = False

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        held = _HELD.get(self.key)
        if held is None:
            return
        held.count -= 1
        if held.count <= 0:
            del _HELD[self.key]
            with contextlib.suppress(OSError):
                fcntl.flock(held.fd, fcntl.LOCK_UN)
            os.close(held.fd)


def _describe(info: dict[str, Any] | None) -> str:
    if not info:
        return "another process"
    role = info.get("role")
    pid = info.get("pid")
    what = f"`replaygate {role}`" if role in ROLES else "another process"
    return f"{what} (pid {pid})" if isinstance(pid, int) else what


def _read_info(fd: int) -> dict[str, Any] | None:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        doc = json.loads(os.read(fd, 4096).decode("utf-8", "replace") or "null")
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _refusal(db: str, info: dict[str, Any] | None, role: str) -> DatabaseBusy:
    if info and info.get("role") == WATCH:
        hint = {
            "rollout": "write the record to a rollout log watch reads (--to FILE)",
            "ingest": "give the files to watch instead",
            WATCH: "one watch per database",
        }.get(role, "stop watch first")
        return DatabaseBusy(
            f"{db} is owned by {_describe(info)}, which replaces it at every publish: "
            f"a write now would be lost ({hint})"
        )
    return DatabaseBusy(f"{db} is being written by {_describe(info)}; try again when it is done")


def acquire(db: str, role: str, wait: float = WAIT_SECONDS) -> Lock:
    """Take the writer lock of a database file for `role`; DatabaseBusy when the write
    must not happen now (watch owns the database, or another writer did not finish
    within `wait` seconds)."""
    if role not in ROLES:
        raise ValueError(f"unknown writer role {role!r}")
    path = lock_path(db)
    key = str(path.parent.resolve() / path.name)
    held = _HELD.get(key)
    if held is not None:
        if held.role == WATCH:
            raise _refusal(db, {"role": WATCH, "pid": os.getpid()}, role)
        held.count += 1
        return Lock(key, held.role)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    start = time.monotonic()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                info = _read_info(fd)
                # A moment's grace: the file may still name a watch that is gone while a
                # reader's holder() check holds the lock for an instant.
                if info and info.get("role") == WATCH and time.monotonic() - start > 0.3:
                    raise _refusal(db, info, role) from None
                if time.monotonic() >= start + wait:
                    raise _refusal(db, info, role) from None
                time.sleep(0.1)
        doc = {"pid": os.getpid(), "role": role, "since": time.time()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(doc).encode(), 0)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    _HELD[key] = _Held(fd, role, 1)
    return Lock(key, role)


def holder(db: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Who holds a database's writer lock now ({"pid", "role", "since"}), None if nobody
    (a holder that died, even by `kill -9`, holds nothing)."""
    path = lock_path(db)
    key = str(path.parent.resolve() / path.name) if path.parent.exists() else str(path)
    if key in _HELD:
        return {"pid": os.getpid(), "role": _HELD[key].role}
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_info(fd) or {"pid": None, "role": None}
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
