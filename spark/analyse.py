"""The analysis on Spark: the prepare step and every detector over a lake, results into
the DuckDB file that `gates`, `report`, `serve` and the dashboard read.

The SQL is the DuckDB SQL of queries/sql, translated (transpile.py). What decides which
units a detector may judge (cannottell.py), the stage of each finding and the gates'
fleet measures stay DuckDB's, run on the copied tables, so the two engines share every
rule and differ only in where the joins and groupings run.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import duckdb

from replaygate.core import db as dbm
from replaygate.core.config import Config
from replaygate.core.contract import RECORD_TYPES
from replaygate.core.db import get_meta, set_meta, transaction
from replaygate.queries import (
    buckets,
    cannottell,
    catalog,
    decisionfile,
    incremental,
    params,
    runner,
)

from . import lake as lakes
from . import transpile

# Prepare steps (queries/sql/prep file names) with no Spark form yet: while one is listed,
# the Spark analysis stops with the reason before it starts (docs/spark.md).
PREP_NOT_YET: frozenset[str] = frozenset()

# Detectors the Spark engine does not run yet (docs/spark.md says why); their coverage
# says so and `tests/test_spark.py` holds this list to what the engine can do.
NOT_YET: frozenset[str] = frozenset()
NOT_YET_STATUS = "not run on spark"


def _read_table(spark: Any, location: str, columns: list[tuple[str, str]]) -> Any:
    """A lake table with exactly `columns` (a missing folder: no rows)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    schema = lakes.spark_schema(columns)
    try:
        df = spark.read.parquet(location)
    except AnalysisException as exc:
        if "PATH_NOT_FOUND" not in str(exc) and "Path does not exist" not in str(exc):
            raise
        return spark.createDataFrame([], schema)
    have = set(df.columns)
    cols = []
    for name, duck_type in columns:
        spark_type = lakes.spark_schema([(name, duck_type)]).split(" ", 1)[1]
        col = F.col(f"`{name}`") if name in have else F.lit(None)
        cols.append(col.cast(spark_type).alias(name))
    return df.select(*cols)


