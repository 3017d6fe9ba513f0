"""The dashboard's one filter model: stage (or the baseline sessions), protocol revisions,
server instances, clients and a time range.

It is bound into every dashboard query as one STRUCT parameter `$flt` and applied there by
one SQL predicate (`rg_keep` in queries/sql/facts/gate_facts.sql), so a filter means the
same on every figure, table and metric.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

# The filter dimensions a named query can honour (its `-- filters:` header).
DIMENSIONS = ("stage", "revision", "server", "client", "time")


@dataclass(frozen=True)
class Filters:
    stage: str | None = None
    revisions: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    # Sessions outside every cohort (the baseline) instead of a stage.
    baseline: bool = False

    def with_(self, **kw: Any) -> Filters:
        return replace(self, **kw)

    def active(self) -> tuple[str, ...]:
        """The dimensions this filter restricts."""
        on = {
            "stage": self.stage is not None or self.baseline,
            "revision": bool(self.revisions),
            "server": bool(self.servers),
            "client": bool(self.clients),
            "time": self.start is not None or self.end is not None,
        }
        return tuple(d for d in DIMENSIONS if on[d])

    def param(self) -> dict[str, Any]:
        """The `$flt` STRUCT."""
        return {
            "stage": self.stage,
            "baseline": self.baseline,
            "revs": list(self.revisions),
            "servers": list(self.servers),
            "clients": list(self.clients),
            "t_from": self.start,
            "t_to": self.end,
        }
