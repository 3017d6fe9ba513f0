"""Readers: turn one input file into a staging table of text fields, in SQL.

Every reader yields the same shape: `blank`, `bad` (why a record could not be
read at all), `schema`, and one VARCHAR column `f_<name>` per contract field
(a Parquet file read as one record type may hand a field over in its contract type
instead: `Reading.native`). Typing and validation happen afterwards, in validate.py,
the same way for all formats. The raw Mcp-Session-Id is hashed here, in the same pass that reads it,
so it never lands in any table, not even a temporary one.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from replaygate.core.contract import (
    BY_SCHEMA,
    BY_TABLE,
    RECORD_TYPES,
    Field,
    RecordType,
    type_for_filename,
)

from . import adapters, capabilities
from .redact import hmac_sql, redact_url_sql
from .validate import can_be_native

if TYPE_CHECKING:
    import duckdb

SECRET_FIELDS = {f.name for rt in RECORD_TYPES for f in rt.fields if f.secret}
# A delimiter that never occurs in text, so the CSV reader hands over whole lines.
_LINE_DELIM = "\x1f"


@dataclass(frozen=True)
class Source:
    path: Path
    format: str  # a name in FORMATS
    gzip: bool
    default_type: RecordType | None

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def compression(self) -> str | None:
        """Its compression as the files table keeps it (`compression`, beside `format`)."""
        return GZIP if self.gzip else None


# The files table's `compression` of a gzip-compressed file, and its file-name ending.
GZIP = "gzip"
GZ = ".gz"


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
        return Source(path, PROXY_LOG_FORMAT, gz, BY_TABLE["proxy"])
    for fmt in FORMATS.values():
        for suffix, table in fmt.suffixes.items():
            if stem.endswith(suffix):
                if gz and not fmt.gzip:
                    return None
                rt = BY_TABLE[table] if table else type_for_filename(stem)
                return Source(path, fmt.name, gz, rt)
    return None


# A blank line: nothing but JSON's insignificant whitespace (a CRLF file leaves a CR).
_BLANK = "raw IS NULL OR trim(raw, ' ' || chr(9) || chr(13)) = ''"

# A line without a leading byte-order mark (editors and some loggers write one).
_NO_BOM = "CASE WHEN starts_with(raw, chr(65279)) THEN substr(raw, 2) ELSE raw END"

# Lines up to this size are read; longer ones are quarantined as too long.
MAX_LINE = 32 << 20


def _raw_lines() -> str:
    """A JSON Lines file as raw lines, one row per line (blank lines included).

    Lines the CSV reader cannot hand over (invalid UTF-8, over MAX_LINE) are skipped
    into the rejects table with their line numbers; the load quarantines them and
    corrects the positions of the rows after them (quarantine.py)."""
    return f"""read_csv($path, columns = {{'raw': 'VARCHAR'}}, header = false,
                  delim = '{_LINE_DELIM}', quote = '', escape = '', auto_detect = false,
                  compression = $compression, max_line_size = {MAX_LINE},
                  ignore_errors = true, store_rejects = true,
                  rejects_table = 'rg_rejects', rejects_scan = 'rg_scans')"""


def clear_rejects(con: duckdb.DuckDBPyConnection) -> None:
    """Empty the line reader's rejects tables (`rg_rejects`, `rg_scans`): each read that
    stores rejects adds to them, and a file's rejects are only its own read's."""
    con.execute("DROP TABLE IF EXISTS rg_rejects")
    con.execute("DROP TABLE IF EXISTS rg_scans")


# A rejected record's text without its line end, and the physical lines it covers (an
# open quote joins the lines after it into one record).
_REJECT_TEXT = "rtrim(csv_line, chr(13) || chr(10))"
_REJECT_LINES = f"1 + length({_REJECT_TEXT}) - length(replace({_REJECT_TEXT}, chr(10), ''))"


def rejects_by_line_sql() -> str:
    """The line reader's rejects, one row per line: `line`, `error_type` (one reason per
    line: a line can break two rules, bad UTF-8 and a stray delimiter, and must still be
    counted once), `spans` (the lines the record covers) and `has_cr` (it holds a CR)."""
    return (
        "SELECT line, min(error_type) AS error_type, "
        f"coalesce(max({_REJECT_LINES}), 1) AS spans, "
        "coalesce(bool_or(contains(csv_line, chr(13))), false) AS has_cr "
        "FROM rg_rejects GROUP BY line"
    )


# The rejects of a read that rejected no line (a fast read proven line for line).
NO_REJECTS = "CREATE TEMP TABLE rg_rejects (line BIGINT, error_type VARCHAR, csv_line VARCHAR)"


def _schema_case() -> str:
    whens = " ".join(f"WHEN '{rt.schema}' THEN '{rt.table}'" for rt in RECORD_TYPES)
    return f"CASE schema {whens} END"


def field_columns(values: dict[str, str], names: list[str], key_available: bool) -> list[str]:
    """`f_<name>` columns from a mapping of field name -> SQL text expression (NULL for
    the fields it lacks): secret fields hashed (with a `seen_<name>` flag), URLs redacted.
    Every reader builds its columns with this."""
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


def wrap(inner: str, source: Source) -> str:
    """Add the record type and the unreadable-record reason around a reader query that
    gives `blank`, `parse_bad` (why a record cannot be read, or NULL), `schema` and the
    field_columns(); every reader's SQL ends with this."""
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


