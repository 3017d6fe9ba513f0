"""Progress on standard error for long ingests (rich), silent when not a terminal."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


class RichProgress:
    def __init__(self) -> None:
        self.console = Console(stderr=True)
        self.enabled = sys.stderr.isatty()
        self.bar: Progress | None = None
        self.task = None

    def start(self, total_bytes: int, n_files: int) -> None:
        if not self.enabled:
            if total_bytes > 100_000_000:
                self.console.print(f"reading {n_files} files, {total_bytes / 1e6:,.0f} MB ...")
            return
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task(f"reading {n_files} files", total=total_bytes)

    def file_started(self, name: str, size: int) -> None:
        if self.bar:
            self.bar.update(self.task, description=name[:40])

    def file_done(self, size: int) -> None:
        if self.bar:
            self.bar.advance(self.task, size)

    def stop(self) -> None:
        if self.bar:
            self.bar.update(self.task, description="loading")
            self.bar.stop()
            self.bar = None
