"""The floor plan of CONTRIBUTING.md held against the code: the package's import graph, read
from the source with `ast` (nothing is imported, so no import runs), has no cycle at any
level, function-level imports included, and no floor imports one above it.

Floors, bottom up: the package root (the version); the core (`replaygate.core`:
configuration, database, errors, time); `ingest`, `probe`, `recorder`; `queries`
(the analysis); `audit` (the audit trail); `sim`, `spark`; the facade (`replaygate.api`);
`dashboard`; the CLI (`replaygate/`, and the Spark driver, the CLI under spark-submit).
Packages on one floor import nothing of each other. The CLI and the dashboard reach the
library below them through the facade alone, and an engine of its own (`sim`, `spark`,
`probe`) only from the CLI module of its commands.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOORS = {
    "replaygate": 0,
    "replaygate.core": 1,
    "replaygate.ingest": 2,
    "replaygate.probe": 2,
    "replaygate.recorder": 2,
    "replaygate.queries": 3,
    "replaygate.audit": 4,
    "replaygate.sim": 5,
    "replaygate.spark": 5,
    "replaygate.api": 6,
    "replaygate.dashboard": 7,
    "cli": 8,
}
# Modules of a lower package that are entry points of the CLI (they run `replaygate`).
CLI_MODULES = {"replaygate.spark.driver"}


def _package_dirs() -> dict[str, Path]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {pkg: ROOT / d for pkg, d in conf["tool"]["setuptools"]["package-dir"].items()}


def modules() -> dict[str, Path]:
    """Every module of the package (the dashboard's page scripts too), by import name."""
    out: dict[str, Path] = {}
    for pkg, folder in _package_dirs().items():
        for p in folder.rglob("*.py"):
            rel = p.relative_to(folder).with_suffix("").parts
            if pkg == "replaygate" and len(rel) > 1:
                continue  # no subpackage of the CLI's folder
            parts = rel[:-1] if rel[-1] == "__init__" else rel
            out[".".join((pkg, *parts))] = p
    return out


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the package it imports, anywhere in its body."""
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                named = [module, *(f"{module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                named = [a.name for a in node.names]
            else:
                continue
            # `from . import x` names module x; `from .m import f` names module m. A
            # package whose every imported name is a module of it is passed through (its
            # `__init__` runs, as for any import of a module below it), not imported from.
            if len(named) > 1 and all(t in mods for t in named[1:]):
                named = named[1:]
            targets |= {t for t in named if t in mods and t != name}
        graph[name] = targets
    return graph


def floor(module: str) -> tuple[int, str]:
    """The floor of a module and the part of the house it belongs to."""
    if module in CLI_MODULES:
        return FLOORS["cli"], "cli"
    for pkg in sorted(FLOORS, key=len, reverse=True):
        if module == pkg or module.startswith(pkg + "."):
            if pkg == "replaygate" and module != "replaygate":
                return FLOORS["cli"], "cli"
            return FLOORS[pkg], pkg
    raise AssertionError(f"{module}: on no floor (add its package to FLOORS)")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    g = import_graph()
    # a module-level, a relative, a function-level and a page script's import are all seen
    assert "replaygate.queries.catalog" in g["replaygate.queries.gates"]
    assert "replaygate.queries.headers" in g["replaygate.queries.catalog"]
    assert "replaygate.dashboard" in g["replaygate.cli"] or any(
        t.startswith("replaygate.dashboard.") for t in g["replaygate.cli"]
    )
    assert "replaygate.api" in g["replaygate.dashboard.views.findings"]


def test_no_import_cycle():
    assert cycles(import_graph()) == []


def test_cycles_are_found():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _word(name: str) -> str:
    """A name in the singular, so `capability` and `capabilities` are one name."""
    if name.endswith("ies"):
        return name[:-3] + "y"
    return name[:-1] if name.endswith("s") and not name.endswith("ss") else name


def name_twins(names: list[str]) -> dict[str, list[str]]:
    """The names (a module's own, or a folder of modules) that more than one place of the
    package holds, with those places: `queries.report` beside `dashboard.report`, or
    `queries.views` beside the folder `dashboard.views`, say two things with one word."""
    places: dict[str, set[str]] = {}
    for name in names:
        parts = name.split(".")
        for i in range(2, len(parts) + 1):
            places.setdefault(_word(parts[i - 1]), set()).add(".".join(parts[:i]))
    return {w: sorted(p) for w, p in sorted(places.items()) if len(p) > 1}


def test_no_two_modules_share_a_name():
    assert name_twins(list(modules())) == {}


def test_name_twins_are_found():
    found = name_twins(
        [
            "replaygate.a.views",
            "replaygate.b.views.page",
            "replaygate.a.capability",
            "replaygate.b.capabilities",
            "replaygate.a.status",
            "replaygate.b.x",
        ]
    )
    assert found == {
        "capability": ["replaygate.a.capability", "replaygate.b.capabilities"],
        "view": ["replaygate.a.views", "replaygate.b.views"],
    }


# A short name says one thing too: `st` is Streamlit (`import streamlit as st`) and nothing
# else. It once also named a gate's status, a stage, a staged file, a file's stat, a
# statement, a stream id bound to SQL and the simulator's clock.
ST_STREAMLIT = "st"


def st_misuses(name: str, source: str) -> list[str]:
    """Where a module's source uses `st` for anything but the Streamlit module."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.alias) and node.asname == ST_STREAMLIT:
            if node.name != "streamlit":
                out.append(f"{name}:{node.lineno} imports {node.name} as st")
        elif isinstance(node, ast.Name) and node.id == ST_STREAMLIT:
            if not isinstance(node.ctx, ast.Load):
                out.append(f"{name}:{node.lineno} assigns st")
        elif isinstance(node, ast.arg) and node.arg == ST_STREAMLIT:
            out.append(f"{name}:{node.lineno} takes an argument st")
        elif isinstance(node, ast.Attribute) and node.attr == ST_STREAMLIT:
            out.append(f"{name}:{node.lineno} has an attribute st")
        elif isinstance(node, ast.keyword) and node.arg == ST_STREAMLIT:
            out.append(f"{name}:{node.lineno} passes st=")
    streamlit = any(
        isinstance(n, ast.alias) and n.name == "streamlit" and n.asname == ST_STREAMLIT
        for n in ast.walk(tree)
    )
    if not streamlit:
        out += [
            f"{name}:{n.lineno} reads st"
            for n in ast.walk(tree)
            if isinstance(n, ast.Name) and n.id == ST_STREAMLIT and isinstance(n.ctx, ast.Load)
        ]
    return sorted(out, key=lambda w: int(w.split(":")[1].split()[0]))


def test_st_names_streamlit_and_nothing_else():
    wrong = [w for name, path in modules().items() for w in st_misuses(name, path.read_text())]
    sql = ROOT / "queries" / "sql"
    wrong += [
        f"{p.relative_to(ROOT)} binds $st"
        for p in sorted(sql.rglob("*.sql"))
        if re.search(r"\$st\b", p.read_text())
    ]
    assert wrong == []


def test_st_misuses_are_found():
    assert st_misuses("ui", "import streamlit as st\nst.write(1)\n") == []
    found = st_misuses(
        "m",
        "import os as st\nst = 1\ndef f(st): return st\nx.st = 2\nf(st=3)\n",
    )
    assert found == [
        "m:1 imports os as st",
        "m:2 assigns st",
        "m:3 takes an argument st",
        "m:3 reads st",
        "m:4 has an attribute st",
        "m:5 passes st=",
    ]


# `kind`, in the analysis, the dashboard and the CLI, is a gate's kind (`Gate.kind`, one of
# `gatedefs.KINDS`) and nothing else: no variable or argument is named so. It once also
# named a folder of queries, an operator's action, the inspector's subject, a download's
# file type and an event's kind (the contract's field keeps its name in the data).
KIND_PACKAGES = ("replaygate.queries", "replaygate.dashboard", "cli")


def kind_misuses(name: str, source: str) -> list[str]:
    """Where a module names a variable or an argument `kind` (a class's field `kind: Kind`,
    the gate's, is the one allowed)."""
    tree = ast.parse(source)
    fields = {
        id(node.target)
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.AnnAssign) and ast.unparse(node.annotation) == "Kind"
    }
    return [
        f"{name}:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "kind" and id(node) not in fields)
        or (isinstance(node, ast.arg) and node.arg == "kind")
    ]


def test_kind_names_a_gates_kind_and_nothing_else():
    wrong = [
        w
        for name, path in modules().items()
        if floor(name)[1] in KIND_PACKAGES
        for w in kind_misuses(name, path.read_text())
    ]
    assert wrong == []


def test_kind_misuses_are_found():
    gate = "class Gate:\n    kind: Kind\n\nGate(kind=1).kind\n"
    assert kind_misuses("g", gate) == []
    found = kind_misuses("m", "def f(kind):\n    return kind\nfor kind in x: pass\n")
    assert sorted(found) == ["m:1", "m:2", "m:3"]


def test_no_floor_imports_one_above_it_or_beside_it():
    wrong = []
    for module, targets in import_graph().items():
        level, part = floor(module)
        for t in sorted(targets):
            t_level, t_part = floor(t)
            if t_level > level or (t_level == level and t_part != part):
                wrong.append(f"{module} ({part}) imports {t} ({t_part})")
    assert wrong == []


# The CLI and the dashboard reach the library (the core, ingest, the analysis, the audit
# trail: every floor below the facade) through one module, the facade: what they need of
# it the facade exports by name or thin function; a direct import of any other module
# below it fails here. The one exception: the separate engines and tools the CLI runs for
# commands of their own, imported only by the module of those commands (`simulate` and
# `--engine spark` in cli.py, `replaygate probe` in probe_cli.py; the Spark driver is the
# CLI under spark-submit). The dashboard imports none of them.
FACADE = "replaygate.api"
ENGINE_DOORS = {
    "replaygate.sim": {"replaygate.cli"},
    "replaygate.spark": {"replaygate.cli", "replaygate.spark.driver"},
    "replaygate.probe": {"replaygate.probe_cli"},
}


def facade_bypasses(graph: dict[str, set[str]]) -> list[str]:
    """Imports by the CLI or the dashboard of a module below the facade, other than an
    engine's by the CLI module of its commands."""
    wrong = []
    for module, targets in sorted(graph.items()):
        if floor(module)[1] not in ("cli", "replaygate.dashboard"):
            continue
        for t in sorted(targets):
            level, part = floor(t)
            if level >= FLOORS[FACADE] or module in ENGINE_DOORS.get(part, ()):
                continue
            wrong.append(f"{module} imports {t}")
    return wrong


def test_cli_and_dashboard_import_only_the_facade():
    graph = import_graph()
    assert facade_bypasses(graph) == []
    # the facade is what they do import, and each engine's door is used
    assert FACADE in graph["replaygate.cli"]
    assert FACADE in graph["replaygate.dashboard.views.findings"]
    for engine, doors in ENGINE_DOORS.items():
        assert {m for m in doors if any(t.startswith(engine) for t in graph[m])}, engine


def test_a_bypass_of_the_facade_is_found():
    below = {
        "replaygate.dashboard.ui": {"replaygate.queries.escape", FACADE},
        "replaygate.dashboard.data": {"replaygate.core.db"},
        "replaygate.watch": {"replaygate.audit.decisionlog", "replaygate.dashboard.report"},
        "replaygate.cli": {"replaygate", "replaygate.sim.faults", "replaygate.spark.runtime"},
        "replaygate.serve": {"replaygate.sim"},
        "replaygate.dashboard.app": {"replaygate.probe.run"},
        "replaygate.queries.runner": {"replaygate.core.db"},
    }
    assert facade_bypasses(below) == [
        "replaygate.cli imports replaygate",
        "replaygate.dashboard.app imports replaygate.probe.run",
        "replaygate.dashboard.data imports replaygate.core.db",
        "replaygate.dashboard.ui imports replaygate.queries.escape",
        "replaygate.serve imports replaygate.sim",
        "replaygate.watch imports replaygate.audit.decisionlog",
    ]


def test_a_package_passed_through_is_not_imported_from():
    graph = import_graph()
    # `from replaygate import api` imports the facade, not the version beside it
    assert "replaygate" not in graph["replaygate.dashboard.figures"]
    assert "replaygate" in graph["replaygate.api"]  # `from replaygate import __version__`


def _strict_patterns() -> list[str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [
        m
        for o in conf["tool"]["mypy"]["overrides"]
        if o.get("disallow_untyped_defs")
        for m in o["module"]
    ]


def _strict(module: str, patterns: list[str]) -> bool:
    # mypy's override patterns: a name, or `pkg.*` for the package and all below it
    return any(
        module == p or (p.endswith(".*") and (module + ".").startswith(p[:-1])) for p in patterns
    )


def test_the_cli_ingest_and_analysis_are_type_checked_strictly():
    """CONTRIBUTING.md: mypy is strict for ingest, queries and the CLI; a new module of
    theirs is strict from its first line, not when someone remembers to list it."""
    patterns = _strict_patterns()
    loose = [
        m
        for m in modules()
        if floor(m)[1]
        in ("cli", "replaygate.ingest", "replaygate.queries", "replaygate.audit", FACADE)
        and m not in CLI_MODULES
        and not _strict(m, patterns)
    ]
    assert loose == []
    # The audit trail is strict too: its history, attestation and report document are the
    # `audit` package, its renderers beside the dashboard, its commands in the CLI.
    audit = [
        "replaygate.audit.decisionlog",
        "replaygate.audit.attest",
        "replaygate.audit.reportdoc",
        "replaygate.dashboard.report",
        "replaygate.dashboard.bundle",
        "replaygate.dashboard.history",
        "replaygate.audit_cli",
    ]
    assert set(audit) <= set(modules())
    assert [m for m in audit if not _strict(m, patterns)] == []
    assert [
        m for m in modules() if floor(m)[1] == "replaygate.audit" and not _strict(m, patterns)
    ] == []
    assert _strict(FACADE, patterns)
    assert _strict("replaygate.audit.attest", ["replaygate.audit.*"])
    assert not _strict("replaygate.watch", ["replaygate.cli", "replaygate.queries.*"])


# The audit trail's modules in the dashboard's folder: the report's renderers, the bundle
# and the decision history's page; the rest of it (decisionlog, attest, outputs,
# reportdoc) is the `audit` package, strict as a whole.
AUDIT_MODULES = ("replaygate.dashboard.report", "replaygate.dashboard.bundle",
                 "replaygate.dashboard.history")  # fmt: skip


def test_the_audit_trail_is_type_checked_strictly():
    """mypy strict covers the analysis and audit packages: the audit trail's modules, and
    every module of the package the report's renderers import, at any depth (its charts
    too: a report is rendered without the dashboard's UI)."""
    patterns, graph = _strict_patterns(), import_graph()
    seen, todo = set(), ["replaygate.dashboard.report"]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    shown = seen | set(AUDIT_MODULES)
    assert [m for m in sorted(shown) if floor(m)[0] > 0 and not _strict(m, patterns)] == []


# The load: ingest/load.py runs the batches, and each part of the loader lives in a module
# of its own (file discovery, the staging area, what to stage, the readers, quarantine,
# the transaction's writes, the report), each read in one sitting. Before, load.py was
# 1,095 lines, most of them one class. LOAD_SHARES: what the parts use of the rest of
# `ingest`, which other floors use too.
LOAD_PARTS = {
    "load",
    "discovery",
    "results",
    "stagearea",
    "stageplan",
    "stagereads",
    "quarantine",
    "commit",
}
LOAD_SHARES = {
    "adapters",
    "capabilities",
    "identity",
    "pieces",
    "readers",
    "redact",
    "staging",
    "validate",
}
PART_LINES = 400


def _ingest_module(name: str) -> str:
    return f"replaygate.ingest.{name}"


def test_the_load_is_made_of_parts_each_read_in_one_sitting():
    from replaygate.ingest import load

    mods = modules()
    long = {
        p: n
        for p in sorted(LOAD_PARTS)
        if (n := len(mods[_ingest_module(p)].read_text().splitlines())) > PART_LINES
    }
    assert long == {}, f"over {PART_LINES} lines: split by responsibility"
    # every class the loader is made of is in a part
    made_of = {c.__module__ for c in load._Loader.__mro__ if c.__module__ != "builtins"}
    assert made_of <= {_ingest_module(p) for p in LOAD_PARTS}
    assert len(made_of) >= 5
    # a module split out of a part is a part (or one of the modules it shares)
    graph = import_graph()
    known = {_ingest_module(p) for p in LOAD_PARTS | LOAD_SHARES} | {"replaygate.ingest"}
    stray = {
        f"{_ingest_module(p)} imports {t}"
        for p in LOAD_PARTS
        for t in graph[_ingest_module(p)]
        if t.startswith("replaygate.ingest") and t not in known
    }
    assert stray == set()


def floors_shown(text: str) -> dict[str, int]:
    """The floors of CONTRIBUTING.md's floor plan table, by the package each row names
    (a folder by the name it installs under; `replaygate/` is the CLI)."""
    folders = {f"{d}/": pkg for pkg, d in ((p, d.name) for p, d in _package_dirs().items())}
    files = {"replaygate/__init__.py": "replaygate", "replaygate/api.py": FACADE}
    shown = {}
    for level, packages in re.findall(r"^\| (\d+) \| ([^|]+) \|", text, re.M):
        for path in re.findall(r"`([^`]+)`", packages.split(" (")[0]):
            part = files.get(path) or ("cli" if path == "replaygate/" else folders[path])
            shown[part] = int(level)
    return shown


def test_contributing_shows_the_floors_the_test_holds():
    assert floors_shown((ROOT / "CONTRIBUTING.md").read_text()) == FLOORS
    table = "| 2 | `queries/` | analysis |\n| 1 | `ingest/`, `probe/` | core |\n"
    assert floors_shown(table) == {"replaygate.queries": 2, "replaygate.ingest": 1,
                                   "replaygate.probe": 1}  # fmt: skip
