"""PG-Ret's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train pgret`` (options are built from
these models, see :mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from personamem.eval.evaluate import BenchmarkName
from personamem.eval.judge import JudgeMode
from personamem.llm.load import REFERENCE_RUNTIME, Runtime
from personamem.trainers.pgret.reward import ItemReward
from personamem.trainers.traffic import TrafficSource

__all__ = ["VARIANT_REWARDS", "PGRetDataConfig", "PGRetTrainConfig", "Variant"]

Variant = Literal["conservative", "aggressive", "infonce"]

VARIANT_REWARDS: dict[str, ItemReward] = {
    # the paper's item-wise reward: only a relevant record the base model missed is worth selecting
    "aggressive": ItemReward(novel=1.0, known=0.0, irrelevant=-1.0),
    # still rewards what the base model already finds, so precision is held while novelty grows
    "conservative": ItemReward(novel=1.0, known=0.5, irrelevant=-1.0),
}
"""The two operating points as reward tables (our parameterization of the paper's two variants)."""


class PGRetDataConfig(TrafficSource):
    """Where the logged pairs come from, how users are split, and who judges relevance."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    benchmark: BenchmarkName | None = None
    """Benchmark whose questions and gold records are the logged (query, record) pairs (or train on
    traffic: --from-store)."""
    data: Path | None = None
    """The benchmark folder in its upstream layout."""
    noise: float = 0.0
    """PersonaBench distractor level."""
    novelty_depth: int = Field(default=20, ge=1)
    """L: a record in the base model's top L is not novel (20: the candidates the pipeline gives a
    profile selector, so a novel record is one the base first stage would not have offered at all)."""
    exploration_depth: int = Field(default=20, ge=1)
    """BM25 records per query in the exploration pool."""
    validation_users: int = Field(default=1, ge=1)
    """Users held out for validation (checkpoint choice)."""
    test_users: int = Field(default=2, ge=1)
    """Users held out for testing (never trained on; split.json names them)."""
    split_seed: int = 0
    """Seeds which users are held out; keep it fixed to compare training seeds."""
    max_train: int | None = Field(default=None, ge=1)
    """Train on an evenly spaced subset of this many queries (the same for every seed, so judge
    verdicts cached by one seed serve the next; default: every training query)."""
    max_validation: int = Field(default=64, ge=1)
    """Validation queries scored each time."""
    judge: str = "smollm2-135m"
    """The frozen LLM that judges relevance: smollm2-135m, qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a
    model folder."""
    judge_mode: JudgeMode = "query-likelihood"
    """How the judge is asked: query-likelihood (how much the record raises the question's
    log-likelihood; AUC 0.71 against LoCoMo gold with SmolLM2) or yes-no (P(Yes) vs P(No) to a
    relevance question; AUC 0.49 there)."""
    judge_runtime: Runtime = REFERENCE_RUNTIME
    """The engine that scores the judge: ctranslate2 (int8) or transformers (float32)."""
    judge_cache: Path | None = None
    """A JSON-lines file of judge verdicts kept across runs and seeds (default: <out>/../judge.jsonl)."""


class PGRetTrainConfig(BaseModel):
    """Policy-gradient settings (and the supervised InfoNCE baseline's, for ``variant = infonce``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    variant: Variant = "infonce"
    """infonce (supervised on the logged pairs; the default, because it beat both policy-gradient
    variants on held-out LoCoMo users in recall, novelty and judged precision), conservative
    (policy gradient; relevant records the base model finds still earn 0.5) or aggressive (the
    paper's item-wise reward: only novel relevant records earn)."""
    noisy_oracle: bool = False
    """Correct the judge's yes/no for its measured error rates (an unbiased reward for a judge that
    errs) instead of taking its verdict as the truth."""
    alpha: float = Field(default=0.5, ge=0, le=1)
    """Share of each query's pairs drawn from the current policy's top records."""
    beta: float = Field(default=0.3, ge=0, le=1)
    """Share drawn from the exploration retriever (BM25); the rest are logged gold pairs."""
    pairs_per_query: int = Field(default=8, ge=1)
    """(query, record) pairs sampled per query per step."""
    policy_depth: int = Field(default=10, ge=1)
    """The policy's top records that its pairs are drawn from."""
    batch_size: int = Field(default=8, ge=1)
    """Queries per step."""
    steps: int = Field(default=100, ge=1)
    """Optimizer steps in all (a resumed run continues up to this many)."""
    lr: float = Field(default=2e-5, gt=0)
    """AdamW's learning rate for the query tower."""
    temperature: float = Field(default=0.05, gt=0)
    """τ in π(select) = σ((cosine − the query's mean cosine over its sampled pairs) / τ)."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Maximum gradient norm."""
    validate_every: int = Field(default=25, ge=1)
    """Steps between validations (and checkpoints)."""
    k: int = Field(default=5, ge=1)
    """Top records scored in validation (and the k of the reported metrics)."""
    hard_negatives: int = Field(default=5, ge=0)
    """InfoNCE: non-gold records from the base top ranks added per pair as negatives."""
    epochs: float = Field(default=1.0, gt=0)
    """InfoNCE: passes over the logged pairs."""
    seed: int = 0
    """Seeds pair sampling, actions, the batch order and InfoNCE's shuffling."""
    device: str = "cpu"
    """Torch device, e.g. cpu or cuda."""

    @model_validator(mode="after")
    def _mix(self) -> PGRetTrainConfig:
        if self.alpha + self.beta > 1:
            raise ValueError(f"alpha + beta must be at most 1, got {self.alpha} + {self.beta}")
        return self

    @property
    def reward(self) -> ItemReward:
        """The variant's reward table.

        Raises:
            ValueError: the infonce variant, which has no reward.
        """
        if self.variant not in VARIANT_REWARDS:
            raise ValueError(f"variant {self.variant!r} is supervised and has no reward")
        return VARIANT_REWARDS[self.variant]
