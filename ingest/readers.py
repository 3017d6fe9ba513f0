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
import re
from dataclasses import dataclass
from pathlib import Path

from .adapters import ADAPTERS, Adapter, Key
from .contract import BY_SCHEMA, BY_TABLE, RECORD_TYPES, RecordType, type_for_filename
from .redact import hmac_sql, redact_url_sql

FORMATS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".log": "jsonl",  # web servers' access logs; read as proxy logs (adapters.py)
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


# What logrotate appends to a rotated file's name: `.1`, `.2` (then `.gz`), or a date
# (`-20261130`, with dateext; `-2026113014` with an hourly dateformat).
_ROTATED = re.compile(r"(\.\d{1,4}|-\d{8}(\d{2})?)$")


def detect(path: Path, force_proxy: bool = False) -> Source | None:
    """The format of a file from its name, or None if it is not an input file.
    Rotated names (`access.log.1`, `access.log.2.gz`, `events.jsonl-20261130`,
    `access.log-20261130.gz`) are read as the file they were rotated from."""
    name = path.name.lower()
    gz = name.endswith(".gz")
    stem = name[:-3] if gz else name
    stem = _ROTATED.sub("", stem)
    if force_proxy:
        return Source(path, "jsonl", gz, BY_TABLE["proxy"])
    for ext, fmt in FORMATS.items():
        if stem.endswith(ext):
            if gz and fmt == "parquet":
                return None
            rt = BY_TABLE["proxy"] if ext == ".log" else type_for_filename(stem)
            return Source(path, fmt, gz, rt)
    return None


# A line without a leading byte-order mark (editors and some loggers write one).
_NO_BOM = "CASE WHEN starts_with(raw, chr(65279)) THEN substr(raw, 2) ELSE raw END"

# Lines up to this size are read; longer ones are quarantined as too long.
MAX_LINE = 32 << 20


def _raw_lines() -> str:
    """A JSON Lines file as raw lines, one row per line (blank lines included).

    Lines the CSV reader cannot hand over (invalid UTF-8, over MAX_LINE) are skipped
    into the rejects table with their line numbers; load.py quarantines them and
    corrects the positions of the rows after them."""
    return f"""read_csv($path, columns = {{'raw': 'VARCHAR'}}, header = false,
                  delim = '{_LINE_DELIM}', quote = '', escape = '', auto_detect = false,
                  compression = $compression, max_line_size = {MAX_LINE},
                  ignore_errors = true, store_rejects = true,
                  rejects_table = 'rg_rejects', rejects_scan = 'rg_scans')"""


def _schema_case() -> str:
    whens = " ".join(f"WHEN '{rt.schema}' THEN '{rt.table}'" for rt in RECORD_TYPES)
    return f"CASE schema {whens} END"


def _field_exprs(values: dict[str, str], names: list[str], key_available: bool) -> list[str]:
    """`f_<name>` columns from a mapping of field name -> SQL text expression."""
    out = []
    for n in names:
        expr = values.get(n, "NULL")
        if n in SECRET_FIELDS:
            # An empty or blank id is no id: never hashed as if it were one.
            expr = f"nullif(trim({expr}), '')"
            out.append(f"({expr}) IS NOT NULL AS seen_{n}")
            expr = hmac_sql(expr) if key_available else "NULL"
        elif n == "path":
            expr = redact_url_sql(expr)
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
             WHEN NOT starts_with(ltrim({_NO_BOM}), '{{') THEN 'not a JSON object' END AS parse_bad,
        CASE WHEN blank THEN NULL ELSE v[1] END AS schema,
        {cols}
    FROM (
        SELECT raw, raw IS NULL OR trim(raw) = '' AS blank,
               try(json_extract_string({_NO_BOM}, [{paths}])) AS v
        FROM {_raw_lines()}
    )"""
    return _wrap(inner, source)


def csv_header(path: Path, gz: bool) -> list[str]:
    opener = gzip.open if gz else open
    # utf-8-sig: a byte-order mark is not part of the first column's name.
    with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as fh:
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


def first_lines(path: Path, gz: bool, n: int = 20) -> list[str]:
    """The first `n` non-blank lines (a leading byte-order mark removed), for sniffing:
    the first line alone may be the cut tail of a line."""
    out: list[str] = []
    opener = gzip.open if gz else open
    with opener(path, "rt", encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip():
                out.append(line)
                if len(out) >= n:
                    break
    return out


# Lines looked at to learn which keys a proxy log carries (its log_format is one per file).
KEY_SCAN_LINES = 10_000


def proxy_keys_sql(keys: tuple[Key, ...]) -> str:
    """One row: for each key, whether any of the first lines of a proxy log has it."""
    cols = ", ".join(f"bool_or({k.exists()})" for k in keys)
    return f"""SELECT {cols} FROM (
        SELECT try(json(raw)) AS j FROM {_raw_lines()} WHERE raw IS NOT NULL
        LIMIT {KEY_SCAN_LINES}) WHERE j IS NOT NULL"""


def proxylog_sql(
    source: Source,
    names: list[str],
    key_available: bool,
    forced: str | None = None,
    by_name: dict[str, Adapter] | None = None,
) -> str:
    """A proxy access log whose lines may be Caddy, nginx, Envoy or contract records,
    each mapped by its own shape (or all by `forced`); `by_name`: the adapters built for
    this file (adapters.build)."""
    by_name = by_name or ADAPTERS
    adapters = [by_name[forced]] if forced else list(by_name.values())
    contract = "json_exists(j, '$.ts') AND json_exists(j, '$.method')"
    shape = "CASE WHEN j IS NULL THEN NULL " + " ".join(
        f"WHEN {a.detect} THEN '{a.name}'" for a in adapters
    )
    shape += " END" if forced else f" WHEN {contract} THEN 'contract' END"
    values: dict[str, str] = {}
    for n in names:
        whens = " ".join(f"WHEN '{a.name}' THEN {a.fields[n]}" for a in adapters if n in a.fields)
        whens += "" if forced else f" WHEN 'contract' THEN j->>'$.{n}'"
        values[n] = f"(CASE shape {whens} END)" if whens.strip() else "NULL"
    responses = [
        f"WHEN '{a.name}' THEN {a.response_session}" for a in adapters if a.response_session
    ]
    response = f"(CASE shape {' '.join(responses)} END)" if responses else "NULL"
    cols = []
    for expr in _field_exprs(values, names, key_available):
        if expr.endswith(" AS seen_session_id"):
            # A raw id in the response header (a new session) was logged too.
            expr = expr.replace(
                " IS NOT NULL AS seen_session_id",
                f" IS NOT NULL OR {response} IS NOT NULL AS seen_session_id",
            )
        cols.append(expr)
    label = forced or "Caddy, nginx, Envoy or contract"
    columns = ",\n        ".join(cols)
    inner = f"""
    SELECT blank,
        CASE WHEN blank THEN NULL
             WHEN j IS NULL THEN 'unparseable JSON'
             WHEN shape IS NULL THEN 'fits no proxy log format ({label})' END AS parse_bad,
        CASE WHEN blank OR shape IS NULL THEN NULL ELSE j->>'$.schema' END AS schema,
        {columns}
    FROM (
        SELECT *, {shape} AS shape FROM (
            SELECT raw IS NULL OR trim(raw) = '' AS blank, try(json({_NO_BOM})) AS j
            FROM {_raw_lines()}
        )
    )"""
    return _wrap(inner, source)
