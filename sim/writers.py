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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from replaygate.core.contract import BY_TABLE, RecordType

CHUNK = 20_000


def iso_ms(ms: int) -> str:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


class _Base:
    fh: Any  # the text writers' file; whole batches go to its binary buffer

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

    def write_batch(self, table: pa.Table) -> None:
        """Write whole columns (the contract's fields, timestamps as epoch ms)."""
        raise NotImplementedError

    def close(self) -> None:
        self.flush()

    def _text_columns(self, table: pa.Table) -> list[tuple[str, pa.Array]]:
        """Each field as text, null where the value is null. Strings are written as they
        are: the bulk's values are identifiers and vocabulary that need no escaping."""
        out = []
        for f in self.rt.fields:
            col = table[f.name].combine_chunks()
            if col.null_count == len(col):
                continue
            if f.type == "ts":
                if self.ts_style == "iso":
                    ts = col.cast(pa.timestamp("ms", tz="UTC"))
                    txt = pc.strftime(ts, format="%Y-%m-%dT%H:%M:%SZ")
                else:
                    txt = col.cast(pa.string())
            elif f.type == "bool":
                txt = pc.if_else(col, "true", "false")
            elif f.type == "float":
                txt = col.cast(pa.string())
                whole = pc.equal(pc.floor(col), col)
                txt = pc.if_else(whole, pc.binary_join_element_wise(txt, ".0", ""), txt)
            elif f.type == "int":
                txt = col.cast(pa.string())
            else:
                txt = col
            out.append((f.name, txt))
        return out

    def _write_lines(self, lines: pa.Array) -> None:
        """Append the rows' lines (each without its newline) to the text file."""
        if not len(lines):
            return
        lines = pc.binary_join_element_wise(lines, "\n", "").cast(pa.large_string())
        offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset :]
        data = memoryview(lines.buffers()[2])[offsets[0] : offsets[len(lines)]]
        self.fh.flush()
        self.fh.buffer.write(data)


def _open_text(path: Path, gz_level: int = 9):
    if path.name.endswith(".gz"):
        raw = open(path, "wb")  # noqa: SIM115 - closed via the wrapper
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=gz_level)
        return io.TextIOWrapper(gz, encoding="utf-8", newline=""), raw
    return open(path, "w", encoding="utf-8", newline=""), None  # noqa: SIM115


class JsonlWriter(_Base):
    def __init__(self, path, rt, ts_style="iso", with_schema=False, gz_level=9):
        super().__init__(path, rt, ts_style)
        self.fh, self.raw = _open_text(path, gz_level)
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

    def write_batch(self, table: pa.Table) -> None:
        self.flush()
        parts = [pa.scalar(f'"schema":"{self.rt.schema}"')] if self.with_schema else []
        for name, txt in self._text_columns(table):
            f = self.rt.field(name)
            if f.type in ("text", "enum", "ts") and not (f.type == "ts" and self.ts_style != "iso"):
                txt = pc.binary_join_element_wise('"', txt, '"', "")
            parts.append(pc.binary_join_element_wise(f'"{name}":', txt, ""))
        body = pc.binary_join_element_wise(*parts, ",", null_handling="skip")
        self._write_lines(pc.binary_join_element_wise("{", body, "}", ""))

    def close(self) -> None:
        super().close()
        self.fh.close()
        if self.raw:
            self.raw.close()


class CsvWriter(_Base):
    def __init__(self, path, rt, ts_style="iso", gz_level=9):
        super().__init__(path, rt, ts_style)
        self.fh, self.raw = _open_text(path, gz_level)
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

    def write_batch(self, table: pa.Table) -> None:
        self.flush()
        txt = dict(self._text_columns(table))
        empty = pa.nulls(table.num_rows, pa.string())
        cols = [txt.get(c, empty) for c in self.cols]
        self._write_lines(
            pc.binary_join_element_wise(*cols, ",", null_handling="replace", null_replacement="")
        )

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

    def write_batch(self, table: pa.Table) -> None:
        self.flush()
        cols = [table[f.name].cast(self.schema.field(f.name).type) for f in self.rt.fields]
        self.w.write_table(pa.Table.from_arrays(cols, schema=self.schema))

    def close(self) -> None:
        super().close()
        self.w.close()


class NativeLog:
    """A proxy's own access log (nginx, Envoy, Caddy): each line the JSON object the proxy
    prints, its keys in the order given, nothing of the contract's record types."""

    def __init__(self, path: Path):
        self.path = path
        self.buf: list[dict] = []

    def add(self, line: dict) -> None:
        self.buf.append(line)

    def close(self) -> None:
        with self.path.open("w", encoding="utf-8", newline="\n") as fh:
            fh.writelines(json.dumps(x, separators=(",", ":")) + "\n" for x in self.buf)
        self.buf.clear()


# The simulator's output formats, declared once: per format, each table's file name and
# its timestamps' style (iso text, epoch milliseconds, or the writer's native type). The
# writer is chosen by the file name's ending; `simulate` checks a format against it,
# truth.json names it, and the CLI's --format offers its names.
def _one_format(ending: str, style: str) -> dict[str, tuple[str, str]]:
    return {table: (f"{table}{ending}", style) for table in BY_TABLE}


LAYOUTS: dict[str, dict[str, tuple[str, str]]] = {
    "jsonl": _one_format(".jsonl", "iso"),
    "csv": _one_format(".csv", "iso"),
    "parquet": _one_format(".parquet", "native"),
    # every reader path exercised: each table in another format, gzipped or not
    "mixed": {
        "sessions": ("sessions.jsonl", "iso"),
        "streams": ("streams.csv.gz", "iso"),
        "events": ("events.jsonl.gz", "epoch"),
        "inbox": ("inbox.parquet", "native"),
        "dispatches": ("dispatches.csv", "epoch"),
        "proxy": ("proxy-access.jsonl.gz", "iso"),
        "rollout": ("rollout.csv", "iso"),
    },
}


def make_writer(
    out: Path, table: str, fmt: str, name: str | None = None, gz_level: int = 9
) -> _Base:
    rt = BY_TABLE[table]
    fname, style = LAYOUTS[fmt][table]
    if name:
        fname = name
    path = out / fname
    if fname.endswith(".parquet"):
        return ParquetWriter(path, rt)
    if ".csv" in fname:
        return CsvWriter(path, rt, style, gz_level=gz_level)
    return JsonlWriter(path, rt, style, gz_level=gz_level)
