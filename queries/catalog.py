"""Load the `.sql` files of queries/sql by name, with their headers.

A header is the leading `-- key: value` comment lines: name, invariant,
severity, needs (record types read), params (bound `$names`), unit, purpose; and for
detectors the field guide's failure, reports, dashboard and fix. A comment line
indented by two or more spaces after `--` continues the value above it.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cache, cached_property
from pathlib import Path

SQL_DIR = Path(__file__).parent / "sql"
_HEADER = re.compile(r"^--\s*([a-z_]+):\s*(.*)$")
_CONTINUED = re.compile(r"^--\s{2,}(\S.*)$")
_PARAM = re.compile(r"\$([a-z_][a-z0-9_]*)")


@dataclass(frozen=True)
class Query:
    name: str
    kind: str  # prep | detectors | gates
    path: Path
    sql: str
    header: dict[str, str]

    @cached_property
    def needs(self) -> tuple[str, ...]:
        # Cached: gates read their detectors' needs for every stage they evaluate.
        return split(self.header.get("needs", ""))

    @property
    def params(self) -> tuple[str, ...]:
        return split(self.header.get("params", ""))

    @property
    def severities(self) -> tuple[str, ...]:
        return split(self.header.get("severity", ""))

    @property
    def invariant(self) -> str:
        return self.header.get("invariant", "")

    def used_params(self) -> set[str]:
        body = "\n".join(line for line in self.sql.splitlines() if not line.startswith("--"))
        return set(_PARAM.findall(body))

    def statements(self) -> list[str]:
        # Comments are dropped first, so a ';' inside one never splits a statement.
        body = "\n".join(line.split("--", 1)[0] for line in self.sql.splitlines())
        return [s for s in (p.strip() for p in body.split(";")) if s and not _only_comments(s)]


def _only_comments(stmt: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in stmt.splitlines())


def split(value: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.split(",") if x.strip())


def parse(path: Path, kind: str) -> Query:
    text = path.read_text(encoding="utf-8")
    header: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        c = _CONTINUED.match(line) if key is not None else None
        m = None if c else _HEADER.match(line)
        if c:
            header[key] = f"{header[key]} {c.group(1).strip()}".strip()
        elif m:
            key = m.group(1)
            header[key] = m.group(2).strip()
        else:
            break
    name = header.get("name", path.stem)
    return Query(name, kind, path, text, header)


@cache
def load(kind: str) -> tuple[Query, ...]:
    return tuple(parse(p, kind) for p in sorted((SQL_DIR / kind).glob("*.sql")))


def detectors() -> dict[str, Query]:
    return dict(_detectors())


@cache
def _detectors() -> dict[str, Query]:
    return {q.name: q for q in load("detectors")}


def get(kind: str, name: str) -> Query:
    for q in load(kind):
        if q.name == name:
            return q
    raise KeyError(f"no {kind} query named {name!r}")


@cache
def digest() -> str:
    """What an analysis was made by: the prepare, detector and gate-fact SQL. A database
    analysed by other SQL holds other derived tables (and maybe findings): not current."""
    h = hashlib.sha256()
    for kind in ("prep", "detectors", "facts"):
        for p in sorted((SQL_DIR / kind).glob("*.sql")):
            h.update(f"{kind}/{p.name}\0".encode())
            h.update(p.read_bytes())
    return h.hexdigest()[:16]
