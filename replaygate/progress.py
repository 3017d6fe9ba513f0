"""Progress on standard error for long ingests (rich), silent when not a terminal."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


class RichProgress:
    def __init__(self) -> None:
        self.enabled = sys.stderr.isatty()
        self.bar: Progress | None = None
        self.task: TaskID  # set with the bar
        self.base = 0
        self._stop = threading.Event()
        self._poller: threading.Thread | None = None

    def start(self, total_bytes: int, n_files: int) -> None:
        if not self.enabled:
            if total_bytes > 100_000_000:
                sys.stderr.write(f"reading {n_files} files, {total_bytes / 1e6:,.0f} MB ...\n")
            return
        # rich only for a terminal: importing it costs about 0.1 CPU s, which every
        # `replaygate ingest` without one (a cron job, a load in batches: one run per
        # batch) would pay for nothing.
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task(f"reading {n_files} files", total=total_bytes)

    def file_started(self, name: str, size: int, poll: Callable[[], float] | None = None) -> None:
        if not self.bar:
            return
        self.bar.update(self.task, description=name[:40])
        if poll is not None and size > 50_000_000:
            # A big file is one long query: follow DuckDB's own progress through it.
            self._stop.clear()
            self._poller = threading.Thread(target=self._follow, args=(poll, size), daemon=True)
            self._poller.start()

    def _follow(self, poll: Callable[[], float], size: int) -> None:
        while not self._stop.wait(0.5):
            try:
                pct = poll()
            except Exception:  # noqa: BLE001 - progress is best effort
                return
            bar = self.bar
            if pct and pct > 0 and bar is not None:
                bar.update(self.task, completed=self.base + size * min(pct, 100) / 100)

    def file_done(self, size: int) -> None:
        if self._poller is not None:
            self._stop.set()
            self._poller.join()
            self._poller = None
        if self.bar:
            self.base += size
            self.bar.update(self.task, completed=self.base)

    def stop(self) -> None:
        if self.bar:
            self.bar.update(self.task, description="loading")
            self.bar.stop()
            self.bar = None
