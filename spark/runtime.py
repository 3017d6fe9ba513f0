"""The SparkSession replaygate runs on: a cluster's (spark-submit, a Databricks job) or,
when none is given, Spark in local mode on this machine."""

from __future__ import annotations

import os
import shutil
from typing import Any

from replaygate.core.errors import ReplaygateError

# What the translated SQL relies on, whatever the cluster's defaults.
_SETTINGS = {
    # Timestamps are UTC instants, as in DuckDB (core/db.py sets TimeZone = 'UTC').
    "spark.sql.session.timeZone": "UTC",
    # DuckDB's TRY_CAST and try() give NULL for a bad value; non-ANSI Spark does too.
    "spark.sql.ansi.enabled": "false",
    # size(NULL) is NULL, as DuckDB's len(NULL) (non-ANSI Spark's legacy answer is -1).
    "spark.sql.legacy.sizeOfNull": "false",
    # Timestamps as Parquet's standard microseconds, which DuckDB reads as TIMESTAMPTZ.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # No constraints propagated through the plans. A step kept in the executors
    # (localCheckpoint, spark/analyse.py) carries its optimised plan's constraints
    # unfiltered; where the optimiser took out the fresh names of a step it read (a shared
    # step reading another), those constraints name columns the kept step does not have,
    # and a UNION reading it fails to analyse ("key not found: session_hmac#..."). The
    # constraints only infer filters (IS NOT NULL on join keys): the results are the same.
    "spark.sql.constraintPropagation.enabled": "false",
    # Standard error belongs to replaygate's own messages.
    "spark.ui.showConsoleProgress": "false",
}


# Spark in local mode on small data (the tests, a trial on one machine): a few thousand
# rows take milliseconds, so the cost is each query's own overhead. One partition per
# shuffle (a task per partition), no adaptive re-planning, no web UI, and no generated
# code (compiling a query's Java costs more than interpreting it over so few rows); the
# driver JVM compiles hot code only to its first tier, since a short run never earns back
# the optimising compiler's CPU. Its code cache is reserved at 256 MB: held to the first
# tier the JVM reserves 48 MB, which Spark's planner filled after under three minutes of
# queries here, and a full cache switches the compiler off for good (every method not yet
# compiled is interpreted from then on). Not for a cluster or a large lake: there Spark's
# defaults (and the cluster's) hold.
SMALL_LOCAL = {
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
    "spark.driver.extraJavaOptions": (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=256m -XX:+UseSerialGC"
    ),
}


def java_missing() -> str | None:
    """Why Spark cannot start here, or None (local mode needs a Java runtime)."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return None
    return "no Java runtime (java on PATH or JAVA_HOME) for Spark in local mode"


def get(master: str | None = None, conf: dict[str, str] | None = None) -> Any:
    """The active SparkSession, or a new one (`master`: e.g. local[2]; None: what
    spark-submit set, else local mode on every core)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ReplaygateError(
            "--engine spark needs the spark extra: pip install 'replaygate[spark]'"
        ) from None
    active = SparkSession.getActiveSession()
    if active is not None:
        for k, v in _SETTINGS.items():
            active.conf.set(k, v)
        return active
    if master is None and "SPARK_HOME" not in os.environ and java_missing():
        raise ReplaygateError(f"cannot start Spark: {java_missing()}")
    builder = SparkSession.builder.appName("replaygate")
    if master:
        builder = builder.master(master)
    for k, v in {**_SETTINGS, **(conf or {})}.items():
        builder = builder.config(k, v)
    return builder.getOrCreate()
