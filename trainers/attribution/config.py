"""Answer attribution's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train attribution``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from personamem.datasets import BenchmarkName, dataset
from personamem.trainers.run import TrainerRun

__all__ = ["AttributionDataConfig", "AttributionRunConfig", "AttributionTrainConfig"]


class AttributionDataConfig(BaseModel):
    """Which benchmarks' reference answers and gold evidence teach attribution, and who is held out."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    benchmark: tuple[BenchmarkName, ...] = (BenchmarkName("locomo"), BenchmarkName("personabench"))
    """Benchmarks whose questions carry a reference answer and gold records (repeatable)."""
    data_root: Path | None = None
    """The folder holding the benchmarks in the shared data's layout (locomo/, personabench/, ...)."""
    served: int = Field(default=10, ge=1)
    """Records served per question (the default pipeline's top k), among which the answer is attributed."""
    test_share: float = Field(default=0.4, gt=0, lt=1)
    """Share of each benchmark's users held out for testing (never fitted on)."""
    validation_share: float = Field(default=0.15, gt=0, lt=1)
    """Share of each benchmark's users that choose the threshold."""
    split_seed: int = 0
    """Seeds which users are held out (the shipped adapter's and ranker's split at 0)."""

    def folder(self, benchmark: BenchmarkName) -> Path:
        """Where ``benchmark``'s data lies.

        Raises:
            ValueError: no --data-root.
        """
        if self.data_root is None:
            raise ValueError(
                "give --data-root: the folder holding the benchmarks (locomo/, personabench/...)"
            )
        return self.data_root / str(dataset(benchmark).folder)


class AttributionTrainConfig(BaseModel):
    """The logistic fit and how its threshold is chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    precision: float = Field(default=0.8, gt=0, lt=1)
    """The validation precision the threshold must reach; the lowest such threshold (most recall) is kept."""
    l2: float = Field(default=1.0, ge=0)
    """L2 penalty on the weights (not the bias)."""


class AttributionRunConfig(TrainerRun):
    """A ``personamem train attribution`` run."""

    data: AttributionDataConfig = AttributionDataConfig()
    train: AttributionTrainConfig = AttributionTrainConfig()
    out_dir: Path = Field(default=Path("runs/attribution"), alias="out")
    """The folder for attribution.json (copy it over personamem/data/attribution.json to ship it)."""
