"""`replaygate ingest --engine spark`: the contract's record types read, validated,
redacted and normalised on Spark into a lake (spark/lake.py's layout and columns), with
the quarantine (file, line or row, reason) and what each file can show.

The rules are the DuckDB ingest's own statements, translated by transpile.py: a format's
reading rules (readers.json_lines_sql, csv_rows_sql, parquet_rows_sql, wrap), every
field's cast and check (validate.checked_sql, target_columns), the HMAC of a session id
and the URL redaction (readers.field_columns), the facts a file shows
(capabilities.value_checks, shows_initialize) and the reason of an undecodable line (the
format's `rejected`). What Spark does itself is the reading: a file's lines and their
numbers, the text at JSON paths, CSV fields, Parquet columns (docs/spark.md lists where
the two readers differ). A CSV file Spark's reader would read otherwise than DuckDB's (a
malformed row, a value over two lines, a broken gzip stream) is read by DuckDB's reader
on the driver and handed over (`_duck_csv`).

A Spark ingest writes the lake afresh from the files given: it is a full load, not an
incremental one (identity.py's appends, moves and duplicates are the DuckDB ingest's).
"""

from __future__ import annotations

import csv
import io
import json
import re
import tempfile
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import duckdb

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES, all_field_names
from replaygate.core.errors import ReplaygateError
from replaygate.ingest import adapters, capabilities, discovery, identity, readers, validate
from replaygate.ingest.redact import padded_keys
from replaygate.ingest.results import unreadable

from . import lake as lakes
from . import transpile

# What Spark's UTF-8 decoder puts in place of bytes that are not UTF-8 (DuckDB's line
# reader rejects such a line; Spark's cannot tell, so the mark stands for the reject).
REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class _Break:
    """A gzip stream that breaks (identity.content_chunks): its content before the
    break, read on the driver, and the quarantine row DuckDB's ingest gives the break."""

    content: bytes
    line: int
    reason: str


def _gzip_break(src: readers.Source) -> _Break | None:
    """The break of a gzip stream (cut short, corrupt, a failed data check), or None:
    Spark's reader fails the job on one, DuckDB's ingest keeps the complete lines before
    it (the whole content when only the check fails) and quarantines the break."""
    state: dict[str, Any] = {}
    lines = sum(c.count(b"\n") for c in identity.content_chunks(src.path, True, state=state))
    why = state.get("break")
    if why is None:
        return None
    content = b"".join(identity.content_chunks(src.path, True))
    if why != "check":
        content = content[: content.rfind(b"\n") + 1]
    return _Break(content, lines + 1, identity.break_reason(str(why), lines))


@dataclass(frozen=True)
class _CsvRead:
    """A CSV file as DuckDB's reader reads it (readers.csv_read), on the driver: its data
    rows (`pos`, `c0`, ...) and, as quarantine rows, the records it rejects (line,
    reason)."""

    rows: Any  # a pyarrow Table, or None: nothing read
    rejected: list[tuple[int | None, str]]


