"""The CLI's shared consoles and progress bar (results on stdout, progress and errors on stderr)."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

__all__ = ["LOG_EVERY_S", "err", "out", "progress_bar"]

out = Console()
err = Console(stderr=True)

LOG_EVERY_S = 30.0
"""Without a terminal, a task's progress line is printed at most this often (and when it finishes)."""


class _LoggedProgress(Progress):
    """Progress for a log file or a pipe: plain lines instead of a live bar, which only a terminal shows.

    A long run started by cron or a job runner would otherwise print nothing until it ends.
    """

    def __init__(self, *columns: Any, console: Console, every_s: float) -> None:
        super().__init__(*columns, console=console, disable=True)
        self._every_s = every_s
        self._said: dict[TaskID, float] = {}

    def update(self, task_id: TaskID, **fields: Any) -> None:
        super().update(task_id, **fields)
        self._say(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._say(task_id)

    def _say(self, task_id: TaskID) -> None:
        task = self._tasks[task_id]
        now = time.monotonic()
        if self._said.get(task_id) == float("inf"):  # its last line is out
            return
        if not task.finished and now - self._said.get(task_id, -self._every_s) < self._every_s:
            return
        self._said[task_id] = float("inf") if task.finished else now
        total = "" if task.total is None else f"/{task.total:g}"
        elapsed = timedelta(seconds=round(task.elapsed or 0.0))
        self.console.print(
            f"{task.description}: {task.completed:g}{total} ({elapsed})", markup=False, highlight=False
        )


def progress_bar(*, every_s: float = LOG_EVERY_S) -> Progress:
    """Progress on stderr, so piped results on stdout stay clean: a bar on a terminal, lines in a log."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    if err.is_terminal:
        return Progress(*columns, console=err)
    return _LoggedProgress(*columns, console=err, every_s=every_s)
