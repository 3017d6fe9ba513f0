"""The field guide: for every detector, the failure it catches as seen in real MCP
deployments, what it looks like in the dashboard and the usual fix.

Everything comes from the detectors' SQL headers (`failure`, `reports`, `dashboard`,
`fix`, next to `invariant`, `severity`, `unit`); docs/field-guide.md is rendered from
them (`python -m replaygate.queries.fieldguide`) and a test keeps the two in step. The
dashboard and the audit report link each finding to its detector's entry.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from . import catalog
from .gatedefs import GATES

DOC = "docs/field-guide.md"
FIELDS = ("failure", "reports", "dashboard", "fix")

HEADER = """# Field guide

Generated from the detectors' SQL headers (`queries/sql/detectors/*.sql`) by
`python -m replaygate.queries.fieldguide`; a test fails if this file and the headers
disagree. For every detector: the failure it catches as it shows up in real MCP
deployments (public reports where there are some), what it looks like in the dashboard,
and the usual fix. Every finding in the dashboard (the *guide* column) and in the audit
report links to its detector's entry. What each detector decides, exactly, is in
[detectors.md](detectors.md).
"""


def anchor(detector: str) -> str:
    """The entry's anchor in docs/field-guide.md (the heading is the bare name)."""
    return detector


def link(detector: str) -> str:
    return f"{DOC}#{anchor(detector)}"


def gates_of(detector: str) -> list[str]:
    return [g.id for g in GATES if detector in g.detectors]


def entry(detector: str) -> dict[str, Any]:
    """One detector's guide entry, from its header."""
    q = catalog.detectors()[detector]
    h = q.header
    return {
        "detector": detector,
        "invariant": q.invariant,
        "severity": h.get("severity", ""),
        "unit": h.get("unit", ""),
        "needs": list(q.needs),
        "gates": gates_of(detector),
        **{k: h.get(k, "") for k in FIELDS},
    }


def entries() -> list[dict[str, Any]]:
    return [entry(name) for name in sorted(catalog.detectors())]


def entry_markdown(e: dict[str, Any], heading: str = "##") -> str:
    gates = ", ".join(f"`{g}`" for g in e["gates"]) or "none"
    out = [
        f"{heading} `{e['detector']}`",
        "",
        f"*{e['severity']}* · one finding per {e['unit']} · needs "
        + ", ".join(f"`{n}`" for n in e["needs"])
        + f" · gate: {gates}",
        "",
        f"- **Invariant:** {e['invariant']}",
        f"- **Seen in the field:** {e['failure']}",
    ]
    if e["reports"]:
        out.append(f"- **Public reports:** {e['reports']}")
    out += [
        f"- **In the dashboard:** {e['dashboard']}",
        f"- **Usual fix:** {e['fix']}",
    ]
    return "\n".join(out)


def render() -> str:
    items = entries()
    out = [HEADER, "| detector | severity | gate | public reports |", "|---|---|---|---|"]
    for e in items:
        gates = ", ".join(f"`{g}`" for g in e["gates"]) or "—"
        out.append(
            f"| [`{e['detector']}`](#{anchor(e['detector'])}) | {e['severity']} | {gates} | "
            f"{e['reports'] or '—'} |"
        )
    for e in items:
        out += ["", entry_markdown(e)]
    return "\n".join(out) + "\n"


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(DOC)
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
