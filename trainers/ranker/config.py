"""The learned ranker's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train ranker`` (options are built from
these models, see :mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from personamem.datasets import BenchmarkName, HeldOutBenchmarks
from personamem.pipeline.config import DEFAULT_ADAPTER
from personamem.trainers.ranker.shapes import SHAPES, shapes_named
from personamem.trainers.run import TrainerRun

__all__ = ["RankerDataConfig", "RankerRunConfig", "RankerTrainConfig"]


class RankerDataConfig(HeldOutBenchmarks):
    """Which benchmarks' gold labels train the ranker (their users held out as every trainer's)."""

    benchmark: tuple[BenchmarkName, ...] = (
        BenchmarkName("locomo"),
        BenchmarkName("personabench"),
        BenchmarkName("ikat"),
        BenchmarkName("prefeval"),
    )
    """Benchmarks whose training users' questions and gold records train the ranker (repeatable;
    each one's held-out users are named in split-<benchmark>.json)."""
    adapter: str = DEFAULT_ADAPTER
    """The query adapter whose vectors the features read: the pipeline's query_encoder
    adapter:<name> that the ranker will serve behind."""
    features_dir: Path | None = None
    """Where each benchmark's candidate features are cached, named by a digest of its records and
    questions, the encoder, the adapter and the feature code, so a rerun, another seed or another mix
    of benchmarks reuses them. [default: ranker-features in the user cache, beside the corpus
    vectors]"""


class RankerTrainConfig(BaseModel):
    """The LightGBM lambdarank fit and how its size is chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    alpha: tuple[float, ...] = (10.0, 30.0)
    """Weights of the default's fused score that the trees start from (repeatable): each is fitted,
    and validation keeps one with its number of trees."""
    rounds: int = Field(default=500, ge=1)
    """Boosting rounds per alpha; validation scores every 10th (and none: the default's order)."""
    seed: int = 0
    """Seeds LightGBM's row and feature sampling."""
    leave_one_out_seeds: int = Field(default=0, ge=0)
    """Judge the recipe on benchmarks it never saw: for each benchmark and each of this many seeds,
    an adapter and a ranker trained without it are scored on its held-out users; if the trees with
    their gate lose to the unranked default in any fold, the folder ships no trees (0: skip)."""
    leave_one_out_shapes: tuple[str, ...] = tuple(shape.name for shape in SHAPES)
    """Other readings of a left-out benchmark (prefeval-long: its chats whole, user and assistant),
    each scored by that benchmark's fold and judged as a fold of its own (repeatable)."""

    @field_validator("leave_one_out_shapes")
    @classmethod
    def _known_shapes(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        shapes_named(names)  # an unknown name fails here, naming those that exist
        return names

    leave_one_out_dir: Path | None = None
    """Where the folds' adapters, rankers and scores go, one fold and seed at a time (a rerun
    resumes), with leave-one-out.json and .md. [default: <out>-leave-one-out beside --out]"""


class RankerRunConfig(TrainerRun):
    """A ``personamem train ranker`` run."""

    data: RankerDataConfig = RankerDataConfig()
    train: RankerTrainConfig = RankerTrainConfig()
    out_dir: Path = Field(default=Path("runs/ranker"), alias="out")
    """The ranker folder (ranker.txt, ranker.json, split-*.json)."""
