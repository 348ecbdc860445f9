"""PURPLE's reward: the frozen LLM's log-likelihood of the user's true answer given profile and query.

R(P) = log p_LLM(y | P, x), with the profile rendered by the same prompt the harness's answer metrics
use (:func:`~personamem.pipeline.prompt.profile_prompt`, which also fits it to the model's window).
Scores are cached by (example, ordered record ids): a policy that is becoming confident samples the
same profiles again and again, and those need not be rescored. With a ``path`` the cache is also a
JSONL file, appended as scores come in, so a run that stops keeps what it paid for and the reward
model (:mod:`.reward_model`) is fitted from the same file.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from personamem.eval.answers import answer_loglikelihood
from personamem.llm.base import FrozenLLM
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record
from personamem.trainers.purple.data import ProfileExample

__all__ = ["LLMReward", "UsedReward", "read_rewards"]

Key = tuple[str, tuple[str, ...]]
"""(example id, ordered record ids)."""


def read_rewards(path: Path, llm: str) -> dict[Key, float]:
    """The scores cached in ``path`` (JSONL), which must all come from ``llm``.

    Raises:
        ValueError: a line that is not a cached score (named by number), or one from another LLM.
    """
    scores: dict[Key, float] = {}
    if not path.is_file():
        return scores
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key, reward, scored_by = (
                    (row["example"], tuple(row["records"])),
                    float(row["reward"]),
                    row["llm"],
                )
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a cached reward ({error})") from None
            if scored_by != llm:
                raise ValueError(f"{path}:{number}: scored by {scored_by!r}, this run's reward is {llm!r}")
            scores[key] = reward
    return scores


class LLMReward:
    """Log-likelihood rewards for (example, profile) pairs, scored in one batched call per request.

    Args:
        llm: the frozen LLM.
        cache: keep scores by (example, ordered record ids); off only to measure what it saves.
        path: a JSONL file that keeps the cache across runs (read at start, appended to).

    Attributes:
        hits: rewards served from the cache.
        scored: rewards the LLM computed.
    """

    def __init__(self, llm: FrozenLLM, *, cache: bool = True, path: Path | None = None) -> None:
        self.llm = llm
        self.cache = cache
        self.path = path
        self._cache: dict[Key, float] = read_rewards(path, llm.name) if path is not None else {}
        self.hits = 0
        self.scored = 0

    @property
    def scores(self) -> dict[Key, float]:
        """Every cached score (a copy)."""
        return dict(self._cache)

    def __call__(self, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        """R for each (example, profile in order)."""
        if not self.cache:  # every profile is scored, repeats included (the benchmark's baseline)
            self.scored += len(requests)
            return self._score(requests)
        keys = [(example.id, tuple(r.id for r in profile)) for example, profile in requests]
        todo: dict[Key, tuple[ProfileExample, Sequence[Record]]] = {}
        for key, request in zip(keys, requests, strict=True):
            if key not in self._cache:
                todo.setdefault(key, request)
        new = dict(zip(todo, self._score(list(todo.values())), strict=True))
        self._cache.update(new)
        self._append(new)
        self.scored += len(todo)
        self.hits += len(keys) - len(todo)
        return [self._cache[key] for key in keys]

    def _append(self, new: dict[Key, float]) -> None:
        if self.path is None or not new:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as out:
            for (example, records), reward in new.items():
                row = {"example": example, "records": list(records), "reward": reward, "llm": self.llm.name}
                out.write(json.dumps(row) + "\n")

    def _score(self, requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        if not requests:
            return []
        scores = answer_loglikelihood(  # the answer exactly as the harness's answer metrics score it
            self.llm,
            [profile_prompt(self.llm, profile, example.query) for example, profile in requests],
            [example.answer for example, _ in requests],
        )
        return list(scores)


class UsedReward:
    """The reward with no LLM: how high a profile ranks the records its answer used (nDCG over them).

    R(P) = sum over the profile's positions i of [record i was used] / log2(i + 2), over the best
    such sum (0 when nothing was used): what the answer drew on, first. For traffic the used records
    are the ones feedback named or the answer was attributed to, the signal ``improve`` and the
    store's trials learn from; for a benchmark, its gold evidence.
    """

    def __call__(self, pairs: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
        """Each (example, ordered profile) pair's reward, in order."""
        rewards = []
        for example, profile in pairs:
            gained = sum(1 / math.log2(i + 2) for i, r in enumerate(profile) if r.id in example.gold)
            best = sum(1 / math.log2(i + 2) for i in range(min(len(profile), len(example.gold))))
            rewards.append(gained / best if best else 0.0)
        return rewards