def _duck_csv(src: readers.Source, columns: int, broken: _Break | None) -> _CsvRead | None:
    """DuckDB's read of a CSV file as the DuckDB ingest stages it (its complete lines;
    before a gzip stream's break; again with LF line ends where the reader gives up on a
    mix of line ends or a rejected record holds a CR), or None when Spark's CSV reader
    gives the same rows: no record rejected (a column too many or too few, a quote left
    open, bytes that are not UTF-8, a row over DuckDB's line size), no value over more
    than one line (Spark's reader splits at each line end) and the stream whole."""
    fmt = readers.FORMATS["csv"]
    assert fmt.rejected is not None and fmt.bare_cr is not None
    bare_cr = fmt.bare_cr
    con = duckdb.connect()

    def one(sql: str, args: dict[str, Any] | None = None) -> Any:
        return con.execute(sql, args or {}).fetchall()[0][0]

    try:
        with tempfile.TemporaryDirectory(prefix="replaygate-") as tmp:
            path, compression = src.path, readers.GZIP if src.gzip else "none"
            if broken is not None:
                if not broken.content:
                    return _CsvRead(None, [])  # not one line before the break
                path, compression = Path(tmp) / "part.csv", "none"
                path.write_bytes(broken.content)
            elif _waits(src):  # the last line waits for its line end
                path, compression = Path(tmp) / "lines.csv", "none"
                identity.copy_prefix(src.path, _complete(src.path), path)

            def read(where: Path, how: str) -> None:
                readers.clear_rejects(con)
                sql = f"CREATE OR REPLACE TEMP TABLE rg_rows AS FROM {readers.csv_read(columns)}"
                con.execute(sql, {"path": str(where), "compression": how})

            def lf_only() -> None:
                lf = Path(tmp) / "lf.csv"
                identity.lf_only(path, compression == readers.GZIP, lf, bare_cr)
                read(lf, "none")

            try:
                try:
                    read(path, compression)
                except duckdb.Error:
                    lf_only()  # a mix of line ends DuckDB's reader gives up on
                by_line = f"({readers.rejects_by_line_sql()})"
                if one(f"SELECT coalesce(bool_or(has_cr), false) FROM {by_line}"):
                    lf_only()  # a rejected record ends at a CR DuckDB's reader missed
            except duckdb.Error as exc:
                return _CsvRead(None, [(None, unreadable(exc))])
            rejected = con.execute(
                f"SELECT line, {fmt.rejected} FROM {by_line} ORDER BY line", {"lines": 0}
            ).fetchall()
            # A quoted value holding a line end.
            spans = " OR ".join(f"regexp_matches(c{i}, '[\\r\\n]')" for i in range(columns))
            if (
                not rejected
                and broken is None
                and not one(f"SELECT count(*) FROM rg_rows WHERE {spans or 'false'}")
            ):
                return None
            rows = con.sql("SELECT rowid + 1 AS pos, * FROM rg_rows ORDER BY rowid")
            return _CsvRead(rows.to_arrow_table(), [(int(n), str(why)) for n, why in rejected])
    finally:
        con.close()


