"""A prepare step run in buckets of sessions: what a prepare file's statements bind.

A file whose header says `-- buckets: <table> <rows>` has its statements that bind `$lo`
and `$hi` run once per range of 64-bit session hashes, each reading only the sessions
whose `hash(session_hmac)` is in `$lo .. $hi`, with `$buckets` the number of ranges; as
many ranges as `<table>` has rows for `<rows>` rows per GB of the memory limit, one when
they fit. A join that holds one side whole in a hash table then holds a bucket's rows of
it: `a_inbox_resolved` (04_inbox.sql) held every receipt without a place, and at 100M
events (some 50M receipts) its table did not fit in 12 GB. The statement is written so
that one bucket folds the test away (`$buckets = 1 OR ...`): the plan is then the one
without buckets. The Spark engine runs every step in one bucket (it partitions itself).

`-- buckets: <table> <rows> BY <column> CHECKED BY <view>` cuts the buckets by time
instead: ranges of `<table>`'s time `<column>` between its quantiles, bound as epoch
microseconds (`$lo`, `$hi`; NULL at the open ends). A table stored about in time order
then gives each bucket its own row groups (DuckDB skips the others by their zone maps),
where a range of session hashes read every row of both tables again in each bucket. A
statement cut so must say what its ranges may have missed, as the `<view>` the file makes:
when it holds a row after the buckets ran, the file runs again in one bucket, the plan
without ranges. A column with NULLs (a row in no range) is run in one bucket from the
start.
"""

from __future__ import annotations

import re
from typing import Any

import duckdb

from replaygate.core.db import one_row

from .catalog import Query
from .headers import BUCKETS

ONE = {"buckets": 1, "lo": 0, "hi": 0}  # the whole step at once: `$buckets = 1` holds
_BOUND = re.compile(r"\$(lo|hi|buckets)\b")
_SIZE = re.compile(r"^([0-9.]+)\s*([KMGT]i?B|bytes)$")
_UNIT = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_UNIT |= {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def memory_gb(con: duckdb.DuckDBPyConnection) -> float:
    """The connection's memory limit in GB (DuckDB shows it as `11.1 GiB`)."""
    shown = str(one_row(con.execute("SELECT current_setting('memory_limit')"))[0])
    m = _SIZE.match(shown.strip())
    if not m:
        raise ValueError(f"memory limit {shown!r} not understood")
    return float(m[1]) * _UNIT[m[2]] / 1e9


def _spec(q: Query) -> dict[str, str] | None:
    m = BUCKETS.match(q.header.text("buckets"))
    return m.groupdict() if m else None


def count(con: duckdb.DuckDBPyConnection, q: Query) -> int:
    """How many buckets `q` runs in on this connection's data and memory limit (1 for a
    file without `-- buckets:`)."""
    spec = _spec(q)
    if not spec:
        return 1
    table, rows = spec["table"], spec["rows"]
    n = one_row(con.execute(f"SELECT count(*) FROM {table}"))[0]
    per_bucket = max(1, int(int(rows) * memory_gb(con)))
    return max(1, -(-int(n) // per_bucket))


def bounds(buckets: int) -> list[dict[str, int]]:
    """The ranges of 64-bit hashes of `buckets` buckets, as bound: together every hash
    once."""
    if buckets == 1:
        return [ONE]
    return [
        {"buckets": buckets, "lo": k * 2**64 // buckets, "hi": (k + 1) * 2**64 // buckets - 1}
        for k in range(buckets)
    ]


def time_bounds(
    con: duckdb.DuckDBPyConnection, table: str, column: str, buckets: int
) -> list[dict[str, Any]]:
    """`buckets` ranges of `table`'s time `column` as bound (epoch microseconds, NULL at
    the open ends), cut at its quantiles: together every time once. One bucket when the
    column has NULLs or no finite time to cut at. The quantiles of every 128th row by
    position: the same cuts every run, for a scan of one column (all of it through
    `approx_quantile` cost 6 CPU s at 100M events)."""
    if buckets == 1:
        return [ONE]
    nulls, cuts = one_row(
        con.execute(
            f"""SELECT (SELECT count(*) - count({column}) FROM {table}),
                       (SELECT quantile_disc(epoch_us({column}), $at)
                        FROM {table} WHERE rowid % 128 = 0 AND isfinite({column}))""",
            {"at": [k / buckets for k in range(1, buckets)]},
        )
    )
    if nulls or cuts is None:
        return [ONE]
    edges = [None, *cuts, None]
    return [{"buckets": buckets, "lo": edges[k], "hi": edges[k + 1]} for k in range(buckets)]


def runs(
    con: duckdb.DuckDBPyConnection, q: Query, buckets: int | None = None
) -> list[tuple[str, dict[str, Any]]]:
    """A prepare file's statements in order, each with what it binds: a bucketed one
    once per bucket (`buckets`, else as many as `count` says)."""
    statements = q.statements()
    if not any(_BOUND.search(s) for s in statements):
        return [(s, {}) for s in statements]
    k = buckets if buckets is not None else count(con, q)
    spec = _spec(q)
    if spec and spec["column"]:
        ranges = time_bounds(con, spec["table"], spec["column"], k)
    else:
        ranges = bounds(k)
    return [(s, r) for s in statements for r in (ranges if _BOUND.search(s) else [{}])]


def run(con: duckdb.DuckDBPyConnection, q: Query, buckets: int | None = None) -> int:
    """Runs a prepare file's statements (`runs`); returns how many buckets its bucketed
    ones ran in at last. A file cut by time whose view of what the cut may have missed
    holds a row runs again in one bucket."""
    todo = runs(con, q, buckets)
    for stmt, bound in todo:
        con.execute(stmt, bound)
    k = max((int(b["buckets"]) for _, b in todo if b), default=1)
    spec = _spec(q)
    check = spec["check"] if spec else None
    if k > 1 and check and one_row(con.execute(f"SELECT EXISTS (FROM {check})"))[0]:
        for stmt, bound in runs(con, q, 1):
            con.execute(stmt, bound)
        return 1
    return k
