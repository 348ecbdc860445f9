"""PURPLE's reward: the frozen LLM's log-likelihood of the user's true answer given profile and query.

R(P) = log p_LLM(y | P, x), with the profile rendered by the same prompt the harness's answer metrics
use (:func:`~personamem.pipeline.prompt.profile_prompt`, which also fits it to the model's window).
Scores are cached by (example, ordered record ids): a policy that is becoming confident samples the
same profiles again and again, and those need not be rescored.
"""

from __future__ import annotations

from collections.abc import Sequence

from personamem.eval.answers import answer_loglikelihood
from personamem.llm.base import FrozenLLM
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record
from personamem.trainers.purple.data import ProfileExample

__all__ = ["LLMReward"]


class LLMReward:
    """Log-likelihood rewards for (example, profile) pairs, scored in one batched call per request.

    Args:
        llm: the frozen LLM.
        cache: keep scores by (example, ordered record ids); off only to measure what it saves.

    Attributes:
        hits: rewards served from the cache.
        scored: rewards the LLM computed.
    """

    def __init__(self, llm: FrozenLLM, *, cache: bool = True) -> None:
        self.llm = llm
        self.cache = cache
        self._cache: dict[tuple[str, tuple[str, ...]], float] = {}
        self.hits = 0
        self.scored = 0

    def __call__(self, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        """R for each (example, profile in order)."""
        if not self.cache:  # every profile is scored, repeats included (the benchmark's baseline)
            self.scored += len(requests)
            return self._score(requests)
        keys = [(example.id, tuple(r.id for r in profile)) for example, profile in requests]
        todo: dict[tuple[str, tuple[str, ...]], tuple[ProfileExample, Sequence[Record]]] = {}
        for key, request in zip(keys, requests, strict=True):
            if key not in self._cache:
                todo.setdefault(key, request)
        self._cache.update(zip(todo, self._score(list(todo.values())), strict=True))
        self.scored += len(todo)
        self.hits += len(keys) - len(todo)
        return [self._cache[key] for key in keys]

    def _score(self, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        if not requests:
            return []
        scores = answer_loglikelihood(  # the answer exactly as the harness's answer metrics score it
            self.llm,
            [profile_prompt(self.llm, profile, example.query) for example, profile in requests],
            [example.answer for example, _ in requests],
        )
        return list(scores)