def _complete(path: Path) -> int:
    """The bytes of a plain file up to its last line end."""
    with open(path, "rb") as fh:
        end = fh.seek(0, 2)
        while end > 0:
            start = max(0, end - (1 << 16))
            fh.seek(start)
            chunk = fh.read(end - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                return start + nl + 1
            end = start
    return 0


@dataclass(frozen=True)
class _File:
    file_id: int
    src: readers.Source
    shown: str
    path: str  # as Spark is given it
    # Its last line has no line end yet: DuckDB waits for it (read once complete).
    waits: bool
    header: tuple[str, ...] = ()
    # The proxy whose own log format it is in (read by ingest/adapters.py), or None.
    proxy: str | None = None
    # A gzip stream that breaks: its lines are handed to Spark from the driver.
    broken: _Break | None = None
    # A CSV file Spark's reader would read otherwise than DuckDB's: DuckDB's read of it.
    driver: _CsvRead | None = None


def _waits(src: readers.Source) -> bool:
    fmt = readers.FORMATS[src.format]
    if src.gzip or not fmt.lines:
        return False
    with open(src.path, "rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) != b"\n"


def _rejected_reason(fmt: readers.Format, error_type: str) -> str:
    """The format's reason for a line its reader rejects (`Format.rejected`)."""
    assert fmt.rejected is not None
    con = duckdb.connect()
    try:
        sql = f"SELECT {fmt.rejected} FROM (SELECT $e AS error_type)"
        return str(con.execute(sql, {"e": error_type}).fetchall()[0][0])
    finally:
        con.close()


def _plan(paths: list[str]) -> tuple[list[_File], list[str], list[tuple[str, str]]]:
    """The files to read (with their ids, in the DuckDB ingest's order), the names
    skipped, and the unreadable files with why."""
    sources, skipped = discovery.discover(list(paths))
    files: list[_File] = []
    unreadable: list[tuple[str, str]] = []
    for src in sources:
        shown = discovery.display(src.path)
        why = discovery.readable(src)
        if why:
            unreadable.append((shown, why))
            continue
        if src.path.stat().st_size == 0:
            continue  # nothing to read (DuckDB's ingest: "empty")
        fid = len(files) + 1
        path = _spark_path(src.path)
        broken = _gzip_break(src) if src.gzip and src.format in ("jsonl", "csv") else None
        header: tuple[str, ...] = ()
        driver = None
        if src.format == "csv":
            header = tuple(_csv_header(src, broken))
            driver = _duck_csv(src, len(header), broken)
        files.append(
            _File(fid, src, shown, path, _waits(src), header, proxy_format(src), broken, driver)
        )
    return files, skipped, unreadable


def _csv_header(src: readers.Source, broken: _Break | None) -> list[str]:
    """A CSV file's first line's names (of a broken gzip stream: from its content before
    the break)."""
    if broken is None:
        return readers.csv_header(src.path, src.gzip)
    first = broken.content.split(b"\n", 1)[0].decode("utf-8-sig", "replace")
    return next(csv.reader(io.StringIO(first)), [])


def proxy_format(src: readers.Source) -> str | None:
    """The proxy whose own log format a file is in (read by ingest/adapters.py, by the
    shape of its first lines), or None for contract records."""
    if src.default_type is None or src.default_type.table != "proxy":
        return None
    probe = duckdb.connect()
    try:
        shape = adapters.sniff(probe, readers.first_lines(src.path, src.gzip))
    finally:
        probe.close()
    return None if shape == "contract" else str(shape)


def _spark_path(path: Path) -> str:
    """A local file as Spark reads it: absolute, its glob characters escaped (Hadoop
    paths are patterns)."""
    return re.sub(r"([{}\[\]*?\\])", r"\\\1", str(path.resolve()))


def _numbered(spark: Any, df: Any, files: list[_File]) -> Any:
    """The rows of a read with their file's id and their position in it (line or data
    row, from 1): a file split over tasks keeps its order by where each split starts."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # Spark names each file read by a URI of its own spelling; the read's file list
    # (no scan) gives it, matched to the files by their decoded path.
    by_path = {str(f.src.path.resolve()): f for f in files}
    rows = []
    for name in df.inputFiles():
        f = by_path[unquote(urlparse(name).path)]
        rows.append((name, f.file_id, f.waits))
    ids = spark.createDataFrame(rows, "rg_uri STRING, file_id BIGINT, rg_waits BOOLEAN")
    df = df.withColumn("rg_uri", F.input_file_name())
    df = df.withColumn("rg_block", F.col("_metadata.file_block_start"))
    df = df.withColumn("rg_seq", F.monotonically_increasing_id())
    df = df.join(F.broadcast(ids), "rg_uri")
    df = df.withColumn(
        "pos", F.row_number().over(Window.partitionBy("file_id").orderBy("rg_block", "rg_seq"))
    )
    if any(f.waits for f in files):
        last = F.max("pos").over(Window.partitionBy("file_id"))
        at_end = F.col("rg_waits") & (F.col("pos") == F.col("rg_last"))
        df = df.withColumn("rg_last", last).filter(~at_end)
    return df.drop("rg_uri", "rg_block", "rg_seq", "rg_waits", "rg_last")


def _uris(files: list[_File]) -> list[str]:
    return [f.path for f in files]


def _driver_lines(spark: Any, f: _File) -> Any:
    """The lines of a broken gzip stream before its break (file_id, pos, value), split
    on the driver (Arrow) and handed to Spark."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    assert f.broken is not None
    text = f.broken.content.decode("utf-8", "replace")  # U+FFFD, as Spark's reader
    values = pc.split_pattern(pa.array([text]), "\n")[0].values
    values = values.slice(0, len(values) - 1)  # after the last line end: nothing
    n = len(values)
    table = pa.table(
        {
            "file_id": pa.array(np.full(n, f.file_id, dtype=np.int64)),
            "pos": pa.array(np.arange(1, n + 1, dtype=np.int64)),
            "value": values,
        }
    )
    return spark.createDataFrame(table, "file_id BIGINT, pos BIGINT, value STRING")


def _lines(spark: Any, files: list[_File]) -> tuple[Any, Any]:
    """(the lines of JSON Lines files: file_id, pos, raw; as quarantine rows, the lines
    over readers.MAX_LINE bytes, those Spark could not decode, and a gzip stream's
    break)."""
    from pyspark.sql import functions as F

    fmt = readers.FORMATS["jsonl"]
    bare = (fmt.bare_cr or b"\r").decode()
    read = [f for f in files if f.broken is None]
    parts = [_driver_lines(spark, f) for f in files if f.broken is not None]
    if read:
        df = spark.read.option("lineSep", "\n").text(_uris(read))
        parts.append(_numbered(spark, df, read).select("file_id", "pos", "value"))
    df = parts[0]
    for p in parts[1:]:
        df = df.unionByName(p)
    # A line's length is its bytes before the LF (a CRLF line's CR counted), as DuckDB's.
    too_long = F.octet_length("value") > readers.MAX_LINE
    # A CRLF line's CR ends it; a bare CR inside a line is what the format makes of it.
    raw = F.regexp_replace(F.regexp_replace("value", "\r\\z", ""), "\r", bare)
    reason = (
        F.when(too_long, F.lit(_rejected_reason(fmt, "LINE SIZE OVER MAXIMUM")))
        .when(raw.contains(REPLACEMENT), F.lit(_rejected_reason(fmt, "INVALID ENCODING")))
        .otherwise(F.lit(None).cast("string"))
    )
    # Read once for both the lines refused and the others.
    df = df.select(
        "file_id", "pos", F.when(~too_long, raw).alias("raw"), reason.alias("rg_reason")
    ).persist()
    schema = "file_id BIGINT, line BIGINT, row BIGINT, record_type STRING, reason STRING"
    breaks = [(f.file_id, f.broken.line, None, None, f.broken.reason) for f in files if f.broken]
    refused = df.filter(F.col("rg_reason").isNotNull()).select(
        "file_id",
        F.col("pos").alias("line"),
        F.lit(None).cast("bigint").alias("row"),
        F.lit(None).cast("string").alias("record_type"),
        F.col("rg_reason").alias("reason"),
    )
    refused = refused.unionByName(spark.createDataFrame(breaks, schema))
    return df.filter(F.col("rg_reason").isNull()).drop("rg_reason"), refused


def _json_lines(spark: Any, files: list[_File], names: list[str]) -> tuple[Any, Any]:
    """(rows for readers.json_lines_sql, the lines Spark could not decode)."""
    from pyspark.sql import functions as F

    df, bad_utf8 = _lines(spark, files)
    no_bom = transpile.expression_to_spark(readers._NO_BOM)
    # One parse per line: a JSON object's keys and their text; a line that is JSON but
    # no object still parses (DuckDB reads it, and says it is not an object).
    # (A projection of its own: each field read from the map would parse it again.)
    obj = F.expr(f"from_json({no_bom}, 'map<string,string>')")
    df = df.select("file_id", "pos", "raw", obj.alias("rg_obj"))
    obj = F.col("rg_obj")
    is_json = obj.isNotNull() | F.expr(f"try_parse_json({no_bom})").isNotNull()
    values = F.array(*[obj.getItem(p[2:]) for p in readers.json_paths(names)])
    df = df.select("file_id", "pos", "raw", F.when(is_json, values).alias("v"))
    return df, bad_utf8


def _proxy_keys(
    spark: Any, lines: str, files: list[_File], field_maps: dict[str, dict[str, str]]
) -> dict[int, set[str]]:
    """The adapters' keys each proxy log's first lines carry (readers.proxy_keys_sql:
    its first KEY_SCAN_LINES lines that are not empty), by file id."""
    keys = adapters.candidate_keys(field_maps)
    sql = f"""SELECT file_id, {readers.proxy_keys_columns(keys)} FROM (
        SELECT file_id, try(json(raw)) AS j FROM (
            SELECT file_id, raw, row_number() OVER (PARTITION BY file_id ORDER BY pos) AS n
            FROM {lines} WHERE raw <> '')
        WHERE n <= {readers.KEY_SCAN_LINES}) WHERE j IS NOT NULL GROUP BY file_id"""
    out: dict[int, set[str]] = {f.file_id: set() for f in files}
    for r in _sql(spark, sql, {}).collect():
        out[int(r[0])] = {k.path for k, yes in zip(keys, r[1:], strict=True) if yes}
    return out


def _csv(spark: Any, files: list[_File]) -> tuple[Any, Any]:
    """(the data rows of CSV files: file_id, pos, c0, ...; as quarantine rows, the
    records DuckDB's reader rejects and a gzip stream's break). A file Spark's reader
    would read otherwise than DuckDB's (`_File.driver`) is handed over as DuckDB read it
    on the driver."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    n = len(files[0].header)
    schema = ", ".join(f"c{i} STRING" for i in range(n))
    parts = []
    for f in files:
        if f.driver is not None and f.driver.rows is not None:
            rows = f.driver.rows
            ids = pa.array([f.file_id] * rows.num_rows, pa.int64())
            table = rows.add_column(0, "file_id", ids)
            parts.append(spark.createDataFrame(table, f"file_id BIGINT, pos BIGINT, {schema}"))
    read = [f for f in files if f.driver is None]
    if read:
        df = spark.read.csv(_uris(read), schema=schema, header=True, sep=",", quote='"', escape='"')
        parts.append(_numbered(spark, df, read))
    df = parts[0] if parts else spark.createDataFrame([], f"file_id BIGINT, pos BIGINT, {schema}")
    for p in parts[1:]:
        df = df.unionByName(p)
    # DuckDB's reader gives an empty field as NULL, quoted ("") or not.
    df = df.select(
        "file_id", "pos", *[F.expr(f"nullif(c{i}, '')").alias(f"c{i}") for i in range(n)]
    )
    refused = [
        (f.file_id, line, None, None, why)
        for f in files
        if f.driver is not None
        for line, why in f.driver.rejected
    ]
    refused += [(f.file_id, f.broken.line, None, None, f.broken.reason) for f in files if f.broken]
    quarantine = "file_id BIGINT, line BIGINT, row BIGINT, record_type STRING, reason STRING"
    return df, spark.createDataFrame(refused, quarantine)


def _parquet(spark: Any, files: list[_File]) -> tuple[Any, set[str]]:
    from pyspark.sql import functions as F

    df = spark.read.parquet(*_uris(files))
    present = set(df.columns)
    df = df.withColumn("rg_row", F.col("_metadata.row_index"))
    df = _numbered(spark, df, files).drop("pos").withColumn("pos", F.col("rg_row") + 1)
    return df.drop("rg_row"), present


def _groups(files: list[_File]) -> dict[tuple[Any, ...], list[_File]]:
    """Files read together: one format, default record type and columns, and whether
    they are a proxy's own log."""
    out: dict[tuple[Any, ...], list[_File]] = defaultdict(list)
    for f in files:
        rt = f.src.default_type.table if f.src.default_type else None
        cols: tuple[Any, ...] = f.header
        if f.src.format == "parquet":
            import pyarrow.parquet as pq

            cols = tuple((c.name, str(c.type)) for c in pq.read_schema(f.src.path))
        out[(f.src.format, rt, cols, f.proxy is not None)].append(f)
    return out


def _args(config: Config) -> dict[str, Any]:
    key = config.hmac_key()
    args: dict[str, Any] = {k: bytearray(v) for k, v in padded_keys(key).items()} if key else {}
    for name, k in (("rg_ts_min", "min"), ("rg_ts_max", "max")):
        v = config.ts_bounds.get(k)
        args[name] = datetime.fromisoformat(v).astimezone(UTC).replace(tzinfo=None) if v else None
    return args


def _sql(spark: Any, sql: str, args: dict[str, Any]) -> Any:
    spark_sql = transpile.to_spark(sql)
    used = {k: v for k, v in args.items() if f":{k}" in spark_sql}
    return spark.sql(spark_sql, args=used)


def ingest(spark: Any, paths: list[str], lake: str, config: Config) -> dict[str, Any]:
    """Read `paths` (files and folders) into the lake at `lake` (replacing its records),
    on Spark; returns what was read, as counts."""
    adapters.check_sources(config)
    files, skipped, unreadable = _plan(paths)
    args = _args(config)
    key = config.hmac_key() is not None
    names = all_field_names()
    field_maps = config.field_maps()
    quarantine: list[Any] = []
    records: dict[str, list[Any]] = defaultdict(list)
    key_facts: dict[int, set[str]] = {}
    keep = "file_id, pos, "
    # (a view's name, its format, the reading rules over it, the files it holds)
    reads: list[tuple[str, readers.Format, str, list[_File]]] = []
    for n, ((fmt_name, _, cols, proxy), group) in enumerate(_groups(files).items()):
        fmt = readers.FORMATS[fmt_name]
        view = f"rg_rows_{n}"
        if fmt_name == "jsonl" and proxy:
            rows, bad = _lines(spark, group)
            quarantine.append(bad)
            rows.createOrReplaceTempView(view)
            # The adapters read the keys a file's lines carry: one reading per key set.
            present = _proxy_keys(spark, view, group, field_maps)
            by_keys: dict[frozenset[str], list[_File]] = defaultdict(list)
            for f in group:
                by_keys[frozenset(present[f.file_id])].append(f)
                shapes = {str(f.proxy)}
                key_facts[f.file_id] = capabilities.from_keys(
                    present[f.file_id], shapes, field_maps
                )
            for k, (keys, some) in enumerate(by_keys.items()):
                ids = ", ".join(str(f.file_id) for f in some)
                part = f"(SELECT * FROM {view} WHERE file_id IN ({ids}))"
                rules = readers.proxy_lines_sql(part, set(keys), names, key, field_maps, None, keep)
                reads.append((f"{view}_{k}", fmt, rules, some))
            continue
        if fmt_name == "jsonl":
            rows, bad = _json_lines(spark, group, names)
            quarantine.append(bad)
            rules = readers.json_lines_sql(view, names, key, keep)
        elif fmt_name == "csv":
            rows, bad = _csv(spark, group)
            quarantine.append(bad)
            rules = readers.csv_rows_sql(view, list(cols), names, key, keep)
        elif fmt_name == "parquet":
            rows, present_cols = _parquet(spark, group)
            rules = readers.parquet_rows_sql(view, present_cols, frozenset(), names, key, keep)
        else:  # pragma: no cover - a format registered without a Spark reader
            raise ReplaygateError(f"--engine spark cannot read {fmt.title} files yet")
        rows.createOrReplaceTempView(view)
        reads.append((view, fmt, rules, group))
    for name, fmt, rules, group in reads:
        staged = _sql(spark, readers.wrap(rules, group[0].src), args).persist()
        staged.createOrReplaceTempView(f"{name}_staged")
        line, row = ("pos", "NULL") if not fmt.row_positions else ("NULL", "pos")
        quarantine.append(
            spark.sql(
                f"SELECT file_id, {line} AS line, {row} AS row, "
                f"CAST(NULL AS STRING) AS record_type, bad AS reason "
                f"FROM {name}_staged WHERE bad IS NOT NULL"
            )
        )
        present_types = {
            r[0]
            for r in spark.sql(
                f"SELECT DISTINCT rtype FROM {name}_staged WHERE bad IS NULL AND rtype IS NOT NULL"
            ).collect()
        }
        for rt in (rt for rt in RECORD_TYPES if rt.table in present_types):
            source = f"(SELECT * FROM {name}_staged WHERE rtype = '{rt.table}' AND bad IS NULL)"
            # Read by the records and by the quarantine: checked once, kept.
            checked = _sql(spark, validate.checked_sql(rt, source), args).persist()
            checked.createOrReplaceTempView(f"{name}_checked_{rt.table}")
            quarantine.append(
                spark.sql(
                    f"SELECT file_id, {line} AS line, {row} AS row, "
                    f"'{rt.schema}' AS record_type, reason "
                    f"FROM {name}_checked_{rt.table} WHERE reason IS NOT NULL"
                )
            )
            tcols, exprs = validate.target_columns(rt)
            exprs[0] = "file_id"  # the bound $file_id of one file's load: here a column
            select = ", ".join(f"{e} AS {c}" for c, e in zip(tcols, exprs, strict=True))
            good = f"SELECT {select} FROM {name}_checked_{rt.table} WHERE reason IS NULL"
            records[rt.table].append(_sql(spark, good, args))
    counts, facts = _write_records(spark, lake, records, key_facts)
    q_counts = _write_quarantine(spark, lake, quarantine, files)
    _write_files(spark, lake, files, counts, q_counts)
    _write_facts(spark, lake, facts)
    for name, *_ in reads:
        spark.catalog.dropTempView(f"{name}_staged")
    spark.catalog.clearCache()
    rows_by_type = Counter[str]()
    for (table, _), k in counts.items():
        rows_by_type[table] += k
    warnings = []
    if not key:
        warnings.append(
            f"no HMAC key is set in ${config.hmac_key_env}: raw session ids were discarded, "
            "not stored"
        )
    return {
        "lake": lake,
        "files": len(files),
        "rows": dict(sorted(rows_by_type.items())),
        "quarantined": sum(q_counts.values()),
        "skipped": skipped,
        "unreadable": [{"path": p, "note": why} for p, why in unreadable],
        "warnings": warnings,
    }


def _write_records(
    spark: Any, lake: str, records: dict[str, list[Any]], key_facts: dict[int, set[str]]
) -> tuple[dict[tuple[str, int], int], list[tuple[int, str, str]]]:
    """Each record type's rows into its folder, partitioned by day. Returns (table,
    file_id) -> rows written, and the facts each file shows: a proxy log by its keys
    (`key_facts`), and by its rows' values (capabilities.py's rules, as
    capabilities.record stores them), counted in the same pass over the written rows."""
    from pyspark.sql import functions as F

    counts: dict[tuple[str, int], int] = {}
    facts = [(fid, fact, "keys") for fid, shown in key_facts.items() for fact in sorted(shown)]
    for table in (rt.table for rt in RECORD_TYPES):
        cols = lakes.record_columns(table)
        where = lakes.path(lake, table)
        parts = records.get(table)
        if not parts:
            # No rows: an empty table (one file with the columns), replacing any before.
            empty = spark.createDataFrame([], lakes.spark_schema(cols))
            empty.coalesce(1).write.mode("overwrite").parquet(where)
            continue
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        types = [t.split(" ", 1)[1] for t in lakes.spark_schema(cols).split(", ")]
        df = df.select(*[F.col(c).cast(t).alias(c) for (c, _), t in zip(cols, types, strict=True)])
        df = df.withColumn(lakes.PARTITION, F.date_format("ts", "yyyy-MM-dd")).persist()
        df.write.mode("overwrite").partitionBy(lakes.PARTITION).parquet(where)
        checks = capabilities.value_checks(table)
        aggs = ["count(*)"] + [sql for _, sql in checks]
        if table == "proxy":
            aggs.append(capabilities.INITIALIZE_SEEN)
        df.createOrReplaceTempView("rg_written")
        select = ", ".join(f"{a} AS f{i}" for i, a in enumerate(aggs))
        per_file = f"SELECT file_id, {select} FROM rg_written GROUP BY file_id"
        for r in _sql(spark, per_file, {}).collect():
            fid = int(r["file_id"])
            counts[(table, fid)] = int(r["f0"])
            found = {fact for i, (fact, _) in enumerate(checks) if r[f"f{i + 1}"]}
            by_keys = key_facts.get(fid, set())
            if table == "proxy":
                seen = partial(bool, r[f"f{len(checks) + 1}"])
                if capabilities.shows_initialize(found, by_keys, set(), seen):
                    found.add(capabilities.INITIALIZE)
            facts += [(fid, fact, "values") for fact in sorted(found - by_keys)]
        spark.catalog.dropTempView("rg_written")
        df.unpersist()
        if not any(t == table for t, _ in counts):
            # Every row was quarantined: a partitioned write of none leaves no columns.
            empty = spark.createDataFrame([], lakes.spark_schema(cols))
            empty.coalesce(1).write.mode("overwrite").parquet(where)
    return counts, facts


def _write_quarantine(
    spark: Any, lake: str, parts: list[Any], files: list[_File]
) -> dict[int, int]:
    from pyspark.sql import functions as F

    paths = spark.createDataFrame(
        [(f.file_id, f.shown) for f in files], "file_id BIGINT, path STRING"
    )
    df: Any = spark.createDataFrame(
        [], "file_id BIGINT, line BIGINT, row BIGINT, record_type STRING, reason STRING"
    )
    for p in parts:
        df = df.unionByName(p)
    df = (
        df.join(F.broadcast(paths), "file_id")
        .select(
            F.col("file_id").cast("bigint"),
            "path",
            F.col("line").cast("bigint"),
            F.col("row").cast("bigint"),
            F.col("record_type").cast("string"),
            F.col("reason").cast("string"),
        )
        # One file, gathered after the rows are found (the finding stays parallel; a
        # coalesce would run every part's reading in one task).
        .repartition(1)
        .persist()
    )
    df.write.mode("overwrite").parquet(lakes.path(lake, "quarantine"))
    got = df.groupBy("file_id").count().collect()
    df.unpersist()
    return {int(r["file_id"]): int(r["count"]) for r in got}


def _duck_columns(table: str) -> list[tuple[str, str]]:
    con = dbm.connect(":memory:")
    try:
        rows = con.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = $t ORDER BY ordinal_position",
            {"t": table},
        ).fetchall()
    finally:
        con.close()
    return [(str(n), "TIMESTAMPTZ" if "TIME ZONE" in str(t) else str(t)) for n, t in rows]


def _write_files(
    spark: Any,
    lake: str,
    files: list[_File],
    counts: dict[tuple[str, int], int],
    q_counts: dict[int, int],
) -> None:
    """The manifest: one row per file read, as the DuckDB ingest's `files` holds it."""
    cols = _duck_columns("files")
    now = datetime.now(UTC).replace(tzinfo=None)
    rows = []
    for f in files:
        by_type = {t: k for (t, fid), k in counts.items() if fid == f.file_id}
        values = {
            "file_id": f.file_id,
            "path": f.shown,
            "name": f.src.name,
            "format": f.src.format,
            "compression": f.src.compression,
            "size": f.src.path.stat().st_size,
            # A Spark lake is loaded whole: no file is recognised by content later.
            "sha256": "",
            "rows_loaded": sum(by_type.values()),
            "rows_quarantined": q_counts.get(f.file_id, 0),
            "rows_by_type": json.dumps(dict(sorted(by_type.items())), sort_keys=True),
            "ingested_at": now,
            "status": "loaded",
            "abspath": str(f.src.path.resolve()),
        }
        rows.append(tuple(values.get(c) for c, _ in cols))
    df = spark.createDataFrame(rows, lakes.spark_schema(cols))
    df.coalesce(1).write.mode("overwrite").parquet(lakes.path(lake, "files"))


def _write_facts(spark: Any, lake: str, facts: list[tuple[int, str, str]]) -> None:
    df = spark.createDataFrame(facts, "file_id BIGINT, fact STRING, how STRING")
    df.coalesce(1).write.mode("overwrite").parquet(lakes.path(lake, "file_facts"))
