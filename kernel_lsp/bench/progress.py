"""A rich progress bar on stderr (stdout carries only the result tables). One line per finished task as well,
so a log of a non-interactive run (CI, nohup) shows what happened."""

from __future__ import annotations

import sys
import threading

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .metrics import TaskResult

_MARK = {"ran": "", "skipped": " (done before)", "missing": "", "error": " (will retry)"}


class BenchProgress:
    def __init__(self, total: int, title: str, console: Console | None = None) -> None:
        self.console = console or Console(file=sys.stderr, stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.fields[last]}"), console=self.console, transient=False,
        )
        self._id = self._progress.add_task(title, total=total, last="")
        self._lock = threading.Lock()

    def __enter__(self) -> BenchProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def note(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def done(self, result: TaskResult, how: str) -> None:
        speed = f" {result.speed()}" if result.speedup_eager else ""
        line = f"{result.task} [{result.strategy}]: {result.status}{speed}{_MARK.get(how, '')}"
        if result.status not in ("correct", "missing") and result.message:
            line += f" — {result.message[:120]}"
        with self._lock:
            self._progress.console.print(line, highlight=False, markup=False)
            self._progress.update(self._id, advance=1, last=f"{result.task}: {result.status}")
