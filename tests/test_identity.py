"""The scan's digests: its SHA-256, taken in a thread over two buffers read into in turn,
equals hashlib's over the whole file at every buffer edge, waits for a buffer before the
scan reads into it again, and fails the scan when it fails; its numpy newline count equals
bytes.count."""

from __future__ import annotations

import hashlib
import time

import pytest

from replaygate.ingest import identity

C = identity.SCAN_CHUNK
_REAL_SHA256 = hashlib.sha256


@pytest.mark.parametrize("size", [1, C - 1, C + 1, 2 * C, 2 * C + 1, 3 * C - 1])
def test_scan_sha256_is_hashlibs_at_every_buffer_edge(tmp_path, size):
    content = (bytes(range(256)) * (size // 256 + 1))[:size]
    p = tmp_path / "f.jsonl"
    p.write_bytes(content)
    sc = identity.scan(p, False, False, set(), sha=True)
    assert sc.sha256 == hashlib.sha256(content).hexdigest()
    assert sc.lines == content[: sc.complete].count(b"\n")


class _SlowSha:
    """hashlib.sha256 that copies its input only after a pause: a buffer the scan
    read into again before its hash finished would be hashed with the new bytes."""

    def __init__(self) -> None:
        self.h = _REAL_SHA256()

    def update(self, view) -> None:
        time.sleep(0.05)
        self.h.update(bytes(view))

    def hexdigest(self) -> str:
        return self.h.hexdigest()


def test_scan_sha256_waits_for_a_buffer_before_reusing_it(tmp_path, monkeypatch):
    # Every buffer's bytes differ, so a reused buffer changes what a late hash sees.
    content = b"".join(bytes([65 + i]) * (C - 1) + b"\n" for i in range(5)) + b"tail"
    p = tmp_path / "f.jsonl"
    p.write_bytes(content)
    monkeypatch.setattr(identity.hashlib, "sha256", _SlowSha)
    sc = identity.scan(p, False, False, set(), sha=True)
    monkeypatch.undo()
    assert sc.sha256 == hashlib.sha256(content).hexdigest()


def test_an_error_in_the_sha256_thread_fails_the_scan(tmp_path, monkeypatch):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a":1}\n' * (C // 4))

    class Broken(_SlowSha):
        def update(self, view) -> None:
            raise OSError("boom")

    monkeypatch.setattr(identity.hashlib, "sha256", Broken)
    with pytest.raises(OSError, match="boom"):
        identity.scan(p, False, False, set(), sha=True)


@pytest.mark.parametrize("kind", [bytes, bytearray])
def test_numpy_newline_count_equals_bytes_count_at_its_threshold(kind):
    t = identity._NUMPY_COUNT
    data = kind((b"ab\ncd\n\n" * (3 * t // 7 + 10))[: 3 * t])
    for start in (0, 1, 7, t - 1):
        for length in (0, 1, t - 2, t - 1, t, t + 1, 2 * t + 3):
            end = min(len(data), start + length)
            for large in (True, False):  # a file of _NUMPY_FILE or more, or a smaller one
                assert identity._newlines(data, start, end, large) == data.count(
                    b"\n", start, end
                ), (start, length, large)
