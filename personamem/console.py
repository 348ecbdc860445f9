"""The CLI's shared consoles and progress bar (results on stdout, progress and errors on stderr)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

__all__ = ["err", "out", "progress_bar"]

out = Console()
err = Console(stderr=True)


def progress_bar() -> Progress:
    """Progress on stderr, so piped results on stdout stay clean."""
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
    )
