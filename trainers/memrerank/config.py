"""MemRerank's training settings, beside the trainer that reads them (as TRL pairs its configs).

Each field is documented once, by the docstring under it: that text is also its ``--help`` in
``personamem train memrerank``, whose options are built from this model (see
:mod:`personamem.cli.options`). The defaults are sized for a CPU; the TRL settings they map to are
listed in :func:`personamem.trainers.memrerank.trainer.grpo_config`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from personamem.datasets import TrafficSource
from personamem.llm.load import REFERENCE_RUNTIME, Runtime
from personamem.preference.extractor import ExtractorStyle
from personamem.trainers.run import TrainerRun

__all__ = ["MemRerankConfig", "MemRerankDataConfig", "MemRerankRunConfig"]


class MemRerankDataConfig(TrafficSource):
    """Where the 1-in-5 choices come from: Amazon Beauty, or an application's traffic."""

    data: Path | None = None
    """The Amazon Beauty folder (train.jsonl) in its upstream layout (or train on traffic: --from-store)."""

    @model_validator(mode="after")
    def _one_dataset(self) -> MemRerankDataConfig:
        if (self.data is None) == (self.from_store is None):
            raise ValueError("give one data source: --data (Amazon Beauty) or --from-store")
        return self


class MemRerankConfig(BaseModel):
    """GRPO on LoRA adapters of the extractor, rewarded by a frozen setwise reranker's choice."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    base_model: str = "smollm2-135m"
    """The extractor LLM whose LoRA adapters are trained: smollm2-135m, qwen2.5-coder-0.5b or a model
    folder."""
    reranker: str | None = None
    """The frozen LLM whose setwise choice is the reward (default: the base model, without adapters)."""
    reranker_runtime: Runtime = REFERENCE_RUNTIME
    """The engine the reranker runs on when it is not the base model: ctranslate2 (int8) is ~2.7× faster
    on a CPU and is what ``eval-memory --llm-runtime ctranslate2`` measures with."""
    reranker_shifts: int = Field(default=1, ge=1, le=5)
    """Cyclic rotations of the five candidates averaged per reward (5 cancels a pure position bias at
    five times the cost); eval-memory's default is 1, with calibration."""
    reranker_calibrate: bool = True
    """Contextual calibration of the reranker's letters against blank items, as eval-memory's default:
    the reward is then the probability eval-memory reports."""
    style: ExtractorStyle = "sections"
    """The memory's written form: sections (within/cross-category) or atomic (one fact per line)."""
    max_words: int = Field(default=120, ge=1)
    """The memory's word budget; statements past it are dropped."""
    statements: int = Field(default=8, ge=1)
    """How many statements the prompt asks for at most."""
    history_tokens: int = Field(default=1024, ge=1)
    """Most tokens of history in the extraction prompt (the newest records are kept)."""
    max_completion_length: int = Field(default=192, ge=1)
    """Tokens sampled per memory; the checkpoint's extractor generates as many."""
    num_generations: int = Field(default=4, ge=2)
    """Memories sampled per user, GRPO's group size G (TRL's default 8 is too slow on a CPU)."""
    prompts_per_step: int = Field(default=4, ge=1)
    """Users per optimizer step; each step samples prompts_per_step × num_generations memories."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of the memories (TRL's default)."""
    beta: float = Field(default=0.0, ge=0)
    """KL coefficient against the base model. TRL's default 0 (as DAPO and Dr. GRPO): with LoRA the
    adapters are the only drift, and a reference pass would add a forward per step."""
    learning_rate: float = Field(default=5e-5, gt=0)
    """AdamW's learning rate. LoRA wants 10-50× a full fine-tune's (TRL's GRPO default is 1e-6)."""
    lora_rank: int = Field(default=16, ge=1)
    """LoRA rank r."""
    lora_alpha: int = Field(default=32, ge=1)
    """LoRA scaling alpha (the update is scaled by alpha / r)."""
    lora_dropout: float = Field(default=0.0, ge=0, lt=1)
    """Dropout on the LoRA input; 0 keeps the sampled and the trained log-probabilities consistent."""
    lora_targets: tuple[str, ...] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )
    """Module names that get adapters (every attention and MLP projection of Llama and Qwen2 models;
    LoRA on the MLP matters even for RL)."""
    lambda_quality: float = Field(default=0.1, ge=0, le=0.5)
    """Weight of the quality score (in [0, 1]) against the utility (a probability); capped at 0.5 so
    the regularizer can never outweigh the reranker's choice."""
    max_steps: int = Field(default=40, ge=1)
    """Optimizer steps in all (a resumed run continues up to this many)."""
    save_every: int = Field(default=10, ge=1)
    """Steps between checkpoints (and one at the end)."""
    users: int | None = Field(default=None, ge=1)
    """Train on this many training-side users, a seeded sample (default: all of them)."""
    seed: int = 0
    """Seeds the user sample, the LoRA initialization, the prompt order, the sampling and the
    candidate orders."""


class MemRerankRunConfig(TrainerRun):
    """A ``personamem train memrerank`` run."""

    data: MemRerankDataConfig
    train: MemRerankConfig = MemRerankConfig()
    out_dir: Path = Field(default=Path("runs/memrerank"), alias="out")
    """The checkpoint (extractor.json, adapter/), rewards.jsonl, trainer/."""
