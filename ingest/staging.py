"""Staging folders and temporary files that a killed run cannot leave behind for good.

Whatever replaygate stages before it is done (a simulated fleet inside `--out`, an
ingest batch's copies and scratch database in the temporary folder, an output's
temporary file beside its name) holds an `flock` for as long as its run lives: on the
folder's lock file, or on the temporary file itself. The kernel drops the lock when its
holder dies, `kill -9` included, so the next run that stages in the same place knows a
leftover from the work of a run still going, and removes it. A leftover of a version
without the lock (no lock file) is removed once it is older than `LEGACY_AGE`: no run
stages that long without touching its folder's lock.

A leftover matters beyond disk space: `ingest DIR` reads folders recursively, so a
half-written fleet left in `--out` would be read beside the real one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

LOCK = ".replaygate-staging.lock"
LEGACY_AGE = 3600.0
NEW = ".new"  # a temporary file's name until its run holds it


def _free(path: Path) -> bool:
    """Whether nobody holds the flock of `path` (a file, opened without following a
    link); False when it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # closing drops the lock just taken
    return True


def _aged(p: Path) -> bool:
    try:
        return time.time() - os.lstat(p).st_mtime > LEGACY_AGE
    except OSError:
        return False


def _stale_folder(p: Path) -> bool:
    try:
        attrs = os.lstat(p)
    except OSError:
        return False
    if not stat.S_ISDIR(attrs.st_mode):
        return False  # never a link to a folder elsewhere, never someone's file
    lock = p / LOCK
    if os.path.lexists(lock):
        return _free(lock)
    return time.time() - attrs.st_mtime > LEGACY_AGE


def sweep(parent: str | os.PathLike[str], prefix: str) -> list[Path]:
    """Remove the staging folders named `prefix*` in `parent` that no live run holds;
    returns them."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            p = Path(entry.path)
            if entry.name.startswith(prefix) and _stale_folder(p):
                shutil.rmtree(p, ignore_errors=True)
                removed.append(p)
    return removed


@contextlib.contextmanager
def folder(parent: str | os.PathLike[str], prefix: str) -> Iterator[Path]:
    """A new staging folder `prefix*` in `parent`, held for the block and removed after
    it; stale ones of the same prefix (their run died) are removed first."""
    sweep(parent, prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    fd = -1
    try:
        # Locked under another name, then renamed: a lock file that exists is held, or
        # another run's sweep between the two steps would take the new folder for stale.
        fd = os.open(path / f"{LOCK}.new", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.rename(path / f"{LOCK}.new", path / LOCK)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        if fd >= 0:
            os.close(fd)


def sweep_files(parent: str | os.PathLike[str], prefix: str, suffix: str) -> list[Path]:
    """Remove the temporary files `prefix*suffix` in `parent` that no live run holds (a
    run holds the flock of its own temporary file while it writes it)."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(parent):
            name = entry.name
            if not name.startswith(prefix):
                continue
            p = Path(entry.path)
            if name.endswith(suffix):
                stale = entry.is_file(follow_symlinks=False) and _free(p)
            elif name.endswith(suffix + NEW):
                # Not yet held by its run, or left by a run killed in that instant.
                stale = entry.is_file(follow_symlinks=False) and _aged(p)
            else:
                continue
            if stale:
                with contextlib.suppress(OSError):
                    p.unlink()
                    removed.append(p)
    return removed


@contextlib.contextmanager
def temp_file(parent: str | os.PathLike[str], prefix: str, suffix: str) -> Iterator[Path]:
    """A new temporary file `prefix*suffix` in `parent`, held (flock) for the block;
    removed after it unless the block moved it away. Stale ones are removed first."""
    sweep_files(parent, prefix, suffix)
    # Made and locked under a name no sweep takes for stale, then linked to its own name:
    # between mkstemp and flock another run's sweep would take the new file for stale.
    fd, made = tempfile.mkstemp(prefix=prefix, suffix=suffix + NEW, dir=parent)
    path = Path(made)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        own = Path(made[: -len(NEW)])
        os.link(made, own)  # never over another file: mkstemp's name is unique with NEW
        path.unlink()
        path = own
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)
