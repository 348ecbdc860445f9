"""``PersonaMem.improve``'s door into the trainers.

Apart so that the facade's own module imports no trainer: the improve trainer is imported when
``improve`` is called, and only here (a test pins it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.served_memory import ServedMemory
    from personamem.trainers.adapter.improve import ImproveResult as ImproveResult

__all__ = ["improve_served"]


def improve_served(
    memory: ServedMemory, *, progress: Progress | None = None, **settings: Any
) -> ImproveResult:
    """Fit ``memory``'s first stage to its store from ``settings`` (``ImproveConfig``'s fields)."""
    from personamem.trainers.adapter.config import ImproveConfig
    from personamem.trainers.adapter.improve import improve as run

    return run(memory, ImproveConfig(**settings), progress=progress)
