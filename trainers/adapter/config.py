"""The query adapter's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train adapter`` (options are built from
these models, see :mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from personamem.datasets import BenchmarkName, HeldOutBenchmarks, TrafficSource
from personamem.trainers.run import TrainerRun

__all__ = ["AdapterDataConfig", "AdapterRunConfig", "AdapterTrainConfig", "ImproveConfig"]


class AdapterDataConfig(TrafficSource, HeldOutBenchmarks):
    """Where the queries come from: benchmarks' gold labels, or a store (synthetic queries, feedback)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    benchmark: tuple[BenchmarkName, ...] = ()
    """Benchmarks whose training users' questions and gold records train the adapter (repeatable;
    every one's held-out users are named in split.json)."""
    validation_share: float = Field(default=0.15, ge=0, lt=1)
    """Share of each benchmark's users that choose the checkpoint (0: none; the last step is kept)."""
    labels: Literal["gold", "synthetic"] = "gold"
    """With --benchmark: train on its gold labels, or label-free on questions the LLM writes for the
    training users' records (as --from-store does), to compare the two on the same held-out users."""
    consistency_k: int = Field(default=20, ge=1)
    """Keep a synthetic question only if the base encoder ranks its record in the user's top k for it."""
    synthetic_per_user: int = Field(default=32, ge=1)
    """--from-store: records per user that the LLM writes a question for (label-free training)."""
    max_synthetic: int = Field(default=1200, ge=1)
    """--from-store: most synthetic questions in all (they cost an LLM call each; cached in the store)."""
    llm: str = "smollm2-135m"
    """--from-store: the LLM that writes synthetic questions."""


class AdapterTrainConfig(BaseModel):
    """Optimization settings of the in-user softmax InfoNCE fit."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    steps: int = Field(default=400, ge=1)
    """Optimizer steps in all (a resumed run continues up to this many)."""
    batch_size: int = Field(default=64, ge=1)
    """Queries per step, shared equally between the sources."""
    lr: float = Field(default=3e-4, gt=0)
    """Adam's learning rate."""
    temperature: float = Field(default=0.05, gt=0)
    """τ of the softmax over a user's records."""
    anchor: float = Field(default=0.0, ge=0)
    """Weight of the squared distance of the weights from where they started (the identity, or
    --init)."""
    init: str | None = None
    """Start from this adapter (a shipped name or a folder) instead of the identity."""
    validate_every: int = Field(default=25, ge=1)
    """Steps between validations (and saved state)."""
    k: int = Field(default=10, ge=1)
    """Validation scores recall@k."""
    seed: int = 0
    """Seeds the batch draws."""


class AdapterRunConfig(TrainerRun):
    """A ``personamem train adapter`` run."""

    data: AdapterDataConfig
    train: AdapterTrainConfig = AdapterTrainConfig()
    out_dir: Path = Field(default=Path("runs/adapter"), alias="out")
    """The adapter folder (adapter.npy, adapter.json, split-*.json)."""


class ImproveConfig(BaseModel):
    """What ``personamem improve`` learns from and how much it may spend."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    validation_share: float = Field(default=0.2, gt=0, lt=1)
    """Share of the users whose questions decide whether the candidate goes live (never trained on)."""
    min_users: int = Field(default=4, ge=2)
    """Fewer users with records than this: refuse (a split would test on one or two people)."""
    min_train_questions: int = Field(default=32, ge=1)
    """Fewer training questions than this: refuse."""
    min_validation_questions: int = Field(default=10, ge=1)
    """Fewer validation questions than this: refuse (the decision would be a coin toss)."""
    min_feedback: int = Field(default=50, ge=1)
    """Logged calls whose feedback names the records used; with at least this many, they are the labels
    instead of synthetic questions."""
    max_synthetic: int = Field(default=1200, ge=1)
    """Most synthetic questions in all (one LLM call each, cached in the store)."""
    synthetic_per_user: int = Field(default=200, ge=1)
    """Most records per user that the LLM writes a question for (the budget is spread evenly over the
    users: a store of few users with long histories gets many questions per user)."""
    consistency_k: int = Field(default=20, ge=1)
    """Keep a synthetic question only if the base encoder ranks its record in the user's top k."""
    llm: str = "smollm2-135m"
    """The LLM that writes synthetic questions."""
    weights: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    """Hybrid's dense weights tried (1.0: dense alone)."""
    tune_share: float = Field(default=0.25, gt=0, lt=1)
    """Share of the training users left out of the adapter's fit to choose the dense weight on."""
    max_weight_questions: int = Field(default=300, ge=1)
    """Most questions the dense weight is chosen on (each weight searches each once)."""
    steps: int = Field(default=400, ge=1)
    """Adapter optimizer steps."""
    ranker_rounds: int = Field(default=60, ge=10)
    """Most trees added to the live ranker (their number, zero included, is chosen in steps of 10 on
    training users the fit did not see)."""
    synthetic_live: bool = False
    """Let a candidate learned and validated on synthetic questions go live. Off: on LoCoMo's
    held-out users, candidates that validated better on synthetic questions lost on the real ones
    (SmolLM2's questions: recall@10 0.737 to 0.679; Qwen2.5-Coder-0.5B's: 0.737 to 0.710), so
    without feedback improve reports and keeps the live pipeline (docs/RESULTS.md)."""
    max_p: float = Field(default=0.05, gt=0, le=1)
    """With ``synthetic_live``, the candidate also needs a one-sided sign test over the validation
    questions it changed (better against worse) below this."""
    go_live: Literal["trial", "now"] = "trial"
    """What a candidate that validates better does: ``trial`` serves it interleaved with the live
    pipeline on ``trial_share`` of the calls, and it goes live when the answers there prefer it by a
    sign test (``personamem/trials.py``; offline validation favours the pipeline that served the
    feedback); ``now`` puts it live at once."""
    trial_share: float = Field(default=0.1, gt=0, le=1)
    """Share of calls served interleaved while the candidate is on trial."""
    k: int = Field(default=10, ge=1)
    """The decision compares nDCG@k (feedback names records the live pipeline served, so its recall@k
    on them is 1 by construction; their order is what a candidate can improve)."""
    seed: int = 0
    """Seeds the user split, the sampled records and the fit."""
    adapters_dir: Path | None = None
    """Where fitted adapters and rankers are written (default: ``adapters`` in a local store's folder,
    else ``./personamem-adapters``); every process that serves the store must be able to read it."""
