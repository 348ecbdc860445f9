"""PURPLE's training settings, beside the trainer that reads them (as TRL pairs its configs).

Each field is documented once, by the docstring under it: that text is also its ``--help`` in
``personamem train purple``, whose options are built from these models (see
:mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from personamem.eval.evaluate import BenchmarkName
from personamem.llm.load import REFERENCE_RUNTIME, Runtime
from personamem.pipeline.config import FirstStage
from personamem.profile.purple.config import PurpleConfig
from personamem.trainers.traffic import TrafficSource

__all__ = ["Advantage", "PurpleDataConfig", "PurpleTrainConfig"]

Advantage = Literal["zscore", "rank", "clip"]


class PurpleTrainConfig(BaseModel):
    """REINFORCE settings (the paper's: B = 16, M = 32, Adam at 1e-4, clipping at 1.0)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    model: PurpleConfig = PurpleConfig()
    """The scorer's shape."""
    k: int = Field(default=5, ge=1)
    """Profile length K."""
    batch_size: int = Field(default=16, ge=1)
    """Examples per step, B (the paper: 16)."""
    samples: int = Field(default=32, ge=2)
    """Profiles sampled per example, M (the paper: 32)."""
    lr: float = Field(default=1e-4, gt=0)
    """Adam's learning rate."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Maximum gradient norm."""
    steps: int = Field(default=100, ge=1)
    """Optimizer steps in all (a resumed run continues up to this many)."""
    validate_every: int = Field(default=20, ge=1)
    """Steps between validations (and checkpoints)."""
    advantage: Advantage = "zscore"
    """How rewards become advantages within an example: zscore (the paper's), rank or clip."""
    clip_nats: float = Field(default=5.0, gt=0)
    """The clip width, in nats, for the clip advantage."""
    seed: int = 0
    """Seeds the training subset, the example order, the profile samples and the initial weights."""
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    """Split each process's share of a step's B examples into this many backward passes (same update,
    less memory)."""
    device: Literal["auto", "cpu"] = "auto"
    """auto: the GPU where accelerate finds one (bf16 where supported), else the CPU; cpu: always the CPU.
    Processes come from the launcher ('accelerate launch --multi_gpu --num_processes N')."""


class PurpleDataConfig(TrafficSource):
    """Where PURPLE's examples come from and how they are split: the data side of a training run."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    benchmark: BenchmarkName | None = None
    """QA benchmark for (history, question, answer) (or train on traffic: --from-store)."""
    data: Path | None = None
    """The benchmark folder in its upstream layout."""
    noise: float = 0.0
    """PersonaBench distractor level."""
    first_stage: FirstStage = "hybrid"
    """Candidate retriever."""
    candidates: int = Field(default=20, ge=1)
    """Candidates per question (the paper: 20)."""
    validation_users: int = Field(default=1, ge=1)
    """Users held out for validation."""
    test_users: int = Field(default=2, ge=1)
    """Users held out for testing (never trained on)."""
    split_seed: int = 0
    """Seeds which users are held out; keep it fixed to compare training seeds."""
    max_train: int | None = Field(default=None, ge=1)
    """Train on a random subset this large (default: every training example)."""
    max_validation: int = Field(default=64, ge=1)
    """Validation examples scored each time."""
    llm: str = "smollm2-135m"
    """The frozen LLM whose log-likelihood of the answer is the reward: smollm2-135m,
    qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a model folder."""
    llm_runtime: Runtime = REFERENCE_RUNTIME
    """The engine that scores the reward: ctranslate2 (int8, fast on a CPU) or transformers (float32)."""