def _duck_columns(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    rows = con.execute(
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' AND table_name = $t ORDER BY ordinal_position",
        {"t": table},
    ).fetchall()
    return [(str(n), "TIMESTAMPTZ" if "TIME ZONE" in str(t) else str(t)) for n, t in rows]


def _settled(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """The connection with no unread result (the runner's writes leave theirs unread, and
    DuckDB refuses register() until it is read)."""
    con.execute("SELECT 1").fetchall()
    return con


def _replace(con: duckdb.DuckDBPyConnection, table: str, arrow: Any) -> None:
    _settled(con).register("rg_spark_rows", arrow)
    try:
        con.execute(f"DELETE FROM {table}").fetchall()
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM rg_spark_rows").fetchall()
    finally:
        con.unregister("rg_spark_rows")


def local_folder(location: str) -> Path | None:
    """A lake location as a folder of this machine's file system that DuckDB can read
    itself (a path, a `file:` URI, `dbfs:/` through Databricks' /dbfs mount), or None (an
    object store: its tables come through the driver)."""
    if location.startswith("file://"):
        return Path(location[len("file://") :])
    if location.startswith("file:"):
        return Path(location[len("file:") :])
    if location.startswith("dbfs:/"):
        mount = Path("/dbfs") / location[len("dbfs:/") :].lstrip("/")
        return mount if Path("/dbfs").is_dir() else None
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]+://", location):
        return None
    return Path(location)


def parquet_files(folder: Path) -> list[str]:
    """The Parquet files of a table folder as Spark reads it: below it, none under a
    folder or of a name starting with `_` or `.` (Spark's hidden files: `_SUCCESS`,
    `_temporary/` of an unfinished write, checksums)."""
    if not folder.is_dir():
        return []
    return sorted(
        str(f)
        for f in folder.rglob("*.parquet")
        if f.is_file()
        and not any(part.startswith(("_", ".")) for part in f.relative_to(folder).parts)
    )


# Parquet files read by DuckDB ($files); the partition folders (day=...) are not columns.
_PARQUET = "read_parquet($files, union_by_name = true, hive_partitioning = false)"


def _replace_from_lake(con: duckdb.DuckDBPyConnection, table: str, files: list[str]) -> None:
    """A table's rows read by DuckDB from the lake's Parquet files, into the table as
    core/db.py made it (its columns, types and order): the rows never pass through Spark's
    driver. A column the files lack (a lake of an older version) is NULL, as Spark's
    reading of it (`_read_table`) makes it."""
    con.execute(f"DELETE FROM {table}").fetchall()
    if not files:
        return
    src = _PARQUET
    present = {
        r[0] for r in con.execute(f"DESCRIBE SELECT * FROM {src}", {"files": files}).fetchall()
    }
    cols = ", ".join(f'"{c}"' for c, _ in _duck_columns(con, table) if c in present)
    con.execute(
        f"INSERT INTO {table} ({cols}) SELECT {cols} FROM {src}", {"files": files}
    ).fetchall()


def _copy_prepared(con: duckdb.DuckDBPyConnection, name: str, rows: Any) -> None:
    """A prepared table as DuckDB holds it: Spark's stand-in for an infinite timestamp
    (transpile.infinity) is infinity again. `rows`: the Parquet files Spark kept it in
    (read by DuckDB itself) or, where DuckDB cannot read them, its rows (Arrow)."""
    if isinstance(rows, list):
        con.execute(
            f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM {_PARQUET}", {"files": rows}
        ).fetchall()
    else:
        _settled(con).register("rg_spark_rows", rows)
        try:
            con.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT * FROM rg_spark_rows").fetchall()
        finally:
            con.unregister("rg_spark_rows")
    for col, kind in _duck_columns(con, name):
        if kind == "TIMESTAMPTZ":
            con.execute(
                f"UPDATE {name} SET {col} = 'infinity' WHERE {col} = CAST($last AS TIMESTAMPTZ)",
                {"last": transpile.LAST_TIMESTAMP + "+00"},
            ).fetchall()


def analyse(
    spark: Any, lake: str, db_path: str, config: Config, keep: str = "lake"
) -> dict[str, Any]:
    """Analyse the lake on Spark; write the results into the DuckDB file at db_path.
    `keep`: where each prepared table is kept while the detectors read it, "lake" (Parquet
    under <lake>/_analysis, for data larger than the executors' memory) or "memory"
    (checkpointed in the executors: small fleets, tests)."""
    con = dbm.connect(db_path)
    try:
        result: dict[str, Any] = _analyse(spark, lake, con, config, keep)
        return result
    finally:
        con.close()


def _analyse(
    spark: Any, lake: str, con: duckdb.DuckDBPyConnection, config: Config, keep: str
) -> Any:

    from replaygate.core.errors import ReplaygateError

    for q in catalog.load("prep"):
        try:
            transpile.prepare_steps(q.statements())
        except transpile.Untranslatable as exc:
            raise ReplaygateError(
                f"the Spark engine cannot run queries/sql/prep/{q.path.name} yet ({exc}); "
                "see docs/spark.md"
            ) from None
    values = params.from_config(config)
    frames: dict[str, Any] = {}
    with transaction(con):
        for stmt in runner.FINDINGS_DDL.split(";"):
            if stmt.strip():
                con.execute(stmt)
        runner.drop_retired(con)
        # The shared predicates, for what DuckDB still runs (stages, gates, capabilities).
        for q in catalog.load("prep"):
            for stmt in q.statements():
                if transpile.is_macro(stmt):
                    con.execute(stmt)
        # The records and the bookkeeping, as DuckDB's readers of the file expect them:
        # read by DuckDB from the lake's files where it can reach them, not collected
        # through the driver (at 10M events that is gigabytes in the driver's process).
        local = local_folder(lake)
        for table in (*lakes.BOOKKEEPING, *(rt.table for rt in RECORD_TYPES)):
            where = lakes.path(lake, table)
            columns = (
                _duck_columns(con, table)
                if table in lakes.BOOKKEEPING
                else lakes.record_columns(table)
            )
            df = _read_table(spark, where, columns)
            df.createOrReplaceTempView(table)
            frames[table] = df
            if local is not None:
                _replace_from_lake(con, table, parquet_files(Path(lakes.path(str(local), table))))
            else:
                _replace(con, table, df.toArrow())
        counts = runner.table_counts(con)
        counts["decision_history"] = decisionfile.load_table(con)
        if counts["decision_history"]:
            df = spark.createDataFrame(con.sql("SELECT * FROM decision_history").to_arrow_table())
            df.createOrReplaceTempView("decision_history")

        kept_in: dict[str, str] = {}  # a prepared table's folder in the lake (keep="lake")

        def kept(name: str, df: Any) -> Any:
            """`df` computed once and kept where `keep` says, as a fresh DataFrame."""
            if keep == "memory":
                return _checkpointed(df)
            where = lakes.analysis_path(lake, name)
            df.write.mode("overwrite").parquet(where)
            return spark.read.parquet(where)

        # The prepare step, each table materialised in the lake's _analysis folder.
        versions: dict[str, int] = {}
        views: set[str] = set()
        for q in catalog.load("prep"):
            for step in transpile.prepare_steps(q.statements()):
                k = versions.get(step.name, 0)
                versions[step.name] = k + 1
                if step.view:
                    views.add(step.name)
                label = step.name + (f".{k}" if k else "")
                # A step in buckets (queries/buckets.py) runs whole: Spark partitions it.
                df = kept(label, spark.sql(step.sql, args=_used(buckets.ONE, step.sql)))
                if keep == "lake":
                    kept_in[step.name] = lakes.analysis_path(lake, label)
                df.createOrReplaceTempView(step.name)
                frames[step.name] = df
        for name in versions:
            if name in views:  # DuckDB reads the views' sources (queries/sql/prep)
                continue
            folder = local_folder(kept_in[name]) if name in kept_in else None
            files = parquet_files(folder) if folder is not None else []
            if files:  # its last version's files, read by DuckDB
                _copy_prepared(con, name, files)
            else:
                _copy_prepared(con, name, frames[name].toArrow())
        for table in ("findings", "coverage", "cannot_tell", "cannot_tell_stages", "blind_files"):
            con.execute(f"DELETE FROM {table}").fetchall()
        for name, q in catalog.detectors().items():
            _run_detector(spark, con, name, q, values, counts, frames)
        runner._assign_stages(con)
        runner._gate_facts(con, values)
        set_meta(con, "data_version", str(int(get_meta(con, "data_version", "0")) + 1))
        set_meta(con, "analysis_stamp", runner.stamp(con, config))
        runner.store_config(con, config)
        set_meta(con, "analysis_mode", "spark")
        set_meta(con, "history_stamp", decisionfile.version(con))
        incremental.clear_pending(con)
    return runner.summary(con)


def _checkpointed(df: Any) -> Any:
    """`df` computed once and kept in the executors (spilling to their local disks), as a
    DataFrame with fresh column identities: a checkpoint keeps its source's, and a join
    of the two (events with a_event_index) could not tell them apart."""
    from pyspark.sql import functions as F

    df = df.localCheckpoint()
    return df.select(*[F.col(f"`{c}`").alias(c) for c in df.columns])


def _used(args: dict[str, Any], sql: str) -> dict[str, Any]:
    """The bound parameters a Spark statement names (`:name`)."""
    return {k: v for k, v in args.items() if re.search(rf":{k}\b", sql)}


def _run_detector(
    spark: Any,
    con: duckdb.DuckDBPyConnection,
    name: str,
    q: catalog.Query,
    values: dict[str, Any],
    counts: dict[str, int],
    frames: dict[str, Any],
) -> None:
    """One detector on Spark, its findings and coverage into DuckDB. Its CTEs read more
    than once are computed first, once each (transpile.shared_ctes), and checkpointed
    (kept in the executors, spilling to their local disks)."""
    from pyspark.sql import functions as F

    if name in NOT_YET:
        cannottell.record_coverage(con, name, NOT_YET_STATUS)
        return
    missing = cannottell.missing_needs(q, counts)
    if missing:
        cannottell.record_coverage(con, name, cannottell.missing_label(missing[0]))
        return
    t0 = time.perf_counter()
    shared: list[transpile.Table] = []
    plan = cannottell.plan(con, q)
    cannottell.record_cannot_tell(con, name, q, plan)
    n = 0
    if not plan.skip:
        # The files that cannot show a fact the detector needs are hidden from it, as
        # cannottell.shadow hides them in DuckDB.
        for table, ids in plan.exclude.items():
            frames[table].filter(~F.col("file_id").isin(list(ids))).createOrReplaceTempView(table)
        try:
            args = params.bind(q, values)
            shared, sql = transpile.shared_ctes(name, transpile.to_spark(q.statements()[0]))
            for step in shared:
                df = spark.sql(step.sql, args=_used(args, step.sql))
                _checkpointed(df).createOrReplaceTempView(step.name)
            rows = spark.sql(sql, args=_used(args, sql)).toArrow()
        finally:
            for table in plan.exclude:
                frames[table].createOrReplaceTempView(table)
            for step in shared:
                spark.catalog.dropTempView(step.name)
        _settled(con).register("rg_spark_rows", rows)
        try:
            con.execute(
                "INSERT INTO findings BY NAME SELECT $d AS detector, * FROM rg_spark_rows",
                {"d": name},
            ).fetchall()
        finally:
            con.unregister("rg_spark_rows")
        n = rows.num_rows
    status = "cannot tell" if plan.skip else "ok"
    cannottell.record_coverage(con, name, status, plan, n, time.perf_counter() - t0)
