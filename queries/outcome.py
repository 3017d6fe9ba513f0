"""What a gate and a stage come to: `Status` (a gate's reading) and `Decision` (a stage's
recommendation), each with its order and the codes the CLI and the HTTP service answer
with. Every surface takes them from here, so the set, its order and its codes are written
once."""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """A gate's reading of a stage. The values are what JSON, JUnit and reports carry."""

    PASS = "pass"
    FAIL = "fail"
    INSUFFICIENT = "insufficient"
    NOT_APPLICABLE = "not_applicable"


class Decision(StrEnum):
    """A stage's recommendation, mildest first. `exit_code`: `replaygate gates`;
    `http_code`: `replaygate serve`."""

    PROCEED = "PROCEED"
    HOLD = "HOLD"
    ROLLBACK = "ROLLBACK"

    @property
    def rank(self) -> int:
        return list(Decision).index(self)

    @property
    def exit_code(self) -> int:
        return {Decision.PROCEED: 0, Decision.HOLD: 2, Decision.ROLLBACK: 3}[self]

    @property
    def http_code(self) -> int:
        return {Decision.PROCEED: 200, Decision.HOLD: 409, Decision.ROLLBACK: 412}[self]

    @classmethod
    def of(cls, statuses: list[Status]) -> Decision:
        """A stage's decision from its gates: any failing gate rolls back; any gate that
        could not judge holds; else proceed."""
        if Status.FAIL in statuses:
            return cls.ROLLBACK
        return cls.HOLD if Status.INSUFFICIENT in statuses else cls.PROCEED

    @classmethod
    def worst(cls, decisions: list[str]) -> Decision:
        """The most severe of several stages' decisions; HOLD for none (nothing to gate is
        never a pass)."""
        return max((cls(d) for d in decisions), key=lambda d: d.rank, default=cls.HOLD)


class Severity(StrEnum):
    """How bad a finding is, worst first (a detector's `-- severity:` header names its own)."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"

    @property
    def rank(self) -> int:
        return list(Severity).index(self)
