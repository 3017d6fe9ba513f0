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

import hashlib
import os
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import blake3

from .readers import FORMATS, MAX_LINE

CHUNK = 1 << 20
SCAN_CHUNK = 4 << 20


@dataclass(frozen=True)
class Known:
    """A loaded file, as the manifest remembers it."""

    file_id: int
    path: str
    abspath: str | None
    kind: str  # a name in readers.FORMATS
    consumed: int
    digest: str | None
    lines: int
    rows: int
    raw_digest: str | None  # of the on-disk bytes last read (gzip: compressed)
    ids_dropped: int = 0  # rows whose raw session id was dropped: no HMAC key was set
    gzip: bool = False  # read compressed


@dataclass
class Scan:
    """One pass over a file's content."""

    length: int = 0  # content bytes (decompressed)
    complete: int = 0  # bytes up to the end of the last complete line (what may be read now)
    digest: str = ""  # of content[:complete]
    lines: int = 0  # newlines in content[:complete]
    raw_digest: str = ""
    truncated: bool = False  # a gzip stream that breaks off (content ends at the break)
    broken: str | None = None  # truncated | corrupt | check (see break_reason)
    tail_open: bool = False  # content[:complete] ends without a newline (a whole .gz)
    prefixes: dict[int, str] = field(default_factory=dict)  # offset -> digest of content[:offset]
    overlong: bool = False  # a line is longer than readers.MAX_LINE (see drop_long_lines)
    unit_sep: bool = False  # the content holds the line reader's delimiter (US, 0x1F)
    # Scanned and found without a tab or a CR: whitespace the typed JSON reader skips
    # before a record where the line-exact reader does not (stagereads.py, its fast read).
    plain: bool = False
    # SHA-256 of every byte scanned (the manifest's `sha256` of a plain file read whole),
    # when the scan was asked for it; "" otherwise.
    sha256: str = ""
    # Where a plain file read from its start may be cut into pieces read side by side
    # (pieces.py): (offset just after a newline, the lines before it), at most one per
    # buffer scanned. None in a gzip file.
    cuts: list[tuple[int, int]] = field(default_factory=list)
    # A double quote after the first line (a quoted field of delimited text may then hold
    # a line end, and a record span lines).
    quoted: bool = False
    # Every line starting before this offset starts with a byte above 0x20: no blank
    # line, nor one a JSON reader may skip as whitespace, so each gives the reader a row
    # or fails it (a first piece read from the file itself: readers.in_pieces, `lead`).
    # 0 when the scan was not asked (`starts`).
    clean_to: int = 0


@dataclass
class Decision:
    """What to do with one file on disk."""

    action: str  # new | append | unchanged | moved | duplicate | empty | unreadable
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
    """The file's content in chunks (decompressed for gzip) from byte `start`. A broken
    gzip stream ends the content exactly where zlib stops trusting it, and sets
    state["truncated"] and state["break"] (why, for the quarantine row)."""
    state = {} if state is None else state
    with open(path, "rb") as fh:
        if not gz:
            fh.seek(start)
            while chunk := fh.read(CHUNK):
                yield chunk
            return
        d = zlib.decompressobj(_GZIP)
        skip = start
        while True:
            raw = fh.read(CHUNK)
            why = None
            # A highly compressed chunk inflates a thousandfold: take its output in
            # pieces of at most INFLATE_MAX bytes (a 1 MB gzip may hold a 1 GiB line).
            pending = raw
            while pending:
                data, d, why, pending = _inflate(d, pending)
                if skip:
                    cut = min(skip, len(data))
                    data, skip = data[cut:], skip - cut
                if data:
                    yield data
                if why:
                    break
            if not raw:
                data, why = d.flush(), None if d.eof else "truncated"
                if skip:
                    cut = min(skip, len(data))
                    data, skip = data[cut:], skip - cut
                if data:
                    yield data
            if why or not raw:
                state["truncated"] = why is not None
                state["break"] = why
                return


_GZIP = 16 + zlib.MAX_WBITS


# The most a single inflate call may return (memory per file stays bounded by it).
INFLATE_MAX = 16 << 20


