"""What a gate and a stage come to: `Status` (a gate's reading) and `Decision` (a stage's
recommendation), each with its order and the codes the CLI and the HTTP service answer
with, and `Severity` (a finding's). Every surface takes them from here, so the set, its
order, its codes and its `Tone` (which member is good news, a warning, bad news or
neither: the terminal's styles and the dashboard's colours both follow it) are written
once."""

from __future__ import annotations

from enum import StrEnum


class Tone(StrEnum):
    """How a surface colours an outcome: each surface maps the tones, not the members."""

    GOOD = "good"
    WARN = "warn"
    BAD = "bad"
    MUTED = "muted"


class _Ranked(StrEnum):
    """Members in order of declaration; `rank` is a member's place, `tone` how every
    surface colours it (`TONE`)."""

    @property
    def rank(self) -> int:
        return list(type(self)).index(self)

    @property
    def tone(self) -> Tone:
        return TONE[self]


class Status(_Ranked):
    """A gate's reading of a stage. The values are what JSON, JUnit and reports carry;
    `verdict` is the word a report and an attestation give it."""

    PASS = "pass"
    FAIL = "fail"
    INSUFFICIENT = "insufficient"
    NOT_APPLICABLE = "not_applicable"

    @property
    def verdict(self) -> str:
        return {
            Status.PASS: "PASSED",
            Status.INSUFFICIENT: "WARNED",
            Status.FAIL: "FAILED",
            Status.NOT_APPLICABLE: "SKIPPED",
        }[self]


class Decision(_Ranked):
    """A stage's recommendation, mildest first. `exit_code`: `replaygate gates`;
    `http_code`: `replaygate serve`."""

    PROCEED = "PROCEED"
    HOLD = "HOLD"
    ROLLBACK = "ROLLBACK"

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


class Severity(_Ranked):
    """How bad a finding is, worst first (a detector's `-- severity:` header names its own)."""

    CRITICAL = "critical"
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


# Every outcome's tone, in one table (the members' values are distinct across the enums).
TONE: dict[_Ranked, Tone] = {
    Status.PASS: Tone.GOOD,
    Status.FAIL: Tone.BAD,
    Status.INSUFFICIENT: Tone.WARN,
    Status.NOT_APPLICABLE: Tone.MUTED,
    Decision.PROCEED: Tone.GOOD,
    Decision.HOLD: Tone.WARN,
    Decision.ROLLBACK: Tone.BAD,
    Severity.CRITICAL: Tone.BAD,
    Severity.HIGH: Tone.BAD,
    Severity.MEDIUM: Tone.WARN,
    Severity.LOW: Tone.MUTED,
}
