"""What the probe writes under --out: the events it received as inbox receipts
(`mcpInboxReceipt.v1`), and the client's own facts about its sessions and streams where the
contract has them (`mcpHttpSession.v1`: principal `replaygate-probe`, stage, release;
`mcpSseStream.v1`: opened, cut, resumed from which cursor, rejected, completed) — JSON Lines
that `replaygate ingest` reads like any producer's. Raw session ids never reach a file:
they are HMACed with the same key the servers and `ingest` use. Every byte goes through a
`Sink` the caller hands in (the CLI's is replaygate's output guard): the probe judges no
path itself."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from .wire import PRINCIPAL


class Sink(Protocol):
    """Where the probe's files are written: `append_bytes` for the evidence, which grows
    row by row, `write_bytes` for the summary, written whole. Each refuses a path it must
    not write (replaygate's `audit.outputs.Guard`)."""

    def check(self, out: Path) -> object: ...

    def append_bytes(self, out: Path, data: bytes) -> object: ...

    def write_bytes(self, out: Path, data: bytes) -> object: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def payload_digest(name: str, arguments: dict[str, Any]) -> str:
    """The contract's call digest: SHA-256 of canonical `{"name", "arguments"}`."""
    doc = {"name": name, "arguments": arguments}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def paths(out: Path, run_id: str) -> dict[str, Path]:
    """The files a run writes under `out`: its evidence by table, and its summary."""
    return {
        "inbox": out / f"inbox-probe-{run_id}.jsonl",
        "sessions": out / f"sessions-probe-{run_id}.jsonl",
        "streams": out / f"streams-probe-{run_id}.jsonl",
    }


def summary_path(out: Path, run_id: str) -> Path:
    return out / f"probe-{run_id}.json"


class Evidence:
    """Appends contract records for one probe run; every row is flushed as written, so a
    probe stopped half-way leaves what it saw."""

    def __init__(
        self,
        out: Path,
        run_id: str,
        key: bytes,
        *,
        stage: str | None,
        release: str | None,
        sink: Sink,
        ledger: bool = True,
    ) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.key, self.stage, self.release, self.ledger = key, stage, release, ledger
        self.sink = sink
        self.paths = paths(out, run_id)
        self.counts = dict.fromkeys(self.paths, 0)
        self._lock = threading.Lock()

    def session_hmac(self, raw: str) -> str:
        return hmac.new(self.key, raw.encode("utf-8"), hashlib.sha256).hexdigest()

    def _write(self, table: str, row: dict[str, Any]) -> None:
        line = json.dumps({k: v for k, v in row.items() if v is not None}) + "\n"
        with self._lock:
            self.sink.append_bytes(self.paths[table], line.encode("utf-8"))
            self.counts[table] += 1

    def session(
        self,
        raw: str,
        generation: int,
        state: str,
        *,
        version: str | None = None,
        prev: str | None = None,
        init_result: dict[str, Any] | None = None,
        ts: int | None = None,
    ) -> None:
        if not self.ledger:
            return
        receipt = None
        if init_result is not None:
            body = json.dumps(init_result.get("result"), sort_keys=True, separators=(",", ":"))
            receipt = hashlib.sha256(body.encode()).hexdigest()
        self._write(
            "sessions",
            {
                "schema": "mcpHttpSession.v1",
                "ts": ts or now_ms(),
                "session_hmac": self.session_hmac(raw),
                "generation": generation,
                "state": state,
                "prev_session_hmac": self.session_hmac(prev) if prev else None,
                "principal": PRINCIPAL,
                "client_name": PRINCIPAL,
                "client_version": _version(),
                "protocol_version": version,
                "handshake_receipt": receipt,
                "rollout_stage": self.stage,
                "release": self.release,
            },
        )

    def stream(self, raw: str, generation: int, stream_id: str, state: str, **fields: Any) -> None:
        if not self.ledger:
            return
        self._write(
            "streams",
            {
                "schema": "mcpSseStream.v1",
                "ts": fields.pop("ts", None) or now_ms(),
                "session_hmac": self.session_hmac(raw),
                "generation": generation,
                "stream_id": stream_id,
                "state": state,
                **fields,
            },
        )

    def receipt(self, raw: str, generation: int, **fields: Any) -> None:
        self._write(
            "inbox",
            {
                "schema": "mcpInboxReceipt.v1",
                "session_hmac": self.session_hmac(raw),
                "generation": generation,
                **fields,
            },
        )

    def files(self) -> dict[str, str]:
        return {t: str(p) for t, p in self.paths.items() if self.counts[t]}


def _version() -> str:
    from replaygate import __version__

    return __version__
