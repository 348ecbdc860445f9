"""PG-Ret's training settings, beside the trainer that reads them.

Each field's docstring is also its ``--help`` in ``personamem train pgret`` (options are built from
these models, see :mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from personamem.eval.judge import JudgeMode
from personamem.llm.load import REFERENCE_RUNTIME, Runtime
from personamem.trainers.loop import LoopConfig, LoopData, defaults
from personamem.trainers.pgret.reward import ItemReward
from personamem.trainers.run import TrainerRun

__all__ = ["VARIANT_REWARDS", "PGRetDataConfig", "PGRetRunConfig", "PGRetTrainConfig", "Variant"]

Variant = Literal["conservative", "aggressive", "infonce"]

VARIANT_REWARDS: dict[str, ItemReward] = {
    # the paper's item-wise reward: only a relevant record the base model missed is worth selecting
    "aggressive": ItemReward(novel=1.0, known=0.0, irrelevant=-1.0),
    # still rewards what the base model already finds, so precision is held while novelty grows
    "conservative": ItemReward(novel=1.0, known=0.5, irrelevant=-1.0),
}
"""The two operating points as reward tables (our parameterization of the paper's two variants)."""


class PGRetDataConfig(LoopData):
    """Where the logged pairs come from, how users are split, and who judges relevance.

    The source (a benchmark's questions and gold records, or traffic with used records) and the user
    split are the :class:`~personamem.datasets.DataSource`'s.
    """

    novelty_depth: int = Field(default=20, ge=1)
    """L: a record in the base model's top L is not novel (20: the candidates the pipeline gives a
    profile selector, so a novel record is one the base first stage would not have offered at all)."""
    exploration_depth: int = Field(default=20, ge=1)
    """BM25 records per query in the exploration pool."""
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


@defaults(batch_size=8, lr=2e-5, validate_every=25)
class PGRetTrainConfig(LoopConfig):
    """Policy-gradient settings (and the supervised InfoNCE baseline's, for ``variant = infonce``)."""

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
    temperature: float = Field(default=0.05, gt=0)
    """τ in π(select) = σ((cosine − the query's mean cosine over its sampled pairs) / τ)."""
    hard_negatives: int = Field(default=5, ge=0)
    """InfoNCE: non-gold records from the base top ranks added per pair as negatives."""
    epochs: float = Field(default=1.0, gt=0)
    """InfoNCE: passes over the logged pairs."""
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


class PGRetRunConfig(TrainerRun):
    """A ``personamem train pgret`` run."""

    data: PGRetDataConfig
    train: PGRetTrainConfig = PGRetTrainConfig()
    out_dir: Path = Field(default=Path("runs/pgret"), alias="out")
    """The tower (best/, last/), split.json and history.json."""