def _members(d: Any, raw: bytes) -> tuple[bytes, Any, bytes]:
    """Inflate at most INFLATE_MAX bytes from `raw`; concatenated gzip members
    (`cat a.gz b.gz`) are one stream to gzip(1). Returns (output, the decompressor to go
    on with, the part of `raw` not inflated yet)."""
    if d.eof:
        d = zlib.decompressobj(_GZIP)
    out = d.decompress(raw, INFLATE_MAX)
    return out, d, d.unused_data if d.eof else d.unconsumed_tail


def _inflate(d: Any, raw: bytes) -> tuple[bytes, Any, str | None, bytes]:
    """(output, decompressor, None, rest of `raw`), or on a zlib error (output up to the
    byte where the stream fails, None, why, b""). zlib drops a call's output when it
    raises, so the failing chunk is fed again in small steps, then byte by byte, to keep
    every line that decompressed before the damage."""
    saved = d.copy()
    try:
        whole, d, rest = _members(d, raw)
        return whole, d, None, rest
    except zlib.error:
        pass
    d, out = saved, bytearray()
    pos, step = 0, 4096
    while pos < len(raw) and len(out) < INFLATE_MAX:
        piece = raw[pos : pos + step]
        before = d.copy()
        try:
            data, d, rest = _members(d, piece)
        except zlib.error as exc:
            if step > 1:
                d, step = before, 1  # the error is in this piece: go byte by byte
                continue
            # "incorrect data check" / "incorrect length check": the trailer's CRC or
            # length disagrees with what decompressed; anything else: bad deflate data.
            return bytes(out), None, "check" if "check" in str(exc) else "corrupt", b""
        out += data
        pos += len(piece) - len(rest)
    return bytes(out), d, None, raw[pos:]


def lf_only(path: Path, gz: bool, out: Path, bare_cr: bytes = b" ") -> None:
    """Copy the content with CRLF as LF and any other CR as `bare_cr` (what the file's
    format makes of it: readers.Format.bare_cr)."""
    held = b""
    with open(out, "wb") as dst:
        for chunk in content_chunks(path, gz):
            chunk = held + chunk
            # A CR at the end of a chunk is decided by the next chunk's first byte.
            held = b"\r" if chunk.endswith(b"\r") else b""
            if held:
                chunk = chunk[:-1]
            dst.write(chunk.replace(b"\r\n", b"\n").replace(b"\r", bare_cr))
        dst.write(bare_cr if held else b"")


def long_lines(path: Path, gz: bool, limit: int, start: int = 0) -> list[int]:
    """Line numbers (1-based, from `start`) of lines longer than `limit` bytes. A line
    that long spans chunks (CHUNK < limit), so only chunk edges are looked at."""
    out: list[int] = []
    line, run = 1, 0  # the current line's number and its bytes so far
    for chunk in content_chunks(path, gz, start):
        first = chunk.find(b"\n")
        if first < 0:
            run += len(chunk)
            continue
        if run + first > limit:
            out.append(line)
        line += chunk.count(b"\n")
        run = len(chunk) - chunk.rfind(b"\n") - 1
    if run > limit:
        out.append(line)
    return out


def drop_long_lines(path: Path, gz: bool, limit: int, out: Path) -> list[int]:
    """Copy the content to `out` without its lines longer than `limit` bytes, and with
    every US byte (0x1F, the line reader's delimiter, never valid raw in JSON) as RS
    (0x1E, just as invalid), so a line holding one is read whole and refused; return
    the numbers (1-based) of the lines left out. Memory stays within one chunk and one
    line of at most `limit` bytes: DuckDB's reader buffers a whole line before it can
    refuse it, so a 100 MB line (or a gzip bomb of one line) must never reach it. Only
    chunk edges are looked at (CHUNK and INFLATE_MAX are shorter than any such line)."""
    dropped: list[int] = []
    line = 1  # the number of the line being read
    held = bytearray()  # its bytes so far, while it is short enough to keep
    long = False
    with open(out, "wb") as dst:
        for raw in content_chunks(path, gz):
            chunk = raw.replace(b"\x1f", b"\x1e")
            first = chunk.find(b"\n")
            if first < 0:
                if not long:
                    held += chunk
                    if len(held) > limit:
                        long = True
                        held.clear()
                continue
            if long or len(held) + first > limit:
                dropped.append(line)
            else:
                dst.write(held)
                dst.write(chunk[: first + 1])
            last = chunk.rfind(b"\n")
            dst.write(chunk[first + 1 : last + 1])
            line += 1 + chunk.count(b"\n", first + 1, last + 1)
            held = bytearray(chunk[last + 1 :])
            long = len(held) > limit
        if long:
            dropped.append(line)
        else:
            dst.write(held)
    return dropped