@dataclass
class Reading:
    """One file to stage, as a reader sees it: what to read, which fields, and a
    connection to look into the file first (a CSV header, Parquet columns, proxy keys)."""

    src: Source
    path: Path  # the file, or its new lines already decompressed
    compression: str  # gzip | none
    names: list[str]  # the contract fields to read
    key_available: bool
    con: duckdb.DuckDBPyConnection
    source: str = "auto"  # how proxy logs are read (--source)
    field_maps: dict[str, dict[str, str]] = field(default_factory=dict)  # [sources.<proxy>.fields]
    facts: set[str] = field(default_factory=set)  # what a proxy log shows by its keys
    # The record type every row is read as (staged already checked), or None (as text).
    typed: RecordType | None = None
    # Fields the reader handed over in their contract type, not as text (validate.py).
    native: frozenset[str] = frozenset()

    @property
    def gz(self) -> bool:
        return self.compression == "gzip"

    def query(self, sql: str, params: dict[str, Any] | None = None) -> Any:
        """Run SQL over the file (`$path`, `$compression`), binding `params` too."""
        given = {"path": str(self.path), "compression": self.compression}
        bound = {k: v for k, v in given.items() if f"${k}" in sql}
        return self.con.execute(sql, {**bound, **(params or {})})


def jsonl_sql(r: Reading) -> str:
    """JSON Lines: contract records, or proxy access logs read by their shape."""
    shape = _proxy_shape(r)
    if shape is not None:
        return proxylog_sql(r, None if shape == "auto" else shape)
    paths = ", ".join(f"'{p}'" for p in json_paths(r.names))
    parsed = f"""(
        SELECT raw, try(json_extract_string({_NO_BOM}, [{paths}])) AS v
        FROM {_raw_lines()})"""
    return wrap(json_lines_sql(parsed, r.names, r.key_available), r.src)


def json_paths(names: list[str]) -> list[str]:
    """The JSON paths a contract record's line is read at: its schema, then each field."""
    return ["$.schema"] + [f"$.{n}" for n in names]


def json_lines_sql(parsed: str, names: list[str], key_available: bool, keep: str = "") -> str:
    """The rules of a JSON Lines file of contract records, over `parsed`: one row per
    line, `raw` (the line) and `v`, the text at each of json_paths(names) in order, or
    NULL when the line is not JSON. (DuckDB fills `v` as it reads the file; the Spark
    ingest, spark/lakeload.py, with Spark's JSON functions: the rules here are both's.)
    `keep`: columns of `parsed` carried through ("file_id, pos, " for the Spark ingest,
    which reads many files at once; DuckDB's row order is a line's position)."""
    values = {n: f"v[{i + 2}]" for i, n in enumerate(names)}
    cols = ",\n        ".join(field_columns(values, names, key_available))
    return f"""
    SELECT {keep}blank,
        CASE WHEN blank THEN NULL
             WHEN v IS NULL THEN 'unparseable JSON'
             WHEN NOT starts_with(ltrim({_NO_BOM}), '{{') THEN 'not a JSON object' END AS parse_bad,
        CASE WHEN blank THEN NULL ELSE v[1] END AS schema,
        {cols}
    FROM (SELECT {keep}raw, {_BLANK} AS blank, v FROM {parsed})"""


