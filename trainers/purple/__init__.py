"""PURPLE training: examples from a benchmark, the frozen LLM's reward, and the REINFORCE trainer.

The inference half (scorer, policy, checkpoints, selector) lives in :mod:`personamem.profile.purple`;
everything here is offline and may use the evaluation harness.
"""

from personamem.trainers.purple.config import Advantage, PurpleTrainConfig
from personamem.trainers.purple.trainer import RewardFn, TrainResult, advantages, train_purple

__all__ = ["Advantage", "PurpleTrainConfig", "RewardFn", "TrainResult", "advantages", "train_purple"]
