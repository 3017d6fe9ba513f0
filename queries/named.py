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

from .catalog import SQL_DIR
from .filters import DIMENSIONS, Filters

_HEADER = re.compile(r"^--\s*([a-z_]+):\s*(.*)$")
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")


def _split(value: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.split(",") if x.strip() and x.strip() != "none")


@dataclass(frozen=True)
class NamedQuery:
    name: str
    path: Path
    sql: str
    header: dict[str, str]

    @property
    def params(self) -> tuple[str, ...]:
        return _split(self.header.get("params", ""))

    @property
    def filters(self) -> tuple[str, ...]:
        return _split(self.header.get("filters", ""))

    def used_params(self) -> set[str]:
        return set(_PARAM.findall(self.body()))

    def body(self) -> str:
        # Comments are dropped first, so a ';' inside one never splits a statement.
        return "\n".join(line.split("--", 1)[0] for line in self.sql.splitlines())

    def statements(self) -> list[str]:
        return [s for s in (p.strip() for p in self.body().split(";")) if s]

    def ignored(self, f: Filters) -> tuple[str, ...]:
        """Active filter dimensions this query cannot apply (to say so on its widget)."""
        return tuple(d for d in f.active() if d not in self.filters)


def parse(path: Path) -> list[NamedQuery]:
    out: list[NamedQuery] = []
    name: str | None = None
    header: dict[str, str] = {}
    lines: list[str] = []
    in_header = False
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _HEADER.match(line)
        if m and m.group(1) == "name":
            if name:
                out.append(NamedQuery(name, path, "\n".join(lines).strip(), header))
            name, header, lines, in_header = m.group(2).strip(), {"name": m.group(2)}, [], True
            continue
        if in_header and m:
            header[m.group(1)] = m.group(2).strip()
            continue
        if in_header and line.startswith("--   ") or (in_header and line.startswith("-- ")):
            continue  # a header value continued on the next line
        in_header = False
        lines.append(line)
    if name:
        out.append(NamedQuery(name, path, "\n".join(lines).strip(), header))
    return out


@cache
def load(group: str = "dashboard") -> dict[str, NamedQuery]:
    queries: dict[str, NamedQuery] = {}
    for path in sorted((SQL_DIR / group).glob("*.sql")):
        for q in parse(path):
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