def _value_only(f: Field) -> bool:
    """A field whose typed value and reason depend on its text only through the DOUBLE
    the text casts to (validate.cast_sql: an integer or a number, no rule on its text)."""
    return f.type in ("int", "float") and not f.secret and f.max_len is None and not f.forbid


# A number DuckDB's JSON reader, reading a field as VARCHAR, spells otherwise than
# `json_extract_string` does: one it holds as a DOUBLE written with an exponent (`1e-07`,
# `1.5e-05`, `-1.5e+300`; json_extract_string: `1e-7`, `0.000015`, `-1.5e300`).
_EXPONENT = r"-?[0-9]+(\.[0-9]+)?e[+-][0-9]+"
# The longest text such a number has, with room to spare: a DOUBLE is written in at most
# 24 characters (`-1.7976931348623157e+308`); a number too large for one is kept as its
# own text by both (`1e400`). A longer text read is the file's own string, read alike.
_SPELLED_MAX = 32


def _spelled_otherwise(column: str) -> str:
    """SQL: whether a field read as VARCHAR may be a number the reader spells otherwise
    than json_extract_string (_EXPONENT; the pattern only for text of at most
    _SPELLED_MAX characters holding `e-`/`e+`: the length is known without reading the
    text, and most fields are longer, a 64-character digest, or hold neither). An `e` is
    looked for first: most short fields (a timestamp, a numbered id) hold none, and one
    search instead of two took the check over the 1M fleet's event and inbox logs from
    0.13-0.16 to 0.10-0.12 CPU s each (one thread, best of five)."""
    c = f'"{column}"'
    return (
        f"CASE WHEN strlen({c}) <= {_SPELLED_MAX} AND contains({c}, 'e') "
        f"AND (contains({c}, 'e-') OR contains({c}, 'e+')) "
        f"THEN regexp_full_match({c}, '{_EXPONENT}') ELSE false END"
    )


def jsonl_fast_sql(r: Reading, keep: str = "") -> str | None:
    """JSON Lines of contract records through DuckDB's JSON reader: one parse per line
    instead of raw lines parsed again by `json_extract_string`; the same staged rows as
    jsonl_sql for a file it reads whole. Each field is read as VARCHAR, which gives the
    text `json_extract_string` gives (a string's, a nested value's, a bool's, an
    integer's) except for a number the reader spells with an exponent (_EXPONENT). That
    changes nothing for a number field whose value and reason depend on its text only
    through the DOUBLE it casts to (_value_only), nor for an enum (no allowed value is a
    number: such a value is refused either way, for the same reason); a row where any
    other field (a text, a timestamp, a bool) holds such a number is left to the
    line-exact read (`rg_unsure`). None for a proxy log that is not read as contract
    records.

    It proves nothing about lines by itself: the reader skips blank lines, takes a
    `null` line for a record of NULLs and a tab before a record for whitespace, where
    the line-exact reader counts, refuses or quarantines them, and it fails on anything
    it cannot read. The load keeps its rows only for a file without a tab or a CR whose
    every line gave one row and no row it is unsure of (`rg_unsure`: nothing but NULLs,
    or a number spelled otherwise); every other file is read again by jsonl_sql
    (stagereads.py). `keep`: columns added to each row (jsonl_direct_sql's position)."""
    if _proxy_shape(r) is not None:
        return None
    names = r.names
    fields = {f.name: f for f in r.typed.fields} if r.typed else {}
    sure = {
        n for n in names if n in fields and (_value_only(fields[n]) or fields[n].type == "enum")
    }
    columns = ", ".join(f"'{n}': 'VARCHAR'" for n in ["schema", *names])
    values = {n: f'"{n}"' for n in names}
    cols = ",\n        ".join(field_columns(values, names, r.key_available))
    empty = " AND ".join(f'"{n}" IS NULL' for n in ["schema", *names])
    unsure = " OR ".join(
        [f"({empty})", *(_spelled_otherwise(n) for n in ["schema", *names] if n not in sure)]
    )
    inner = f"""
    SELECT {keep}false AS blank, NULL AS parse_bad, "schema" AS schema,
        {unsure} AS rg_unsure,
        {cols}
    FROM read_json($path, columns = {{{columns}}}, format = 'newline_delimited',
                   records = true, compression = $compression)"""
    return wrap(inner, r.src)


