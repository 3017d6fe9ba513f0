"""Deterministic streaming writers for the contract's file formats.

Rows are buffered per file and flushed in chunks, so memory stays bounded for
any fleet size. The same rows always give the same bytes (gzip without mtime,
fixed key order, fixed timestamp formatting).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from replaygate.ingest.contract import BY_TABLE, RecordType

CHUNK = 20_000


def iso_ms(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Base:
    def __init__(self, path: Path, rt: RecordType, ts_style: str):
        self.path = path
        self.rt = rt
        self.ts_style = ts_style  # iso | epoch
        self.buf: list[dict] = []
        self.ts_fields = [f.name for f in rt.fields if f.type == "ts"]

    def add(self, row: dict) -> None:
        self.buf.append(row)
        if len(self.buf) >= CHUNK:
            self.flush()

    def _ts(self, v):
        if v is None:
            return None
        return iso_ms(v) if self.ts_style == "iso" else v

    def flush(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.flush()


def _open_text(path: Path):
    if path.name.endswith(".gz"):
        raw = open(path, "wb")  # noqa: SIM115 - closed via the wrapper
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0)
        return io.TextIOWrapper(gz, encoding="utf-8", newline=""), raw
    return open(path, "w", encoding="utf-8", newline=""), None  # noqa: SIM115


class JsonlWriter(_Base):
    def __init__(self, path, rt, ts_style="iso", with_schema=False):
        super().__init__(path, rt, ts_style)
        self.fh, self.raw = _open_text(path)
        self.with_schema = with_schema

    def flush(self) -> None:
        out = []
        for row in self.buf:
            rec = {"schema": self.rt.schema} if self.with_schema else {}
            for k, v in row.items():
                if v is None:
                    continue
                rec[k] = self._ts(v) if k in self.ts_fields else v
            out.append(json.dumps(rec, separators=(",", ":")))
        if out:
            self.fh.write("\n".join(out) + "\n")
        self.buf.clear()

    def close(self) -> None:
        super().close()
        self.fh.close()
        if self.raw:
            self.raw.close()


class CsvWriter(_Base):
    def __init__(self, path, rt, ts_style="iso"):
        super().__init__(path, rt, ts_style)
        self.fh, self.raw = _open_text(path)
        self.cols = [f.name for f in rt.fields]
        self.w = csv.writer(self.fh, lineterminator="\n")
        self.w.writerow(self.cols)

    def flush(self) -> None:
        for row in self.buf:
            vals = []
            for c in self.cols:
                v = row.get(c)
                if v is None:
                    vals.append("")
                elif isinstance(v, bool):
                    vals.append("true" if v else "false")
                elif c in self.ts_fields:
                    vals.append(self._ts(v))
                else:
                    vals.append(v)
            self.w.writerow(vals)
        self.buf.clear()

    def close(self) -> None:
        super().close()
        self.fh.close()
        if self.raw:
            self.raw.close()


_ARROW = {
    "ts": pa.timestamp("ms", tz="UTC"),
    "text": pa.string(),
    "enum": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
}


class ParquetWriter(_Base):
    def __init__(self, path, rt, ts_style="native"):
        super().__init__(path, rt, ts_style)
        self.schema = pa.schema([(f.name, _ARROW[f.type]) for f in rt.fields])
        self.w = pq.ParquetWriter(path, self.schema, compression="zstd")

    def flush(self) -> None:
        if not self.buf:
            return
        cols = {f.name: [r.get(f.name) for r in self.buf] for f in self.rt.fields}
        self.w.write_table(pa.table(cols, schema=self.schema))
        self.buf.clear()

    def close(self) -> None:
        super().close()
        self.w.close()


# Per-table file layout for --format mixed: every reader path is exercised.
MIXED = {
    "sessions": ("sessions.jsonl", "iso"),
    "streams": ("streams.csv.gz", "iso"),
    "events": ("events.jsonl.gz", "epoch"),
    "inbox": ("inbox.parquet", "native"),
    "dispatches": ("dispatches.csv", "epoch"),
    "proxy": ("proxy-access.jsonl.gz", "iso"),
    "rollout": ("rollout.csv", "iso"),
}


def make_writer(out: Path, table: str, fmt: str, name: str | None = None) -> _Base:
    rt = BY_TABLE[table]
    if fmt == "mixed":
        fname, style = MIXED[table]
    else:
        ext = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}[fmt]
        fname, style = f"{table}{ext}", ("native" if fmt == "parquet" else "iso")
    if name:
        fname = name
    path = out / fname
    if fname.endswith(".parquet"):
        return ParquetWriter(path, rt)
    if ".csv" in fname:
        return CsvWriter(path, rt, style)
    return JsonlWriter(path, rt, style)
