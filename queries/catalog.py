"""Load the `.sql` files of queries/sql by name, with their headers.

A header is the leading `-- key: value` comment lines: name, invariant,
severity, needs (record types read), params (bound `$names`), unit, purpose; and for
detectors the field guide's failure, reports, dashboard and fix. queries/headers.py reads
and checks them (the keys each folder accepts and the form of their values).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from . import headers
from .headers import Header
from .headers import split as split  # the header lists' reader, as callers know it

if TYPE_CHECKING:
    from replaygate.core.config import Config

SQL_DIR = Path(__file__).parent / "sql"
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class SqlText:
    """A query's text under its checked header: the `$names` it declares and binds, and
    the statements it runs (a detector's file here, a named query in queries/named.py)."""

    name: str
    path: Path
    sql: str
    header: Header

    @property
    def params(self) -> tuple[str, ...]:
        return self.header.list("params")

    def body(self) -> str:
        # Comments are dropped first, so a ';' or a `$name` inside one counts for nothing.
        return "\n".join(line.split("--", 1)[0] for line in self.sql.splitlines())

    def used_params(self) -> set[str]:
        return set(_PARAM.findall(self.body()))

    def statements(self) -> list[str]:
        return [s for s in (p.strip() for p in self.body().split(";")) if s]


@dataclass(frozen=True)
class Query(SqlText):
    folder: str  # prep | detectors | gates | facts

    @cached_property
    def needs(self) -> tuple[str, ...]:
        # Cached: gates read their detectors' needs for every stage they evaluate.
        return self.header.list("needs")

    @property
    def severities(self) -> tuple[str, ...]:
        return self.header.list("severity")

    @property
    def invariant(self) -> str:
        return self.header.text("invariant")


def parse(path: Path, folder: str) -> Query:
    """One query file of a folder of queries/sql (detectors, gates, prep): its header checked
    (queries/headers.py); a detector's name is its file's stem."""
    text = path.read_text(encoding="utf-8")
    header, _ = headers.read(path, text.splitlines(), 0, folder)
    name = header["name"]
    if folder == "detectors" and name != path.stem:
        header.fail("name", f"{name!r} is not the file's name ({path.stem})")
    return Query(name=name, path=path, sql=text, header=header, folder=folder)


@cache
def load(folder: str) -> tuple[Query, ...]:
    return tuple(parse(p, folder) for p in sorted((SQL_DIR / folder).glob("*.sql")))


def detectors() -> dict[str, Query]:
    return dict(_detectors())


@cache
def _detectors() -> dict[str, Query]:
    return {q.name: q for q in load("detectors")}


def get(folder: str, name: str) -> Query:
    for q in load(folder):
        if q.name == name:
            return q
    raise KeyError(f"no {folder} query named {name!r}")


@cache
def digest() -> str:
    """What an analysis was made by: the prepare, detector and gate-fact SQL. A database
    analysed by other SQL holds other derived tables (and maybe findings): not current."""
    h = hashlib.sha256()
    for folder in ("prep", "detectors", "facts"):
        for p in sorted((SQL_DIR / folder).glob("*.sql")):
            h.update(f"{folder}/{p.name}\0".encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]


def basis(config: Config) -> str:
    """What an analysis depends on besides the data: the configuration and the SQL."""
    return f"{config.digest()}/{digest()}"
