"""Readers: turn one input file into a staging table of text fields, in SQL.

Every reader yields the same shape: `blank`, `bad` (why a record could not be
read at all), `schema`, and one VARCHAR column `f_<name>` per contract field.
Typing and validation happen afterwards, in validate.py, the same way for all
formats. The raw Mcp-Session-Id is hashed here, in the same pass that reads it,
so it never lands in any table, not even a temporary one.
"""

from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass
from pathlib import Path

from .contract import BY_SCHEMA, RECORD_TYPES, RecordType, type_for_filename
from .redact import hmac_sql

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
}
SECRET_FIELDS = {f.name for rt in RECORD_TYPES for f in rt.fields if f.secret}
# A delimiter that never occurs in text, so the CSV reader hands over whole lines.
_LINE_DELIM = "\x1f"


@dataclass(frozen=True)
class Source:
    path: Path
    format: str  # jsonl | csv | parquet
    gzip: bool
    default_type: RecordType | None

    @property
    def name(self) -> str:
        return self.path.name


def detect(path: Path) -> Source | None:
    """The format of a file from its name, or None if it is not an input file."""
    name = path.name.lower()
    gz = name.endswith(".gz")
    stem = name[:-3] if gz else name
    for ext, fmt in FORMATS.items():
        if stem.endswith(ext):
            if gz and fmt == "parquet":
                return None
            return Source(path, fmt, gz, type_for_filename(stem))
    return None


def _schema_case() -> str:
    whens = " ".join(f"WHEN '{rt.schema}' THEN '{rt.table}'" for rt in RECORD_TYPES)
    return f"CASE schema {whens} END"


def _field_exprs(values: dict[str, str], names: list[str], key_available: bool) -> list[str]:
    """`f_<name>` columns from a mapping of field name -> SQL text expression."""
    out = []
    for n in names:
        expr = values.get(n, "NULL")
        if n in SECRET_FIELDS:
            out.append(f"({expr}) IS NOT NULL AS seen_{n}")
            expr = hmac_sql(expr) if key_available else "NULL"
        out.append(f"{expr} AS f_{n}")
    return out


def _wrap(inner: str, source: Source) -> str:
    """Add the record type and the unreadable-record reason around a reader query."""
    default = f"'{source.default_type.table}'" if source.default_type else "NULL"
    known = ", ".join(f"'{s}'" for s in BY_SCHEMA)
    return f"""
    SELECT *,
        CASE WHEN blank THEN NULL WHEN schema IS NULL THEN {default}
             ELSE {_schema_case()} END AS rtype,
        CASE
            WHEN blank THEN NULL
            WHEN parse_bad IS NOT NULL THEN parse_bad
            WHEN schema IS NULL AND {default} IS NULL
                THEN 'no record type: no schema field and no known file-name prefix'
            WHEN schema IS NOT NULL AND schema NOT IN ({known}) THEN 'unknown record type'
        END AS bad
    FROM ({inner})
    """


def jsonl_sql(source: Source, names: list[str], key_available: bool) -> str:
    paths = ", ".join(["'$.schema'"] + [f"'$.{n}'" for n in names])
    values = {n: f"v[{i + 2}]" for i, n in enumerate(names)}
    cols = ",\n        ".join(_field_exprs(values, names, key_available))
    inner = f"""
    SELECT blank,
        CASE WHEN blank THEN NULL
             WHEN v IS NULL THEN 'unparseable JSON'
             WHEN NOT starts_with(ltrim(raw), '{{') THEN 'not a JSON object' END AS parse_bad,
        CASE WHEN blank THEN NULL ELSE v[1] END AS schema,
        {cols}
    FROM (
        SELECT raw, raw IS NULL OR trim(raw) = '' AS blank,
               try(json_extract_string(raw, [{paths}])) AS v
        FROM read_csv($path, columns = {{'raw': 'VARCHAR'}}, header = false,
                      delim = '{_LINE_DELIM}', quote = '', escape = '',
                      auto_detect = false, compression = $compression)
    )"""
    return _wrap(inner, source)


def csv_header(path: Path, gz: bool) -> list[str]:
    opener = gzip.open if gz else open
    with opener(path, "rt", encoding="utf-8", newline="") as fh:
        first = fh.readline()
    return next(csv.reader(io.StringIO(first)), [])


def csv_sql(source: Source, header: list[str], names: list[str], key_available: bool) -> str:
    # Columns are named by position, so no text from the file becomes SQL.
    positions = {name.strip(): i for i, name in enumerate(header)}
    values = {n: f"c{positions[n]}" for n in names if n in positions}
    schema = f"c{positions['schema']}" if "schema" in positions else "NULL"
    columns = ", ".join(f"'c{i}': 'VARCHAR'" for i in range(len(header)))
    cols = ",\n        ".join(_field_exprs(values, names, key_available))
    inner = f"""
    SELECT false AS blank, NULL AS parse_bad, {schema} AS schema,
        {cols}
    FROM read_csv($path, header = true, columns = {{{columns}}}, auto_detect = false,
                  delim = ',', quote = '"', escape = '"', compression = $compression,
                  store_rejects = true, rejects_table = 'rg_rejects',
                  rejects_scan = 'rg_scans')"""
    return _wrap(inner, source)


def parquet_sql(source: Source, columns: list[str], names: list[str], key_available: bool) -> str:
    present = set(columns)
    values = {n: f'CAST("{n}" AS VARCHAR)' for n in names if n in present}
    schema = 'CAST("schema" AS VARCHAR)' if "schema" in present else "NULL"
    cols = ",\n        ".join(_field_exprs(values, names, key_available))
    inner = f"""
    SELECT false AS blank, NULL AS parse_bad, {schema} AS schema,
        {cols}
    FROM read_parquet($path)"""
    return _wrap(inner, source)