def break_reason(broken: str, lines: int) -> str:
    """The quarantine reason for a gzip stream that breaks after `lines` complete lines
    (a partial line before the break is part of the break, counted once)."""
    if broken == "check":
        return (
            f"corrupt gzip: its data check fails at the end (after line {lines}); "
            "rows read from it may be damaged"
        )
    return f"{broken} gzip: the stream breaks after line {lines}"


def _count_lines(path: Path, start: int, end: int) -> int:
    """Newlines in a plain file's bytes [start, end)."""
    n = 0
    with open(path, "rb") as fh:
        fh.seek(start)
        left = end - start
        while left > 0 and (chunk := fh.read(min(SCAN_CHUNK, left))):
            n += chunk.count(b"\n")
            left -= len(chunk)
    return n


def _raw_digest(path: Path) -> str:
    h = blake3.blake3()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return str(h.hexdigest())


def _buffers(
    path: Path, gz: bool, state: dict[str, Any], reused: int = 1
) -> Iterator[tuple[bytes | bytearray, int]]:
    """(buffer, length) pairs of the content; plain files are read into `reused`
    buffers in turn, so a large file costs no allocation or copy beyond the read (a
    buffer is read into again `reused` buffers later)."""
    if gz:
        for chunk in content_chunks(path, gz, state=state):
            yield chunk, len(chunk)
        return
    bufs = [bytearray(SCAN_CHUNK) for _ in range(reused)]
    i = 0
    with open(path, "rb", buffering=0) as fh:
        while n := fh.readinto(bufs[i]):
            yield bufs[i], n
            i = (i + 1) % reused


# Newlines in a segment of at least _NUMPY_COUNT bytes of a file of at least _NUMPY_FILE
# are counted with numpy (about a third of bytes.count's CPU: 0.19 against 0.55 CPU s per
# GB). Importing numpy costs about 0.1 CPU s per process, paid back past about half a GB:
# a smaller file (a load in batches, a `watch` cycle) keeps bytes.count.
_NUMPY_COUNT = 1 << 16
_NUMPY_FILE = 256 << 20


# A new plain file of at least _STARTS_FILE bytes whose format may read its first piece
# from the file (readers.Format.lead_from_file) has its lines' first bytes looked at
# (Scan.clean_to) with numpy, in the pass that counts them: the newlines found rather
# than counted, about 0.1 CPU s more per GB than the count alone (and numpy's import),
# against 0.2-0.4 CPU s less for DuckDB's read of a 350 MB log (pieces.py).
_STARTS_FILE = 128 << 20


def _loose_start(buf: bytes | bytearray, n: int, at_start: bool) -> tuple[int, int | None]:
    """(newlines in buf[:n], the offset in it of the first line start whose byte is 0x20
    or below, or None); `at_start`: buf[0] starts a line. A line end at buf[n - 1]
    starts the next buffer's first line."""
    import numpy as np

    a = np.frombuffer(buf, np.uint8, n)
    ends = np.flatnonzero(a == 10)
    if at_start and n and buf[0] <= 0x20:
        return len(ends), 0
    starts = ends + 1
    if len(starts) and starts[-1] == n:
        starts = starts[:-1]
    loose = np.flatnonzero(a[starts] <= 0x20)
    return len(ends), int(starts[loose[0]]) if len(loose) else None


def _newlines(buf: bytes | bytearray, start: int, end: int, large: bool) -> int:
    """Newlines in buf[start:end] (`large`: of a file of at least _NUMPY_FILE bytes)."""
    if not large or end - start < _NUMPY_COUNT:
        return buf.count(b"\n", start, end)
    import numpy as np

    return int(np.count_nonzero(np.frombuffer(buf, np.uint8, end - start, start) == 10))


