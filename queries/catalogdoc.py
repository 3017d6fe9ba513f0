"""Render docs/catalogue.md from the SQL headers of the detectors and gates
(`python -m replaygate.queries.catalogdoc`); a test fails when the two disagree."""

from __future__ import annotations

import sys
from pathlib import Path

from . import catalog
from .gatedefs import GATES

HEADER = """# Detector and gate catalogue

Generated from the headers of `queries/sql/detectors/*.sql` and `queries/sql/gates/*.sql`
by `python -m replaygate.queries.catalogdoc`; a test fails if this page and the SQL disagree.
How each rule is read is in [detectors.md](detectors.md).
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    out = [HEADER, "## Detectors", ""]
    out += ["| detector | severity | one per | invariant | reads |", "|---|---|---|---|---|"]
    for name, q in catalog.detectors().items():
        out.append(
            f"| `{name}` | {', '.join(q.severities)} | {_cell(q.header.text('unit'))} "
            f"| {_cell(q.invariant)} | {', '.join(n.replace('|', ' or ') for n in q.needs)} |"
        )
    out += ["", "## Gates", ""]
    out += [
        "| gate | title | measure | detectors | minimum sample | scopes |",
        "|---|---|---|---|---|---|",
    ]
    for g in GATES:
        out.append(
            f"| `{g.id}` | {g.title} | {g.kind} of {g.failure_noun} over {g.sample_noun} "
            f"| {', '.join(f'`{d}`' for d in g.detectors)} | {g.min_sample:,} "
            f"| {', '.join(g.scopes)} |"
        )
    return "\n".join(out) + "\n"


def main() -> None:
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/catalogue.md")
    target.write_text(render())


if __name__ == "__main__":
    main()
