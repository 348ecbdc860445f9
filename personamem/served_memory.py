"""What learning from a store's own traffic needs of a memory: its store, its pipelines, its trials.

:class:`ServedMemory` is a protocol that :class:`~personamem.memory.PersonaMem` satisfies. The
improve trainer (``trainers/adapter/improve.py``) takes it rather than the facade, because the
facade reaches that trainer (``PersonaMem.improve``): were the trainer to import the facade back,
the two would form an import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from personamem.pipeline import Pipeline, PipelineConfig
    from personamem.store import Store
    from personamem.trials import Trials

__all__ = ["ServedMemory"]


class ServedMemory(Protocol):
    """A memory that serves pipelines over a store and logs its calls."""

    @property
    def store(self) -> Store:
        """The store the memory reads and writes (a tenant's view where the memory is one)."""
        ...

    @property
    def config(self) -> PipelineConfig:
        """The pipeline served to calls that name no method."""
        ...

    @property
    def trials(self) -> Trials:
        """The store's trials of candidate pipelines on live traffic."""
        ...

    def pipeline(self, method: PipelineConfig | str | None = None) -> Pipeline:
        """The pipeline a call with ``method`` runs (None: :attr:`config`)."""
        ...
