"""PURPLE's training settings, beside the trainer that reads them (as TRL pairs its configs)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from personamem.profile.purple.model import PurpleConfig

__all__ = ["Advantage", "PurpleTrainConfig"]

Advantage = Literal["zscore", "rank", "clip"]


class PurpleTrainConfig(BaseModel):
    """REINFORCE settings (the paper's: B = 16, M = 32, Adam at 1e-4, clipping at 1.0).

    Attributes:
        model: the scorer's shape.
        k: profile length K.
        batch_size: examples per step (B).
        samples: profiles sampled per example (M).
        lr: Adam's learning rate.
        grad_clip: maximum gradient norm.
        steps: optimizer steps in all (a resumed run continues up to this many).
        validate_every: steps between validations (and checkpoints).
        advantage: how rewards become advantages within an example: ``zscore`` (the paper's),
            ``rank`` or ``clip``.
        clip_nats: the clip width for ``advantage="clip"``.
        seed: seeds the example order, the profile samples and the initial weights.
        device: torch device; on CUDA, bf16 autocast is used where supported.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: PurpleConfig = PurpleConfig()
    k: int = Field(default=5, ge=1)
    batch_size: int = Field(default=16, ge=1)
    samples: int = Field(default=32, ge=2)
    lr: float = Field(default=1e-4, gt=0)
    grad_clip: float = Field(default=1.0, gt=0)
    steps: int = Field(default=100, ge=1)
    validate_every: int = Field(default=20, ge=1)
    advantage: Advantage = "zscore"
    clip_nats: float = Field(default=5.0, gt=0)
    seed: int = 0
    device: str = "cpu"