# The `pos` of a row read straight into its table from a text format: its place in the
# reader's rows after the `$before` lines (or data rows) before what it reads. The
# window runs its pipeline on one thread, so a large file of a size its format allows
# (Format.piece_limit) is read in pieces side by side, each numbered from the lines
# before it (pieces.py, in_pieces).
NUMBERED = "row_number() OVER () + $before AS pos, "
# What the reader of one piece binds apart from the other pieces' readers.
_PIECE_PARAMS = re.compile(r"\$(path|before|header)\b")


# A JSON Lines reader of the first piece (jsonl_fast_sql's, its arguments without
# parentheses), which `lead` limits to that piece's rows.
_LEAD_READ = re.compile(r"FROM (read_json\(\$path_0, [^()]*\))")


def in_pieces(sql: str, n: int, lead: bool = False) -> str:
    """A direct read's SQL (`$path`, `$before`, and for CSV `$header`) for `n` pieces of
    one file: a UNION ALL of its reader over each piece, binding `$path_<i>`,
    `$before_<i>` and `$header_<i>` (pieces.py). `lead`: the first piece's reader reads
    the whole file, limited to its first `$rows_0` rows (Format.lead_from_file: the load
    binds them only when every line of the piece gives one row, or the read fails)."""

    def piece(i: int) -> str:
        return "(" + _PIECE_PARAMS.sub(lambda m: f"${m.group(1)}_{i}", sql) + ")"

    first = piece(0)
    if lead:
        first, found = _LEAD_READ.subn(r"FROM (SELECT * FROM \1 LIMIT $rows_0)", first)
        if found != 1:
            raise ValueError(f"the first piece's reader is not one JSON Lines read ({found})")
    return " UNION ALL ".join([first, *(piece(i) for i in range(1, n))])


def jsonl_direct_sql(r: Reading) -> str | None:
    """jsonl_fast_sql's rows with `pos` (NUMBERED: in the reader's order, which is the
    file's line order only for a file of one row per line, as the load proves:
    stagereads.py, commit.py: every line one loaded row, or the file is staged and read
    line by line)."""
    fast = jsonl_fast_sql(r, keep=NUMBERED)
    # A row of nothing but NULLs may be a `null` line, one with a number spelled otherwise
    # is read otherwise: left out, so the file is staged. (Filtered above the window: the
    # rows after it keep their numbers.)
    return None if fast is None else f"SELECT * FROM ({fast}) WHERE NOT rg_unsure"


def csv_header(path: Path, gz: bool) -> list[str]:
    opener = gzip.open if gz else open
    # utf-8-sig: a byte-order mark is not part of the first column's name.
    with opener(path, "rt", encoding="utf-8-sig", errors="replace", newline="") as fh:
        first = fh.readline()
    return next(csv.reader(io.StringIO(first)), [])


def csv_read(columns: int, rejects: bool = True, header: str = "true") -> str:
    """DuckDB's read of a CSV file's data rows (`$path`, `$compression`): `columns`
    columns as text named by position (`c0`, `c1`, ...), the records it rejects kept in
    `rg_rejects` with their lines (rejects_by_line_sql). The Spark ingest reads a file
    with it where Spark's CSV reader would read other rows (spark/lakeload.py).
    Without `rejects`, the same read fails on the first record it would reject.
    `header`: SQL for whether the first line is the header (a piece after the first
    has none: in_pieces)."""
    names = ", ".join(f"'c{i}': 'VARCHAR'" for i in range(columns))
    keep = (
        ",\n                  store_rejects = true, rejects_table = 'rg_rejects',"
        "\n                  rejects_scan = 'rg_scans'"
        if rejects
        else ""
    )
    return f"""read_csv($path, header = {header}, columns = {{{names}}}, auto_detect = false,
                  delim = ',', quote = '"', escape = '"', compression = $compression{keep})"""


def csv_sql(r: Reading) -> str:
    header = csv_header(r.path, r.gz)
    rows = csv_read(len(header))
    return wrap(csv_rows_sql(rows, header, r.names, r.key_available), r.src)


def csv_direct_sql(r: Reading) -> str | None:
    """CSV read straight into its table: csv_sql's rows with `pos`, each row's data row
    (NUMBERED: in the reader's order), read without keeping rejects, so a record the
    line-exact read would reject fails the read (the file is then staged). `$header`:
    whether what is read starts with the header line. None for a file with a `schema`
    column: a row of it may name another record type, which only the staged read sorts
    out."""
    header = csv_header(r.path, r.gz)
    if r.typed is None or "schema" in {name.strip() for name in header}:
        return None
    rows = csv_read(len(header), rejects=False, header="$header")
    return wrap(csv_rows_sql(rows, header, r.names, r.key_available, NUMBERED), r.src)


