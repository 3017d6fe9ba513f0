"""Which files an ingest reads: input files found under the given paths by their
format's file-name endings (readers.detect), what is passed over and why, whether a
file can be read at all, and how a file is named and hashed in the manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from replaygate.core.errors import ReplaygateError

from . import readers
from .results import unreadable


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


def readable(src: readers.Source) -> str | None:
    """Why a file cannot be read at all, or None. Checked before anything else reads it,
    so one such file costs its own rows and never the run."""
    try:
        with open(src.path, "rb") as fh:
            head = fh.read(2)
        if src.gzip and head and head != b"\x1f\x8b":
            return "unreadable file: named .gz but not gzip"
    except OSError as exc:
        return unreadable(exc)
    return None


def sha256(path: Path) -> str:
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def display(path: Path) -> str:
    """A file's name in the manifest and the report: relative to the working folder
    when it is below it, else absolute."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path.resolve())