class _Sha256:
    """SHA-256 of a scan's buffers, taken in a thread of its own while the scan goes on
    (hashlib lets go of the GIL for a large buffer): the file is read once for both
    digests, and the two take a core each. A buffer is hashed before the scan reads into
    it again (_buffers with two buffers: `wait` before the next read)."""

    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.pool = ThreadPoolExecutor(1)
        self.pending: list[Future[None]] = []

    def update(self, view: memoryview) -> None:
        self.pending.append(self.pool.submit(self.h.update, view))

    def wait(self, keep: int) -> None:
        """Until at most `keep` buffers are still being hashed."""
        while len(self.pending) > keep:
            self.pending.pop(0).result()

    def hexdigest(self) -> str:
        self.wait(0)
        self.pool.shutdown()
        return self.h.hexdigest()


def _hasher() -> blake3.blake3:
    # Both cores for a large prefix; BLAKE3's tree mode gives the same digest either way.
    return blake3.blake3(max_threads=blake3.blake3.AUTO)


def scan(
    path: Path,
    gz: bool,
    whole: bool,
    offsets: set[int],
    lines_at: dict[tuple[int, str], int] | None = None,
    sha: bool = False,
    starts: bool = False,
) -> Scan:
    """Digest the content once, noting the digest at each of `offsets` (the consumed
    lengths of known files), the digest at the end of the last complete line, and the
    lines up to there. `whole`: the content is complete even without a final newline.
    `lines_at`: the lines of known prefixes, by (length, digest); a plain file's lines
    are then not counted up to the last of them, and a prefix whose digest matches
    takes its known count (an append costs the digest of what was read, not a count).
    `sha`: also take the SHA-256 of a plain file's bytes (Scan.sha256), in the same
    read. `starts`: also note how far every line starts above 0x20 (Scan.clean_to), in
    the pass that counts them, for a plain file read from its start (no known prefix)."""
    out = Scan()
    h = _hasher()
    sha_of = _Sha256() if sha and not gz else None
    marks = sorted(o for o in offsets if o > 0)
    size = 0 if gz else path.stat().st_size
    large = size >= _NUMPY_FILE
    skip_to = max((o for o, _ in lines_at or {} if 0 < o <= size), default=0)
    anchor = (0, 0)  # (offset, lines) of the longest known prefix the content starts with
    mi = 0
    pos = 0  # bytes hashed
    lines = 0
    # (hash state, position, lines) at the end of the last newline
    at_nl: tuple[blake3.blake3 | None, int, int] = (None, 0, 0)
    state: dict[str, Any] = {}
    run = 0  # bytes of the line being read (buffers are shorter than MAX_LINE)
    tab_cr = False
    # Line starts are looked at until a loose one is found (then `loose` is its offset).
    look = starts and not gz and not marks and not skip_to
    loose: int | None = None
    at_start = True  # the next buffer's first byte starts a line
    for buf, n in _buffers(path, gz, state, 1 if sha_of is None else 2):
        if sha_of is not None:
            sha_of.update(memoryview(buf)[:n])
        # Without marks, the buffer is one segment, up to its last line end: the line
        # ends found here are the ones it counts.
        found = None
        if look and loose is None:
            found, at = _loose_start(buf, n, at_start)
            loose = None if at is None else pos + at
            at_start = n > 0 and buf[n - 1] == 10
        first = buf.find(b"\n", 0, n)
        if first < 0:
            run += n
        else:
            out.overlong = out.overlong or run + first > MAX_LINE
            run = n - buf.rfind(b"\n", 0, n) - 1
        out.unit_sep = out.unit_sep or buf.find(b"\x1f", 0, n) >= 0
        if not out.quoted and (pos or first >= 0):
            out.quoted = buf.find(b'"', 0 if pos else first, n) >= 0
        tab_cr = tab_cr or buf.find(b"\t", 0, n) >= 0 or buf.find(b"\r", 0, n) >= 0
        view = memoryview(buf)[:n]
        i = 0
        while i < n:
            # A segment: up to the next mark, or the end of the buffer.
            end = min(n, marks[mi] - pos + i) if mi < len(marks) else n
            nl = buf.rfind(b"\n", i, end)
            if nl >= 0:
                h.update(view[i : nl + 1])
                if found is not None:
                    lines += found
                elif pos >= skip_to:
                    lines += _newlines(buf, i, nl + 1, large)
                at_nl = (h.copy(), pos + nl + 1 - i, lines)
                h.update(view[nl + 1 : end])
            else:
                h.update(view[i:end])
            pos += end - i
            i = end
            while mi < len(marks) and marks[mi] == pos:
                out.prefixes[marks[mi]] = h.hexdigest()
                known = (lines_at or {}).get((pos, out.prefixes[pos]))
                if known is not None and pos <= skip_to:
                    anchor = (pos, known)
                mi += 1
        view.release()
        if not gz and at_nl[1] > (out.cuts[-1][0] if out.cuts else 0):
            out.cuts.append((at_nl[1], at_nl[2]))
        if sha_of is not None:
            sha_of.wait(1)  # the other buffer is read into next
    out.length = pos
    if look:
        out.clean_to = pos if loose is None else loose
    if sha_of is not None:
        out.sha256 = sha_of.hexdigest()
    out.overlong = out.overlong or run > MAX_LINE
    out.plain = not tab_cr
    if skip_to:
        # Lines not counted in the pass: those after the longest matching known prefix,
        # up to where counting began (nothing, for a file that only grew).
        prefix = anchor[1] + _count_lines(path, anchor[0], min(skip_to, pos))
        lines += prefix
        at_nl = (at_nl[0], at_nl[1], at_nl[2] + prefix)
        # A cut's lines were counted from skip_to on; before it, not at all.
        out.cuts = [(o, n + prefix) for o, n in out.cuts if o >= skip_to]
    full = h.hexdigest()
    if (whole and not state.get("truncated")) or at_nl[1] == pos:
        out.complete, out.digest = pos, full
        out.lines = lines
    elif at_nl[0] is not None:
        out.complete, out.digest, out.lines = at_nl[1], at_nl[0].hexdigest(), at_nl[2]
    else:
        out.complete, out.digest, out.lines = 0, _hasher().hexdigest(), 0
    out.tail_open = out.complete > at_nl[1]
    if gz:
        out.raw_digest = _raw_digest(path)
        out.truncated = bool(state.get("truncated"))
        out.broken = state.get("break")
    else:
        out.raw_digest = full
    return out