def csv_rows_sql(
    rows: str, header: list[str], names: list[str], key_available: bool, keep: str = ""
) -> str:
    """The rules of a CSV file's data rows, over `rows`: its columns as text named by
    position (`c0`, `c1`, ...; so no text from the file becomes SQL), `header` its first
    line's names. (The Spark ingest reads the rows with Spark's CSV reader; `keep`: as
    json_lines_sql's.)"""
    positions = {name.strip(): i for i, name in enumerate(header)}
    values = {n: f"c{positions[n]}" for n in names if n in positions}
    schema = f"c{positions['schema']}" if "schema" in positions else "NULL"
    cols = ",\n        ".join(field_columns(values, names, key_available))
    return f"""
    SELECT {keep}false AS blank, NULL AS parse_bad, {schema} AS schema,
        {cols}
    FROM {rows}"""


def parquet_sql(r: Reading) -> str:
    """Parquet: columns by the contract's names. Read as one record type, a column
    already of its field's type is handed over as it is (a cast to text and back
    costs about a third of the load), every other one as text."""
    described = r.query("DESCRIBE SELECT * FROM read_parquet($path)").fetchall()
    present = {row[0]: row[1] for row in described}
    fields = {f.name: f for f in r.typed.fields} if r.typed else {}
    r.native = frozenset(
        n for n in r.names if n in present and n in fields and can_be_native(fields[n], present[n])
    )
    sql = parquet_rows_sql("read_parquet($path)", set(present), r.native, r.names, r.key_available)
    return wrap(sql, r.src)


def parquet_direct_sql(r: Reading) -> str | None:
    """Parquet read straight into its table: parquet_sql's rows with `pos`, the row's
    place in the file (`file_row_number`, exact however the scan is split). None for a
    file with a `schema` column: a row of it may name another record type, which only
    the staged read sorts out."""
    described = r.query("DESCRIBE SELECT * FROM read_parquet($path)").fetchall()
    present = {row[0]: row[1] for row in described}
    if "schema" in present or "file_row_number" in present or r.typed is None:
        return None
    fields = {f.name: f for f in r.typed.fields}
    r.native = frozenset(
        n for n in r.names if n in present and n in fields and can_be_native(fields[n], present[n])
    )
    rows = "read_parquet($path, file_row_number = true)"
    keep = "file_row_number + 1 AS pos, "
    sql = parquet_rows_sql(rows, set(present), r.native, r.names, r.key_available, keep)
    return wrap(sql, r.src)


def parquet_rows_sql(
    rows: str,
    present: set[str],
    native: frozenset[str],
    names: list[str],
    key_available: bool,
    keep: str = "",
) -> str:
    """The rules of a Parquet file's rows, over `rows` (its `present` columns): a field
    in `native` as it is, every other one as text. (The Spark ingest reads the rows with
    Spark's Parquet reader, every field as text; `keep`: as json_lines_sql's.)"""
    values = {
        n: f'"{n}"' if n in native else f'CAST("{n}" AS VARCHAR)' for n in names if n in present
    }
    schema = 'CAST("schema" AS VARCHAR)' if "schema" in present else "NULL"
    cols = ",\n        ".join(field_columns(values, names, key_available))
    return f"""
    SELECT {keep}false AS blank, NULL AS parse_bad, {schema} AS schema,
        {cols}
    FROM {rows}"""


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


def proxy_keys_sql() -> str:
    """For each of the JSON paths `$paths` (a list; `$n` of them), `i` (its place, from 1)
    and whether any of the first lines of a proxy log has it. Each line is parsed once
    for every path (`json_exists` of a list of paths): a `json_exists` per key parsed
    every line again for each key, and held each parse until its vector of 2,048 lines
    was done (all ~200 candidate keys at once held some 1.3 GB for a Caddy log, so they
    were looked for 25 at a time, in 8 statements; the three shaped proxy logs of the 1M
    fleet took 0.049-0.060 CPU s each that way, 0.004-0.005 so)."""
    return f"""SELECT i, bool_or(v) FROM (
        SELECT unnest(json_exists(j, $paths)) AS v, unnest(range(1, $n + 1)) AS i FROM (
            SELECT try(json(raw)) AS j FROM {_raw_lines()} WHERE raw IS NOT NULL
            LIMIT {KEY_SCAN_LINES}) WHERE j IS NOT NULL)
        GROUP BY i"""


