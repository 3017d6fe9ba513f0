"""The one reader of the SQL headers of queries/sql: the leading `-- key: value` comment
lines of a detector, gate, prepare step, the gate facts and each dashboard query.

A comment line indented by two or more spaces after `--` continues the value above it; the
first other line ends the header. Every key is declared here once, with the folders whose
files may carry it, whether they must, and the form of its value, so a misspelt key or a
malformed value stops the query's loading with one line naming the file and the line,
instead of reading as "absent". What a value means beyond its form (a gate's kind, the
detectors it reads) is checked by the module that gives it that meaning, through
`Header.fail`, with the same one-line error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from replaygate.core.contract import BY_TABLE
from replaygate.core.errors import ReplaygateError
from replaygate.ingest.capabilities import all_facts

from .filters import DIMENSIONS
from .outcome import Severity

_LINE = re.compile(r"^--\s*([a-z_]+):\s*(.*)$")
_CONTINUED = re.compile(r"^--\s{2,}(\S.*)$")
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")
# `-- units: <table> [WHERE <predicate>] [BY <unit key>]`
UNITS = re.compile(r"^(?P<table>[a-z_]+)(?: WHERE (?P<where>.+?))?(?: BY (?P<by>.+))?$")
# `-- buckets: <table> <rows> [BY <time column> CHECKED BY <view>]` (queries/buckets.py)
BUCKETS = re.compile(
    r"^(?P<table>[a-z_]+) (?P<rows>[1-9][0-9]*)"
    r"(?: BY (?P<column>[a-z_]+) CHECKED BY (?P<check>[a-z_]+))?$"
)
# What a detector may read besides the record types: the decisions replaygate recorded.
_READABLE = (*BY_TABLE, "decision_history")
# A list that may say it is empty.
_NONE = ("none", "-")


class HeaderError(ReplaygateError):
    """A header key unknown to its file's folder, missing where required, or malformed:
    `path:line: message`."""


def split(value: str) -> tuple[str, ...]:
    """A comma-separated header value (`none` or `-` for an empty list)."""
    items = tuple(x.strip() for x in value.split(",") if x.strip())
    return () if items in (("none",), ("-",)) else items


def alternatives(value: str) -> tuple[tuple[str, ...], ...]:
    """`a|b, c`: groups of alternatives."""
    return tuple(tuple(a.strip() for a in g.split("|")) for g in split(value))


# -- the forms of values: each returns None when the value is well formed, else why not --


def _text(v: str) -> str | None:
    return None if v else "is empty"


def _ident(v: str) -> str | None:
    return None if _IDENT.match(v) else f"{v!r} is not a lower-case name"


def _idents(v: str) -> str | None:
    bad = [x for x in split(v) if not _IDENT.match(x)]
    return f"{bad[0]!r} is not a lower-case name" if bad else None


def _names(v: str) -> str | None:
    return None if split(v) else "names nothing (write `none`)"


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str | None]:
    def check(v: str) -> str | None:
        items = split(v)
        if not items:
            return f"names nothing (one or more of {', '.join(choices)})"
        bad = [x for x in items if x not in choices]
        return f"{bad[0]!r} is not one of {', '.join(choices)}" if bad else None

    return check


def _tables(v: str) -> str | None:
    groups = alternatives(v)  # none: it reads only prepared tables
    bad = [t for g in groups for t in g if t not in _READABLE]
    return f"{bad[0]!r} is not a record type ({', '.join(_READABLE)})" if bad else None


def _facts(v: str) -> str | None:
    known = set(all_facts())
    if v.strip() in _NONE:
        return None
    bad = [f for g in alternatives(v) for f in g if f not in known]
    return f"unknown fact {bad[0]!r} (a `table.field` of ingest/capabilities.py)" if bad else None


def _units(v: str) -> str | None:
    m = UNITS.match(v)
    if not m:
        return "is not `<table> [WHERE <predicate>] [BY <unit key>]`"
    return None if m["table"] in BY_TABLE else f"{m['table']!r} is not a record type"


def _flag(v: str) -> str | None:
    return None if v in ("true", "false") else f"{v!r} is not true or false"


def _count(v: str) -> str | None:
    return None if v.isdigit() else f"{v!r} is not a whole number"


def _buckets(v: str) -> str | None:
    m = BUCKETS.match(v)
    if not m:
        return (
            "is not `<record type> <rows per GB of the memory limit>`"
            " [BY <time column> CHECKED BY <view>]"
        )
    return None if m["table"] in BY_TABLE else f"{m['table']!r} is not a record type"


def _filters(v: str) -> str | None:
    return None if v.strip() in _NONE else _one_of(DIMENSIONS)(v)


@dataclass(frozen=True)
class Key:
    folders: tuple[str, ...]  # the folders of queries/sql whose files may carry it
    form: Callable[[str], str | None]
    required: tuple[str, ...] = ()  # the folders whose files must carry it


_D, _G, _P, _F, _B = "detectors", "gates", "prep", "facts", "dashboard"

KEYS: dict[str, Key] = {
    "name": Key((_D, _G, _P, _F, _B), _ident, required=(_D, _G, _P, _F, _B)),
    "purpose": Key((_D, _P, _F, _B), _text),
    "params": Key((_D, _G, _P, _F, _B), _idents),
    # detectors
    "invariant": Key((_D,), _text, required=(_D,)),
    "severity": Key((_D,), _one_of(tuple(Severity)), required=(_D,)),
    "needs": Key((_D, _P), _tables, required=(_D,)),
    # a prepare step run in buckets of sessions, or of time: the table that sizes them, its
    # rows per GB of the memory limit in one bucket, the time column that cuts them and the
    # view of what the cut may have missed (queries/buckets.py)
    "buckets": Key((_P,), _buckets),
    "unit": Key((_D, _G), _text, required=(_D, _G)),
    "failure": Key((_D,), _text),
    "reports": Key((_D,), _text),
    "dashboard": Key((_D,), _text),
    "fix": Key((_D,), _text),
    "facts": Key((_D,), _facts),
    "units": Key((_D,), _units),
    # record types that judge a detector's units besides its units table
    "other_bases": Key((_D,), _tables),
    "undecided": Key((_D,), _names),
    "page": Key((_D, _G), _ident),
    # gates
    "title": Key((_G,), _text, required=(_G,)),
    "kind": Key((_G,), _ident, required=(_G,)),
    "detectors": Key((_G,), _idents, required=(_G,)),
    "scopes": Key((_G,), _idents),
    "replay": Key((_G,), _flag),
    "min_sample": Key((_G,), _count, required=(_G,)),
    "sample": Key((_G,), _text, required=(_G,)),
    "unit_one": Key((_G,), _text),
    "meter": Key((_G,), _ident),
    "measure": Key((_G,), _text),
    # its failures are told apart by cause (the gate facts' `cause`, a finding's
    # detail.reason): the query returns `causes`, a list of {cause, n}
    "causes": Key((_G,), _flag),
    # named queries (the gate facts, the dashboard)
    "filters": Key((_F, _B), _filters),
}


class Header(Mapping[str, str]):
    """A query's header: its values as written (a mapping of key to text), where each was
    written, and typed readings of them."""

    def __init__(self, path: Path, values: dict[str, str], lines: dict[str, int], first: int):
        self.path = path
        self._values = values
        self._lines = lines
        self.first = first  # the line of `-- name:` (1-based)

    def __getitem__(self, key: str) -> str:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Header({self._values!r})"

    def text(self, key: str, default: str = "") -> str:
        return self._values.get(key, default)

    def list(self, key: str) -> tuple[str, ...]:
        return split(self._values.get(key, ""))

    def alternatives(self, key: str) -> tuple[tuple[str, ...], ...]:
        return alternatives(self._values.get(key, ""))

    def flag(self, key: str) -> bool:
        return self._values.get(key) == "true"

    def count(self, key: str, default: int = 0) -> int:
        v = self._values.get(key)
        return int(v) if v is not None else default

    def line(self, key: str) -> int:
        return self._lines.get(key, self.first)

    def fail(self, key: str, message: str) -> NoReturn:
        """Stop loading with one line naming the file and the line of `key`."""
        raise HeaderError(f"{self.path}:{self.line(key)}: -- {key}: {message}")


def read(path: Path, lines: list[str], start: int, folder: str) -> tuple[Header, int]:
    """The header whose first line is `lines[start]`, checked for `folder`'s files; and the
    index of the first line after it."""
    values: dict[str, str] = {}
    where: dict[str, int] = {}
    key: str | None = None
    i = start
    while i < len(lines):
        line = lines[i]
        c = _CONTINUED.match(line) if key is not None else None
        m = None if c else _LINE.match(line)
        if c and key is not None:
            values[key] = f"{values[key]} {c.group(1).strip()}".strip()
        elif m:
            key = m.group(1)
            spec = KEYS.get(key)
            if spec is None or folder not in spec.folders:
                known = ", ".join(k for k, s in KEYS.items() if folder in s.folders)
                raise HeaderError(
                    f"{path}:{i + 1}: unknown header key {key!r} for {folder} (known: {known})"
                )
            if key in values:
                raise HeaderError(f"{path}:{i + 1}: -- {key}: given twice")
            values[key] = m.group(2).strip()
            where[key] = i + 1
        else:
            break
        i += 1
    header = Header(path, values, where, start + 1)
    for k, v in values.items():
        why = KEYS[k].form(v)
        if why:
            header.fail(k, why)
    for k, spec in KEYS.items():
        if folder in spec.required and k not in values:
            raise HeaderError(f"{path}:{start + 1}: the header has no -- {k}:")
    return header, i
