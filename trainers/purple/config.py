"""PURPLE's training settings, beside the trainer that reads them (as TRL pairs its configs).

Each field is documented once, by the docstring under it: that text is also its ``--help`` in
``personamem train purple``, whose options are built from these models (see
:mod:`personamem.cli.options`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from personamem.llm.load import REFERENCE_RUNTIME, Runtime
from personamem.pipeline.config import FirstStageName
from personamem.profile.purple.config import PurpleConfig
from personamem.trainers.loop import LoopConfig, LoopData
from personamem.trainers.run import TrainerRun

__all__ = ["Advantage", "PurpleDataConfig", "PurpleRunConfig", "PurpleTrainConfig", "RewardSource"]

Advantage = Literal["zscore", "rank", "clip"]
RewardSource = Literal["llm", "distilled", "used"]


class PurpleTrainConfig(LoopConfig):
    """REINFORCE settings (the paper's: B = 16, M = 32, Adam at 1e-4, clipping at 1.0)."""

    model: PurpleConfig = PurpleConfig()
    """The scorer's shape."""
    samples: int = Field(default=32, ge=2)
    """Profiles sampled per example, M (the paper: 32)."""
    advantage: Advantage = "zscore"
    """How rewards become advantages within an example: zscore (the paper's), rank or clip."""
    clip_nats: float = Field(default=5.0, gt=0)
    """The clip width, in nats, for the clip advantage."""
    gradient_accumulation_steps: int = Field(default=1, ge=1)
    """Split each process's share of a step's B examples into this many backward passes (same update,
    less memory)."""
    device: Literal["auto", "cpu"] = "auto"
    """auto: the GPU where accelerate finds one (bf16 where supported), else the CPU; cpu: always the CPU.
    Processes come from the launcher ('accelerate launch --multi_gpu --num_processes N')."""


class PurpleDataConfig(LoopData):
    """Where PURPLE's examples come from and how they are split: the data side of a training run.

    The source (a QA benchmark's (history, question, answer), or traffic) and the user split are the
    :class:`~personamem.datasets.DataSource`'s.
    """

    first_stage: FirstStageName = "hybrid"
    """Candidate retriever."""
    candidates: int = Field(default=20, ge=1)
    """Candidates per question (the paper: 20)."""
    llm: str = "smollm2-135m"
    """The frozen LLM whose log-likelihood of the answer is the reward: smollm2-135m,
    qwen2.5-coder-0.5b, qwen2.5-coder-1.5b or a model folder."""
    llm_runtime: Runtime = REFERENCE_RUNTIME
    """The engine that scores the reward: ctranslate2 (int8, fast on a CPU) or transformers (float32)."""
    reward: RewardSource = "llm"
    """llm: the LLM scores every sampled profile (the paper's); distilled: it scores a fixed sample of
    profiles once, a small model fitted to them rewards training, and the LLM still scores every
    validation (for thousands of steps on a CPU); used: how high the profile ranks the records the
    answer used (nDCG over them: named in feedback or attributed to the answer, a benchmark's gold),
    no LLM at all, so a store trains its own selector from the answers it serves in seconds."""
    reward_questions: int = Field(default=240, ge=2)
    """distilled: training questions whose profiles the LLM scores for the reward model."""
    reward_profiles: int = Field(default=8, ge=2)
    """distilled: profiles scored per question (the first stage's top K and draws around it)."""


class PurpleRunConfig(TrainerRun):
    """A ``personamem train purple`` run."""

    data: PurpleDataConfig
    train: PurpleTrainConfig = PurpleTrainConfig()
    out_dir: Path = Field(default=Path("runs/purple"), alias="out")
    """Checkpoints (best/, last/) and split.json."""
    trial: bool = False
    """With --from-store: put the store's live pipeline with the best checkpoint as its selector on
    trial there, served interleaved with the live one until the answers decide (personamem/trials.py)."""