def read_sha256(
    abspath: str | None, consumed: int | None, digest: str | None, gz: bool, raw: str | None
) -> str | None:
    """SHA-256 of what was read of a file (its first `consumed` bytes; a .gz file whole),
    for a manifest row an append left without one; None when the file is gone or its read
    part no longer has the digest it was read with (the bytes hashed would not be the
    bytes read)."""
    if not abspath or consumed is None or not digest:
        return None
    path = Path(abspath)
    sha, h = hashlib.sha256(), _hasher()
    try:
        with open(path, "rb") as fh:
            left = None if gz else consumed
            while chunk := fh.read(CHUNK if left is None else min(CHUNK, left)):
                sha.update(chunk)
                if left is not None:
                    h.update(chunk)
                    left -= len(chunk)
                    if not left:
                        break
    except OSError:
        return None
    if gz:
        return sha.hexdigest() if _raw_digest(path) == raw else None
    return sha.hexdigest() if left == 0 and h.hexdigest() == digest else None


def continues(known: Known, sc: Scan, kind: str) -> bool:
    """Does content with this scan start with what was read of `known`?"""
    if known.kind != kind or known.digest is None:
        return False
    if not FORMATS[kind].lines and sc.length != known.consumed:
        return False  # a file not read by lines is one whole; it never grows
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
    """The first line of the content, with its newline (a header row)."""
    buf = b""
    for chunk in content_chunks(path, gz):
        buf += chunk
        nl = buf.find(b"\n")
        if nl >= 0:
            return buf[: nl + 1]
    return buf


REHASH_NOTE = "read again to hash the session ids dropped when it was loaded without a key"


