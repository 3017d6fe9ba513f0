"""File identity by content: which loaded file a file on disk continues, and what is new.

A file is known by the bytes already read from it, not by its name or path. Each
loaded file keeps `consumed` (bytes of content read, up to the end of its last complete
line), their BLAKE3 `digest`, and the number of lines in them. A file on disk whose
content starts with exactly those bytes is that file: renamed (`access.log` ->
`access.log.1`, dated names), compressed (`.gz` content is compared decompressed),
reached by another path, or grown. Only the bytes after `consumed` are read. Plain text
is read up to its last newline: a line still being written waits for the next ingest.
A gzip file is complete (rotated logs are compressed once closed), so it is read whole.

Digests cover the whole prefix on every check (neither size nor mtime is trusted);
BLAKE3 keeps that cheap next to the cost of parsing what is new.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from .readers import FORMATS

CHUNK = 1 << 20
SCAN_CHUNK = 4 << 20


@dataclass(frozen=True)
class Known:
    """A loaded file, as the manifest remembers it."""

    file_id: int
    path: str
    abspath: str | None
    kind: str  # jsonl | csv | parquet
    consumed: int
    digest: str | None
    lines: int
    rows: int
    raw_digest: str | None  # of the on-disk bytes last read (gzip: compressed)


@dataclass
class Scan:
    """One pass over a file's content."""

    length: int = 0  # content bytes (decompressed)
    complete: int = 0  # bytes up to the end of the last complete line (what may be read now)
    digest: str = ""  # of content[:complete]
    lines: int = 0  # newlines in content[:complete]
    raw_digest: str = ""
    truncated: bool = False  # a gzip stream that breaks off
    prefixes: dict[int, str] = field(default_factory=dict)  # offset -> digest of content[:offset]


@dataclass
class Decision:
    """What to do with one file on disk."""

    action: str  # new | append | unchanged | moved | duplicate | empty
    scan: Scan | None = None
    known: Known | None = None  # the file it continues (append, unchanged, moved)
    retire: list[int] = field(default_factory=list)  # file ids whose path now holds new content
    note: str = ""

    @property
    def start(self) -> int:
        return self.known.consumed if self.known else 0

    @property
    def scanned(self) -> Scan:
        """The scan; every action but `empty` has one."""
        if self.scan is None:
            raise ValueError(f"a {self.action} file has no scan")
        return self.scan


def content_chunks(
    path: Path, gz: bool, start: int = 0, state: dict[str, Any] | None = None
) -> Iterator[bytes]:
    """The file's content in chunks (decompressed for gzip) from byte `start`; a broken
    gzip stream ends the content where it breaks (and sets state["truncated"])."""
    state = {} if state is None else state
    with open(path, "rb") as fh:
        if not gz:
            fh.seek(start)
            while chunk := fh.read(CHUNK):
                yield chunk
            return
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        skip = start
        while True:
            raw = fh.read(CHUNK)
            try:
                data = d.decompress(raw) if raw else d.flush()
                # Concatenated gzip members (`cat a.gz b.gz`) are one stream to gzip(1).
                while d.eof and d.unused_data:
                    rest = d.unused_data
                    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    data += d.decompress(rest)
            except zlib.error:
                state["truncated"] = True
                return
            if skip:
                cut = min(skip, len(data))
                data, skip = data[cut:], skip - cut
            if data:
                yield data
            if not raw:
                state["truncated"] = not d.eof
                return


def _raw_digest(path: Path) -> str:
    h = blake3.blake3()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _buffers(
    path: Path, gz: bool, state: dict[str, Any]
) -> Iterator[tuple[bytes | bytearray, int]]:
    """(buffer, length) pairs of the content; plain files are read into one reused
    buffer, so a large file costs no allocation or copy beyond the read."""
    if gz:
        for chunk in content_chunks(path, gz, state=state):
            yield chunk, len(chunk)
        return
    buf = bytearray(SCAN_CHUNK)
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(buf):
            yield buf, n


def _hasher() -> blake3.blake3:
    # Both cores for a large prefix; BLAKE3's tree mode gives the same digest either way.
    return blake3.blake3(max_threads=blake3.blake3.AUTO)


