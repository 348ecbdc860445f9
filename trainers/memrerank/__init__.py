"""MemRerank training: GRPO on the preference-memory extractor, rewarded by a frozen setwise reranker.

The inference half (extractor, memory, reranker, checkpoint loading) lives in
:mod:`personamem.preference`; everything here is offline and may use the harness's metrics. The
config imports without TRL (the command line builds its options from it); the trainer's names load
it on first access.
"""

from typing import Any

from personamem.trainers.memrerank.config import MemRerankConfig

__all__ = ["REWARDS", "MemRerankConfig", "MemRerankResult", "grpo_config", "train_memrerank"]

_TRAINER = frozenset({"REWARDS", "MemRerankResult", "grpo_config", "train_memrerank"})


def __getattr__(name: str) -> Any:
    if name in _TRAINER:
        from personamem.trainers.memrerank import trainer

        return getattr(trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
