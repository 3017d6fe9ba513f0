"""The Parquet lake Spark reads and writes: its layout and its schemas, from the contract.

    <lake>/<table>/day=YYYY-MM-DD/*.parquet   one folder per record type (contract.py),
                                              partitioned by the record's UTC day
    <lake>/_files/, _quarantine/, _file_facts/ the manifest, the quarantine (file, line,
                                              reason) and what each file can show
    <lake>/_analysis/<a_table>/               the prepared tables of the last analysis

A lake is a folder or any URI Spark can read (s3a://, abfss://, gs://, dbfs:/).
`export` writes one from a DuckDB database, for moving an embedded installation's data
to a cluster.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from replaygate.core.contract import DERIVED, PROVENANCE, RECORD_TYPES, SQL_TYPES

# DuckDB storage types -> Spark's (contract.SQL_TYPES and the bookkeeping columns).
_SPARK_TYPES = {
    "TIMESTAMPTZ": "TIMESTAMP",
    "VARCHAR": "STRING",
    "BIGINT": "BIGINT",
    "DOUBLE": "DOUBLE",
    "BOOLEAN": "BOOLEAN",
    "JSON": "STRING",
}
assert set(SQL_TYPES.values()) <= set(_SPARK_TYPES)

PARTITION = "day"
# Bookkeeping tables of core/db.py that travel with the lake.
BOOKKEEPING = ("files", "quarantine", "file_facts")


def record_columns(table: str) -> list[tuple[str, str]]:
    """(column, DuckDB type) of a record table, as core/db.py creates it."""
    rt = next(r for r in RECORD_TYPES if r.table == table)
    cols = list(PROVENANCE)
    cols += [(f.name, f.sql_type) for f in rt.stored_fields]
    cols += list(DERIVED.get(table, ()))
    return cols


def spark_schema(columns: list[tuple[str, str]]) -> str:
    """A Spark DDL schema string for (column, DuckDB type) pairs."""
    return ", ".join(f"`{n}` {_SPARK_TYPES[t.upper()]}" for n, t in columns)


def path(lake: str, table: str) -> str:
    sep = "" if lake.endswith("/") else "/"
    name = f"_{table}" if table in BOOKKEEPING else table
    return f"{lake}{sep}{name}"


def analysis_path(lake: str, table: str) -> str:
    sep = "" if lake.endswith("/") else "/"
    return f"{lake}{sep}_analysis/{table}"


def export(con: duckdb.DuckDBPyConnection, lake: str | Path) -> None:
    """Write a DuckDB database's records and bookkeeping as a lake (local folder)."""
    root = Path(lake)
    root.mkdir(parents=True, exist_ok=True)
    for rt in RECORD_TYPES:
        n = con.execute(f"SELECT count(*) FROM {rt.table}").fetchone()
        if not n or not n[0]:
            continue
        con.execute(
            f"COPY (SELECT *, strftime(ts, '%Y-%m-%d') AS {PARTITION} FROM {rt.table}) "
            f"TO '{_quoted(path(str(root), rt.table))}' "
            f"(FORMAT parquet, PARTITION_BY ({PARTITION}), OVERWRITE_OR_IGNORE)"
        )
    for table in BOOKKEEPING:
        out = Path(path(str(root), table))
        out.mkdir(parents=True, exist_ok=True)
        con.execute(
            f"COPY (SELECT * FROM {table}) TO '{_quoted(str(out / 'part-0.parquet'))}' "
            "(FORMAT parquet)"
        )


def _quoted(p: str) -> str:
    return p.replace("'", "''")