def scan(path: Path, gz: bool, whole: bool, offsets: set[int]) -> Scan:
    """Digest the content once, noting the digest at each of `offsets` (the consumed
    lengths of known files), the digest at the end of the last complete line, and the
    lines up to there. `whole`: the content is complete even without a final newline."""
    out = Scan()
    h = _hasher()
    marks = sorted(o for o in offsets if o > 0)
    mi = 0
    pos = 0  # bytes hashed
    lines = 0
    # (hash state, position, lines) at the end of the last newline
    at_nl: tuple[blake3.blake3 | None, int, int] = (None, 0, 0)
    state: dict[str, Any] = {}
    for buf, n in _buffers(path, gz, state):
        view = memoryview(buf)[:n]
        i = 0
        while i < n:
            # A segment: up to the next mark, or the end of the buffer.
            end = min(n, marks[mi] - pos + i) if mi < len(marks) else n
            nl = buf.rfind(b"\n", i, end)
            if nl >= 0:
                h.update(view[i : nl + 1])
                lines += buf.count(b"\n", i, nl + 1)
                at_nl = (h.copy(), pos + nl + 1 - i, lines)
                h.update(view[nl + 1 : end])
            else:
                h.update(view[i:end])
            pos += end - i
            i = end
            while mi < len(marks) and marks[mi] == pos:
                out.prefixes[marks[mi]] = h.hexdigest()
                mi += 1
        view.release()
    out.length = pos
    full = h.hexdigest()
    if whole or at_nl[1] == pos:
        out.complete, out.digest = pos, full
        out.lines = lines
    elif at_nl[0] is not None:
        out.complete, out.digest, out.lines = at_nl[1], at_nl[0].hexdigest(), at_nl[2]
    else:
        out.complete, out.digest, out.lines = 0, _hasher().hexdigest(), 0
    if gz:
        out.raw_digest = _raw_digest(path)
        out.truncated = bool(state.get("truncated"))
    else:
        out.raw_digest = full
    return out


def continues(known: Known, sc: Scan, kind: str) -> bool:
    """Does content with this scan start with what was read of `known`?"""
    if known.kind != kind or known.digest is None:
        return False
    if not FORMATS[kind].lines and sc.length != known.consumed:
        return False  # a Parquet file is one whole; it never grows
    return sc.prefixes.get(known.consumed) == known.digest


def write_tail(path: Path, gz: bool, start: int, end: int, out: Path, header: bytes = b"") -> int:
    """Copy content[start:end] (after `header`) to `out`; the newlines copied."""
    lines = 0
    with open(out, "wb") as dst:
        dst.write(header)
        if not gz:
            with open(path, "rb") as src:
                src.seek(start)
                left = end - start
                while left > 0:
                    chunk = src.read(min(CHUNK, left))
                    if not chunk:
                        break
                    lines += chunk.count(b"\n")
                    dst.write(chunk)
                    left -= len(chunk)
            return lines
        left = end - start
        for chunk in content_chunks(path, gz, start):
            chunk = chunk[:left]
            lines += chunk.count(b"\n")
            dst.write(chunk)
            left -= len(chunk)
            if left <= 0:
                break
    return lines


def first_line(path: Path, gz: bool) -> bytes:
    """The first line of the content, with its newline (a CSV header)."""
    buf = b""
    for chunk in content_chunks(path, gz):
        buf += chunk
        nl = buf.find(b"\n")
        if nl >= 0:
            return buf[: nl + 1]
    return buf