def plan(
    sources: list[Any], shown: list[str], knowns: list[Known], rehash: bool = False
) -> list[Decision]:
    """Decide, for every file of one run, whether it is new, continues a loaded file
    (and from where), or holds nothing new. `sources` are readers.Source objects.
    `rehash`: an HMAC key is set, so a loaded file whose raw session ids were dropped
    (loaded without the key) is read again whole and replaces its old rows."""
    by_kind: dict[str, list[Known]] = {}
    for k in knowns:
        by_kind.setdefault(k.kind, []).append(k)
    abspaths = [str(s.path.resolve()) for s in sources]
    decisions: list[Decision] = []
    claims: dict[int, list[int]] = {}  # known file id -> indexes of files continuing it
    rereads: dict[int, list[int]] = {}  # known file id -> indexes of files reading it again
    for i, src in enumerate(sources):
        try:
            decisions.append(_decide(src, i, by_kind, rehash, claims, rereads))
        except OSError as exc:
            # Gone or denied since it was found (rotated away, mode changed): this file
            # costs only itself.
            decisions.append(Decision("unreadable", note=f"unreadable file ({type(exc).__name__})"))
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
    # A file read again whose content is here more than once: the one with the most
    # content replaces it; the others hold nothing new.
    for idx in rereads.values():
        best = max(idx, key=lambda i: (decisions[i].scanned.complete, -i))
        for i in idx:
            if i != best:
                decisions[i] = Decision(
                    "duplicate", decisions[i].scan, note=f"same content as {shown[best]}"
                )
    # New content where a loaded file used to be, whose old content is nowhere in this
    # run: the file was rewritten, and its old rows are replaced.
    continued = set(claims)
    for i, d in enumerate(decisions):
        if d.action != "new":
            continue
        d.retire = sorted(
            set(d.retire)
            | {
                k.file_id
                for k in knowns
                if k.file_id not in continued
                and (k.abspath == abspaths[i] or (k.abspath is None and k.path == shown[i]))
            }
        )
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


def _decide(
    src: Any,
    i: int,
    by_kind: dict[str, list[Known]],
    rehash: bool,
    claims: dict[int, list[int]],
    rereads: dict[int, list[int]],
) -> Decision:
    """plan's decision for one file (the loaded file it continues noted in `claims`,
    or in `rereads` when it is read again to hash its ids)."""
    if src.path.stat().st_size == 0:
        # Nothing to read, and every empty file has the same digest: not a duplicate.
        return Decision("empty", note="empty file")
    kind = src.format
    cands = by_kind.get(kind, [])
    if src.gzip and cands:
        # A rotated .gz seen before: the compressed bytes say so without inflating.
        raw = _raw_digest(src.path)
        same = [k for k in cands if k.raw_digest == raw and not (rehash and k.ids_dropped)]
        if same:
            k = same[0]
            sc = Scan(length=k.consumed, complete=k.consumed, digest=k.digest or "")
            sc.lines, sc.raw_digest = k.lines, raw
            sc.prefixes[k.consumed] = k.digest or ""
            claims.setdefault(k.file_id, []).append(i)
            return Decision("unchanged", sc, k)
    whole = src.gzip or not FORMATS[kind].lines
    lines_at = {(k.consumed, k.digest): k.lines for k in cands if k.digest}
    # A file no loaded file of its format may continue is new (or the duplicate of one
    # in this run): the manifest's SHA-256 of it is taken in the same read, and its line
    # starts looked at when its first piece may be read from the file (_STARTS_FILE).
    fmt = FORMATS[kind]
    starts = (
        not cands
        and not src.gzip
        and fmt.lead_from_file
        and _STARTS_FILE <= src.path.stat().st_size <= (fmt.piece_limit or float("inf"))
    )
    sc = scan(
        src.path,
        src.gzip,
        whole,
        {k.consumed for k in cands},
        lines_at,
        sha=not cands,
        starts=starts,
    )
    match = [k for k in cands if continues(k, sc, kind)]
    if not match:
        return Decision("new", sc)
    k = max(match, key=lambda k: k.consumed)
    if rehash and k.ids_dropped:
        rereads.setdefault(k.file_id, []).append(i)
        return Decision("new", sc, retire=[k.file_id], note=REHASH_NOTE)
    claims.setdefault(k.file_id, []).append(i)
    return Decision("append" if sc.complete > k.consumed else "unchanged", sc, k)


def _still_there(k: Known) -> bool:
    if not k.abspath:
        return False
    p = Path(k.abspath)
    try:
        if not p.is_file():
            return False
        if not k.gzip and p.stat().st_size < k.consumed:
            return False
        sc = scan(p, k.gzip, k.gzip or not FORMATS[k.kind].lines, {k.consumed})
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
