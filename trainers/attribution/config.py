"""Answer attribution's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train attribution``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from personamem.datasets import BenchmarkName, HeldOutBenchmarks
from personamem.trainers.run import TrainerRun

__all__ = ["AttributionDataConfig", "AttributionRunConfig", "AttributionTrainConfig"]


class AttributionDataConfig(HeldOutBenchmarks):
    """Which benchmarks' reference answers and gold evidence teach attribution, users held out."""

    benchmark: tuple[BenchmarkName, ...] = (BenchmarkName("locomo"), BenchmarkName("personabench"))
    """Benchmarks whose questions carry a reference answer and gold records (repeatable)."""
    served: int = Field(default=10, ge=1)
    """Records served per question (the default pipeline's top k), among which the answer is attributed."""


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
