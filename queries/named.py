"""Named queries: `.sql` files holding several queries, each under an aiosql-style header.

    -- name: findings
    -- purpose: what it returns
    -- params: flt, dets          (bound `$names`)
    -- filters: stage, time       (which filter dimensions it honours; `none` for none)
    SELECT ...

The dashboard reads only through these (queries/sql/dashboard); `setup` defines the
per-connection macros the others use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import duckdb

from . import catalog, headers
from .filters import DIMENSIONS, Filters

_NAME = re.compile(r"^--\s*name:")


@dataclass(frozen=True)
class NamedQuery(catalog.SqlText):
    @property
    def filters(self) -> tuple[str, ...]:
        return self.header.list("filters")

    def ignored(self, f: Filters) -> tuple[str, ...]:
        """Active filter dimensions this query cannot apply (to say so on its widget)."""
        return tuple(d for d in f.active() if d not in self.filters)


def parse(path: Path, group: str = "dashboard") -> list[NamedQuery]:
    """The queries of one file: each starts at its `-- name:` line, its header checked
    (queries/headers.py), and runs to the next."""
    lines = path.read_text(encoding="utf-8").splitlines()
    starts = [i for i, line in enumerate(lines) if _NAME.match(line)]
    out: list[NamedQuery] = []
    for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
        header, body = headers.read(path, lines, start, group)
        out.append(NamedQuery(header["name"], path, "\n".join(lines[body:end]).strip(), header))
    return out


@cache
def load(group: str = "dashboard") -> dict[str, NamedQuery]:
    queries: dict[str, NamedQuery] = {}
    for path in sorted((catalog.SQL_DIR / group).glob("*.sql")):
        for q in parse(path, group):
            if q.name in queries:
                raise ValueError(f"{path.name}: query {q.name!r} is defined twice")
            queries[q.name] = q
    return queries


def get(name: str, group: str = "dashboard") -> NamedQuery:
    try:
        return load(group)[name]
    except KeyError:
        raise KeyError(f"no {group} query named {name!r}") from None


def prepare(con: duckdb.DuckDBPyConnection, group: str = "dashboard") -> None:
    """Define the connection's macros (temporary objects, so a read-only connection works):
    the gate facts' reader and filter (queries/sql/facts), then the group's own."""
    for g in dict.fromkeys(("facts", group)):
        for stmt in get("setup", g).statements():
            con.execute(stmt)


def bind(q: NamedQuery, args: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for p in q.params:
        value = args[p]
        out[p] = value.param() if isinstance(value, Filters) else value
    return out


def execute(
    con: duckdb.DuckDBPyConnection, name: str, group: str = "dashboard", **args: Any
) -> duckdb.DuckDBPyConnection:
    """Run a named query with its declared parameters; returns the DuckDB result."""
    q = get(name, group)
    return con.execute(q.body(), bind(q, args))


def df(con: duckdb.DuckDBPyConnection, name: str, **args: Any) -> Any:
    return execute(con, name, **args).df()


def dimensions() -> tuple[str, ...]:
    return DIMENSIONS