def proxy_keys_columns(keys: tuple[adapters.Key, ...]) -> str:
    """Aggregates over `j` (lines as JSON): for each key, whether a line has it. (The
    Spark ingest runs them over each file's first KEY_SCAN_LINES lines; proxy_keys_sql
    asks the same of one file.)"""
    return ", ".join(f"bool_or({k.exists()})" for k in keys)


def _proxy_shape(r: Reading) -> str | None:
    """None for the contract reader; else the adapter to use ("auto": by line)."""
    if r.src.default_type is None or r.src.default_type.table != "proxy":
        return None
    if r.source in adapters.PROXIES:
        return r.source
    if r.source == "contract":
        return None
    sniffed = adapters.sniff(r.con, first_lines(r.path, r.gz))
    return None if sniffed == "contract" else "auto"


def proxylog_sql(r: Reading, forced: str | None = None) -> str:
    """A proxy access log whose lines may be any registered proxy's or contract records,
    each mapped by its own shape (or all by `forced`). The adapters read only the keys
    the log's lines carry (its log_format), and tell which facts the log can show."""
    keys = adapters.candidate_keys(r.field_maps)
    present: set[str] = set()
    if keys:
        found = r.query(proxy_keys_sql(), {"paths": [k.path for k in keys], "n": len(keys)})
        present = {keys[i - 1].path for i, yes in found.fetchall() if yes}
    shapes = {forced} if forced else {adapters.sniff(r.con, first_lines(r.path, r.gz))}
    r.facts = capabilities.from_keys(present, shapes, r.field_maps)
    # The key scan filled the rejects tables; the reading below fills them again.
    clear_rejects(r.con)
    inner = proxy_lines_sql(_raw_lines(), present, r.names, r.key_available, r.field_maps, forced)
    return wrap(inner, r.src)


def proxy_lines_sql(
    lines: str,
    present: set[str],
    names: list[str],
    key_available: bool,
    field_maps: dict[str, dict[str, str]],
    forced: str | None = None,
    keep: str = "",
) -> str:
    """The rules of a proxy access log's lines, over `lines` (one row per line, `raw`):
    each line mapped by its shape (or all by `forced`), with the adapters of the keys
    `present` in the file. (The Spark ingest reads the lines itself; `keep`: as
    json_lines_sql's.)"""
    by_name = adapters.build(present, field_maps)
    chosen = [by_name[forced]] if forced else list(by_name.values())
    shape = adapters.shape_case(chosen, contract=not forced)
    values: dict[str, str] = {}
    for n in names:
        whens = " ".join(f"WHEN '{a.name}' THEN {a.fields[n]}" for a in chosen if n in a.fields)
        whens += "" if forced else f" WHEN 'contract' THEN j->>'$.{n}'"
        values[n] = f"(CASE shape {whens} END)" if whens.strip() else "NULL"
    responses = [f"WHEN '{a.name}' THEN {a.response_session}" for a in chosen if a.response_session]
    response = f"(CASE shape {' '.join(responses)} END)" if responses else "NULL"
    cols = []
    for expr in field_columns(values, names, key_available):
        if expr.endswith(" AS seen_session_id"):
            # A raw id in the response header (a new session) was logged too.
            expr = expr.replace(
                " IS NOT NULL AS seen_session_id",
                f" IS NOT NULL OR {response} IS NOT NULL AS seen_session_id",
            )
        cols.append(expr)
    label = forced or f"{adapters.titles()} or contract"
    columns = ",\n        ".join(cols)
    return f"""
    SELECT {keep}blank,
        CASE WHEN blank THEN NULL
             WHEN j IS NULL THEN 'unparseable JSON'
             WHEN shape IS NULL THEN 'fits no proxy log format ({label})' END AS parse_bad,
        CASE WHEN blank OR shape IS NULL THEN NULL ELSE j->>'$.schema' END AS schema,
        {columns}
    FROM (
        SELECT *, {shape} AS shape FROM (
            SELECT {keep}{_BLANK} AS blank, try(json({_NO_BOM})) AS j
            FROM {lines}
        )
    )"""


