"""PURPLE training: examples from a benchmark, the frozen LLM's reward, and the REINFORCE trainer.

The inference half (scorer, policy, checkpoints, selector) lives in :mod:`personamem.profile.purple`;
everything here is offline and may use the harness's metrics. The configs import without torch
(the command line builds its options from them); the trainer's names load it on first access.
"""

from typing import Any

from personamem.trainers.purple.config import Advantage, PurpleDataConfig, PurpleTrainConfig

__all__ = [
    "Advantage",
    "PurpleDataConfig",
    "PurpleTrainConfig",
    "RewardFn",
    "TrainResult",
    "advantages",
    "train_purple",
]

_TRAINER = frozenset({"RewardFn", "TrainResult", "advantages", "train_purple"})


def __getattr__(name: str) -> Any:
    if name in _TRAINER:
        from personamem.trainers.purple import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
