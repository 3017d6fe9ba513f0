"""What an ingest reports: a result per file, the run's report, and its progress.

The CLI, `watch` and the tests read these; the load (`load.py`) fills them. A file's
result counts what was read of it this time, so that rows + quarantined + blank = lines
can be checked; the report adds the reasons rows were quarantined for, by class, and
warnings that concern a whole file.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import adapters, readers


@dataclass
class FileResult:
    path: str
    status: str  # loaded | appended | replaced | unchanged | duplicate | waiting | unreadable
    rows: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    note: str = ""
    facts: dict[str, Any] | None = None  # a proxy log: the facts it can show and those it cannot
    # What was read this time, so that rows + quarantined + blank = lines can be checked:
    # a format whose rows are its lines: lines (a gzip stream's break is one); one of
    # data rows (readers.Format.row_positions): data rows.
    lines: int | None = None
    blank: int = 0


@dataclass
class IngestReport:
    files: list[FileResult] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    quarantine_reasons: Counter[str] = field(default_factory=Counter)

    def rows_by_type(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for f in self.files:
            total.update(f.rows)
        return dict(total)

    @property
    def quarantined(self) -> int:
        return sum(f.quarantined for f in self.files)

    def as_dict(self) -> dict[str, Any]:
        """The report as `ingest --json` prints it (without the findings of an analysis
        after the load, which the CLI adds)."""
        return {
            "files": [
                {
                    "path": f.path,
                    "status": f.status,
                    "rows": f.rows,
                    "quarantined": f.quarantined,
                    "blank": f.blank,
                    "lines": f.lines,
                    "note": f.note or None,
                    **({"facts": f.facts} if f.facts is not None else {}),
                }
                for f in self.files
            ],
            "rows_loaded": self.rows_by_type(),
            "rows_quarantined": self.quarantined,
            "quarantine_reasons": dict(self.quarantine_reasons.most_common()),
            "skipped": self.skipped,
            "warnings": self.warnings,
        }


class Progress(Protocol):
    """What an ingest reports its progress to (NullProgress: nothing)."""

    def start(self, total_bytes: int, n_files: int) -> None: ...
    def file_started(self, name: str, size: int, poll: Callable[[], Any] | None = None) -> None: ...
    def file_done(self, size: int) -> None: ...
    def stop(self) -> None: ...


class NullProgress:
    def start(self, total_bytes: int, n_files: int) -> None: ...
    def file_started(self, name: str, size: int, poll: Callable[[], Any] | None = None) -> None: ...
    def file_done(self, size: int) -> None: ...
    def stop(self) -> None: ...


def unreadable(exc: BaseException) -> str:
    """A file's note when it cannot be read: DuckDB's message can quote file content,
    so only the exception's class is kept."""
    return f"unreadable file ({type(exc).__name__})"


def reason_class(reason: str) -> str:
    """Group reasons for the summary (line numbers inside a reason are not a class)."""
    if " (a quote left open" in reason and reason.endswith(" one row)"):
        return reason.split(" (a quote left open")[0]
    return reason.split(":")[0] if reason.startswith(("truncated gzip", "corrupt gzip")) else reason


# A plain-text access log line (the `combined`/`common` format that web servers and
# proxies write by default): `addr ident user [time] "request" ...`.
_ACCESS_LOG_LINE = re.compile(r'^\S+ \S+ \S+ \[[^\]]+\] "')


def plain_text_log_hint(f: FileResult) -> str | None:
    """One line when a file's rows were quarantined because it is a plain-text access
    log: the proxy writes its default format, not the JSON one replaygate reads. Read
    once per such file (its first line), never per row."""
    if f.status == "unreadable" or not f.quarantined or f.quarantined * 2 < (f.lines or 0):
        return None
    opener = gzip.open if f.path.lower().endswith(readers.GZ) else open
    try:
        with opener(f.path, "rt", encoding="utf-8", errors="replace") as fh:
            first = next((line for line in fh if line.strip()), "")
    except (OSError, EOFError, zlib.error):
        # A hint is no reason to fail: the file's own result already says what happened.
        return None
    if not _ACCESS_LOG_LINE.match(first):
        return None
    return (
        f"{f.path}: its lines are a plain-text access log (the default `combined` "
        "format), not JSON: configure the JSON log format docs/sources.md gives for "
        f"your proxy ({adapters.titles()}) and ingest the new log"
    )