# -- the input formats: each declared once ------------------------------------------------
# A rejected line's reason, from the line reader's error type.
_LINE_REJECT = (
    "CASE CAST(error_type AS VARCHAR) WHEN 'INVALID ENCODING' THEN 'invalid UTF-8' "
    "WHEN 'LINE SIZE OVER MAXIMUM' THEN 'line too long' "
    "ELSE 'unreadable line: ' || lower(CAST(error_type AS VARCHAR)) END"
)


@dataclass(frozen=True)
class Format:
    """An input format: how a file is recognised, read and counted. `detect` (by file
    name), the load (`load.py`), the incremental reading (`identity.py`), the CLI help and
    docs/contract.md all take it from here."""

    name: str  # stored in the files table; compression apart, in its `compression`
    title: str
    # File-name endings, each with the record type it implies (None: the name's prefix
    # or each record's `schema` decides).
    suffixes: dict[str, str | None]
    build: Callable[[Reading], str]  # the staging SQL (see the module docstring)
    # A faster staging SQL of the same rows for a file of one record type that it reads
    # whole, line for line (the load proves that before it keeps them), or None.
    fast: Callable[[Reading], str | None] | None = None
    # The same rows with `pos`, each row's position (for a format of lines, NUMBERED from
    # `$before`; it may be read in pieces, in_pieces), for a file of one record type read
    # straight into its table inside the load transaction, kept only when every line (or
    # row) loaded (commit.py; else the batch is rolled back and the file staged); None:
    # always staged.
    direct: Callable[[Reading], str | None] | None = None
    gzip: bool = True  # may be gzip-compressed
    lines: bool = True  # text read line by line: grows by appends, its last line may wait
    header: bool = False  # the first line names the columns (an appended tail needs it)
    row_positions: bool = False  # a stored row's `pos` is its data row, not its line
    # SQL for the reason of a line the reader rejected (its `error_type`), or None when
    # the reader keeps no rejects.
    rejected: str | None = None
    doc: str = ""  # what the docs say of it, after the title
    # Text with line ends to repair: DuckDB's reader splits a line at a CR in some places,
    # or gives up on some mixes of LF, CRLF and bare CR; the load then reads a copy with
    # LF line ends only, a bare CR becoming this (None: no line ends, nothing to repair).
    bare_cr: bytes | None = None
    # Its blank lines are counted (lines = rows + quarantined + blank).
    blank_lines: bool = False
    # The largest file its direct reader reads in pieces side by side, each fed to it
    # through a named pipe (pieces.py); a larger one is read whole, on one thread. None:
    # any size. DuckDB's JSON reader keeps every byte it reads from a pipe until its
    # statement ends, so a JSON Lines file read so is held whole in memory (a 1 GB file:
    # 1,496 MB peak against 567 MB read whole; the 349 MB inbox log of the 1M fleet 781
    # against 332 MB) and that memory first touched costs CPU (0.3-0.5 CPU s per 350 MB);
    # read whole it runs on one of the machine's cores. Its CSV reader keeps a few buffers.
    piece_limit: int | None = None
    # The first piece of a file read in pieces may be read from the file itself, its
    # reader's rows limited to the piece's lines (in_pieces, `lead`), when no line of it
    # could give no row (identity.Scan.clean_to): DuckDB's JSON reader holds what it
    # reads from a pipe, not from a file (the 1M fleet's event and inbox logs:
    # pieces.py). Its CSV reader holds a few buffers of a pipe: its pieces stay piped.
    lead_from_file: bool = False
    # When its reader fails to convert a value (one beyond what DuckDB holds), a copy of
    # the file it can read: fallback(path, out). None: the file is unreadable.
    fallback: Callable[[Path, Path], None] | None = None
    # Its suffix of the fallback copy's name (the reader may recognise it by its ending).
    fallback_suffix: str = ""


FORMATS: dict[str, Format] = {}


def register(fmt: Format) -> Format:
    """Add an input format; a name or a file-name ending already taken is refused (the
    second would silently change how the first's files are read)."""
    if fmt.name in FORMATS:
        raise ValueError(f"input format {fmt.name!r} is registered already")
    taken = {s: f.name for f in FORMATS.values() for s in f.suffixes}
    clash = sorted(s for s in fmt.suffixes if s in taken)
    if clash:
        raise ValueError(f"file-name ending {clash[0]!r} is {taken[clash[0]]!r}'s already")
    FORMATS[fmt.name] = fmt
    return fmt