def plan(sources: list[Any], shown: list[str], knowns: list[Known]) -> list[Decision]:
    """Decide, for every file of one run, whether it is new, continues a loaded file
    (and from where), or holds nothing new. `sources` are readers.Source objects."""
    by_kind: dict[str, list[Known]] = {}
    for k in knowns:
        by_kind.setdefault(k.kind, []).append(k)
    abspaths = [str(s.path.resolve()) for s in sources]
    decisions: list[Decision] = []
    claims: dict[int, list[int]] = {}  # known file id -> indexes of files continuing it
    for i, src in enumerate(sources):
        if src.path.stat().st_size == 0:
            # Nothing to read, and every empty file has the same digest: not a duplicate.
            decisions.append(Decision("empty", note="empty file"))
            continue
        kind = src.format
        cands = by_kind.get(kind, [])
        if src.gzip and cands:
            # A rotated .gz seen before: the compressed bytes say so without inflating.
            raw = _raw_digest(src.path)
            same = [k for k in cands if k.raw_digest == raw]
            if same:
                k = same[0]
                sc = Scan(length=k.consumed, complete=k.consumed, digest=k.digest or "")
                sc.lines, sc.raw_digest = k.lines, raw
                sc.prefixes[k.consumed] = k.digest or ""
                decisions.append(Decision("unchanged", sc, k))
                claims.setdefault(k.file_id, []).append(i)
                continue
        whole = src.gzip or not FORMATS[kind].lines
        sc = scan(src.path, src.gzip, whole, {k.consumed for k in cands})
        match = [k for k in cands if continues(k, sc, kind)]
        if not match:
            decisions.append(Decision("new", sc))
            continue
        k = max(match, key=lambda k: k.consumed)
        action = "append" if sc.complete > k.consumed else "unchanged"
        decisions.append(Decision(action, sc, k))
        claims.setdefault(k.file_id, []).append(i)
    by_id = {k.file_id: k for k in knowns}
    # A loaded file continued by several files (a copy, or a .gz next to its original):
    # the one with the most content continues it; the others hold nothing new.
    for fid, idx in claims.items():
        k = by_id[fid]
        best = max(idx, key=lambda i: (decisions[i].scanned.complete, -i))
        for i in idx:
            if i != best:
                decisions[i] = Decision(
                    "duplicate", decisions[i].scan, note=f"same content as {shown[best]}"
                )
        d = decisions[best]
        here = abspaths[best]
        if k.abspath != here and k.path != shown[best] and k.abspath not in abspaths:
            if _still_there(k):
                # The earlier path still holds this content: this is a copy, not a move.
                decisions[best] = Decision("duplicate", d.scan, note=f"same content as {k.path}")
                continue
            if d.action == "unchanged":
                decisions[best] = Decision("moved", d.scan, k, note=f"renamed from {k.path}")
            else:
                d.note = f"renamed from {k.path}"
    # New content where a loaded file used to be, whose old content is nowhere in this
    # run: the file was rewritten, and its old rows are replaced.
    continued = set(claims)
    for i, d in enumerate(decisions):
        if d.action != "new":
            continue
        d.retire = [
            k.file_id
            for k in knowns
            if k.file_id not in continued
            and (k.abspath == abspaths[i] or (k.abspath is None and k.path == shown[i]))
        ]
    # Identical new files in one run: the first is loaded, the others are duplicates.
    first: dict[str, int] = {}
    for i, d in enumerate(decisions):
        if d.action == "new":
            key = d.scanned.raw_digest
            if key in first:
                decisions[i] = Decision(
                    "duplicate", d.scan, note=f"same content as {shown[first[key]]}"
                )
            else:
                first[key] = i
    return decisions


def _still_there(k: Known) -> bool:
    if not k.abspath:
        return False
    p = Path(k.abspath)
    try:
        if not p.is_file():
            return False
        gz = p.name.lower().endswith(".gz")
        if not gz and p.stat().st_size < k.consumed:
            return False
        sc = scan(p, gz, gz or k.kind == "parquet", {k.consumed})
    except OSError:
        return False
    return continues(k, sc, k.kind)


def copy_prefix(path: Path, end: int, out: Path) -> None:
    """A plain file's first `end` bytes (its complete lines), for a reader that would
    otherwise also read the line still being written."""
    with open(path, "rb") as src, open(out, "wb") as dst:
        left = end
        while left > 0:
            n = (
                os.copy_file_range(src.fileno(), dst.fileno(), left)
                if hasattr(os, "copy_file_range")
                else 0
            )
            if n <= 0:
                dst.write(src.read(left))
                break
            left -= n
