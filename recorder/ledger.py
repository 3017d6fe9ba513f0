"""Append contract records to rotated JSON Lines files (sessions, streams, events,
dispatches), and the contract's payload digest."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def payload_digest(name, arguments) -> str:
    """SHA-256 of the canonical JSON `{"name": ..., "arguments": ...}` (keys sorted, no
    whitespace, UTF-8): a call's identity without its JSON-RPC id, so a re-send of the
    same call has the same digest."""
    doc = {"name": name, "arguments": arguments}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class LedgerWriter:
    """One file per record type, rotated by size: sessions-<n>.jsonl, ..."""

    def __init__(self, out_dir, hmac_key: bytes, rotate_bytes: int = 64 << 20):
        self.dir = Path(out_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.key = hmac_key
        self.rotate_bytes = rotate_bytes
        self._files: dict[str, tuple] = {}

    def session_hmac(self, raw: str) -> str:
        return hmac.new(self.key, raw.encode(), hashlib.sha256).hexdigest()

    def write(self, table: str, row: dict) -> None:
        line = (
            json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":"))
            + "\n"
        )
        fh, n, size = self._files.get(table, (None, 0, 0))
        if fh is None or size + len(line) > self.rotate_bytes:
            if fh is not None:
                fh.close()
                n += 1
            fh = open(self.dir / f"{table}-{n:04d}.jsonl", "a", encoding="utf-8")  # noqa: SIM115
            size = fh.tell()
        fh.write(line)
        fh.flush()
        self._files[table] = (fh, n, size + len(line))

    def close(self) -> None:
        for fh, _, _ in self._files.values():
            fh.close()
        self._files.clear()