def parquet_epochs(path: Path, out: Path) -> None:
    """A copy of a Parquet file whose timestamp columns hold epoch milliseconds (as
    doubles: a value far out of range stays a number, for validation to reject)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    per_ms = {"s": 1e-3, "ms": 1.0, "us": 1e3, "ns": 1e6}
    src = pq.ParquetFile(path)
    fields = []
    for f in src.schema_arrow:
        ts = pa.types.is_timestamp(f.type)
        fields.append(pa.field(f.name, pa.float64()) if ts else f)
    schema = pa.schema(fields)
    with pq.ParquetWriter(out, schema) as w:
        for batch in src.iter_batches():
            cols = []
            for f, col in zip(src.schema_arrow, batch.columns, strict=True):
                if pa.types.is_timestamp(f.type):
                    raw = pc.cast(col.view(pa.int64()), pa.float64(), safe=False)
                    col = pc.divide(raw, per_ms[f.type.unit])
                cols.append(col)
            w.write_batch(pa.record_batch(cols, schema=schema))


# The largest JSON Lines file read in pieces (Format.piece_limit): what its reader holds.
JSONL_PIECE_LIMIT = 512 << 20

register(
    Format(
        "jsonl",
        "JSON Lines",
        {".jsonl": None, ".ndjson": None, ".log": "proxy"},
        jsonl_sql,
        fast=jsonl_fast_sql,
        direct=jsonl_direct_sql,
        rejected=_LINE_REJECT,
        doc="one record per line; one file may mix record types",
        # a CR inside a JSON line is whitespace
        bare_cr=b" ",
        blank_lines=True,
        # DuckDB's JSON reader holds all it reads from a pipe: in pieces (both cores, the
        # wall time of a 2-core machine's load) only up to a third of the load's 1.5 GB
        piece_limit=JSONL_PIECE_LIMIT,
        lead_from_file=True,
    )
)
register(
    Format(
        "csv",
        "CSV",
        {".csv": None},
        csv_sql,
        direct=csv_direct_sql,
        header=True,
        row_positions=True,
        # A record an open quote joined over several lines names them (rejects_by_line_sql).
        rejected="'malformed CSV row: ' || lower(CAST(error_type AS VARCHAR)) || CASE "
        "WHEN spans > 1 THEN ' (a quote left open makes lines ' || (line + $lines) "
        "|| '-' || (line + $lines + spans - 1) || ' one row)' ELSE '' END",
        doc="with a header row",
        # a bare CR ends a CSV row, as Python's csv module reads it
        bare_cr=b"\n",
    )
)
register(
    Format(
        "parquet",
        "Parquet",
        {".parquet": None},
        parquet_sql,
        direct=parquet_direct_sql,
        gzip=False,
        lines=False,
        row_positions=True,
        doc="columns named as the contract's fields",
        fallback=parquet_epochs,
        fallback_suffix=".parquet",
    )
)
# What a proxy access log named anything (`--source <proxy>`) is read as.
PROXY_LOG_FORMAT = "jsonl"


def _names(fmt: Format, gz: bool) -> list[str]:
    return [s + (".gz" if gz else "") for s in fmt.suffixes]


def expected_names() -> str:
    """The file-name endings an input file may have, for messages."""
    plain = [s for f in FORMATS.values() for s in _names(f, False)]
    gz = [s for f in FORMATS.values() if f.gzip for s in _names(f, True)]
    return ", ".join(plain) + (" or " + " / ".join(gz) if gz else "")


def formats_doc() -> str:
    """The formats, one Markdown bullet each (docs/contract.md)."""
    out = []
    for f in FORMATS.values():
        ends = ", ".join(f"`{s}`" + (f" ({t} records)" if t else "") for s, t in f.suffixes.items())
        gz = ", each also gzip-compressed (`.gz`)" if f.gzip else ""
        out.append(f"  - {f.title}: {ends}{gz}; {f.doc}.")
    return "\n".join(out)


def formats_help() -> str:
    """The formats, for the CLI's help."""
    return "; ".join(
        f"{f.title} ({', '.join(f.suffixes)}{', .gz' if f.gzip else ''})" for f in FORMATS.values()
    )
