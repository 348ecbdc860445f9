"""``PersonaMem.improve``: the SDK's one door into the trainers.

A base of :class:`~personamem.memory.PersonaMem`, apart so that the facade's own module imports no
trainer: the improve trainer is imported when ``improve`` is called, and only here (a test pins it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.served_memory import ServedMemory
    from personamem.trainers.adapter.improve import ImproveResult

__all__ = ["Improving"]


class Improving:
    """Fitting the first stage to a memory's own store, from its logged traffic."""

    def improve(self, *, progress: Progress | None = None, **settings: Any) -> ImproveResult:
        """Fit the first stage to this store and put it live in the store only if it validates better.

        The SDK's door to ``personamem improve`` (keyword settings as its options, e.g.
        ``max_synthetic=600``; ``progress`` shows its steps); on success every process that serves
        the store's live pipeline (this one included, unless it was opened with ``pipeline=``) serves
        the new one. Returns the :class:`~personamem.trainers.adapter.improve.ImproveResult`.

        Raises:
            InsufficientDataError: too few users or questions (the message gives the counts).
        """
        from personamem.trainers.adapter.config import ImproveConfig
        from personamem.trainers.adapter.improve import improve

        return improve(cast("ServedMemory", self), ImproveConfig(**settings), progress=progress)
