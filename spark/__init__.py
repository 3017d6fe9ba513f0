"""Scale-out on Apache Spark: the same contract and detector SQL on a cluster.

`replaygate ingest --engine spark` validates the contract's record types into a Parquet
lake; `replaygate findings --engine spark` runs the prepare step and every detector on
Spark (their SQL derived from the DuckDB statements by `transpile`) and writes the
results into the DuckDB file that `gates`, `report`, `serve` and the dashboard read.
Only this package imports pyspark (the `replaygate[spark]` extra); the CLI imports it
only for `--engine spark`.
"""
