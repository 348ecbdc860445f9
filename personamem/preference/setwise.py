"""The setwise reranker: which of these five fits this request and this person best.

The atomic operation shows the LLM the user's preference memory, the request and up to five
lettered candidates. A small local model answers through the log-likelihood of each letter (one
scoring call, no decoding, a full distribution over the set); a large or remote model answers by
sampled choices, whose frequencies are the distribution. MemRerank's reward is the probability the
positive gets here.

A longer list is ranked by a heap sort whose nodes have four children, so each sift step is one
5-way choice (Zhuang et al.'s setwise heap sort). For N candidates and the top k:
building the heap takes at most ``ceil((N-1)/4)`` choices plus the sift-downs they cause (never more
than ``N-1`` in all), and each of the k extractions at most ``ceil(log4 N)`` more. N=20, k=10: at
most 5 + 3 + 10·3 = 38 choices, against one long generation for the listwise reranker;
``bench/setwise_rerank.py`` measures both. Two things keep that near the listwise cost: a choice
orders its whole set, and the ranking remembers those orders (:class:`Outcomes`), so a later choice
asks only about items not already known to lose (simulated with a consistent judge, N=20 and k=10:
63 items shown instead of 114); and the prompt puts the question before the items, so a backend that
keeps a prompt prefix's states (:class:`~personamem.llm.hf.TransformersLLM`) runs only the items.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from personamem.llm.base import FrozenLLM, Message

__all__ = ["LABELS", "SET_SIZE", "Outcomes", "SetwiseReranker", "heap_top_k", "setwise_prompt", "shuffled"]

SET_SIZE = 5
LABELS = "ABCDE"
_CHOICE = re.compile(r"\b([A-E])\b")
_BLANK = "(no item)"
_SYSTEM = "You choose, from a short list, the item that suits a particular person best."


def setwise_prompt(
    query: str, memory: str, candidates: Sequence[str], *, item_chars: int = 400
) -> list[Message]:
    """The 5-way choice prompt; an empty ``memory`` says nothing is known about the person."""
    if not 1 <= len(candidates) <= SET_SIZE:
        raise ValueError(f"a setwise choice takes 1 to {SET_SIZE} candidates, got {len(candidates)}")
    items = "\n".join(f"{LABELS[i]}. {_cut(text, item_chars)}" for i, text in enumerate(candidates))
    about = memory.strip() or "(nothing known about this person)"
    request = query.strip() or "(no request: pick what this person would most likely choose)"
    # the question comes before the items, so every choice for one request shares all of the prompt
    # but its items, and a backend that keeps that prefix's states runs only the items per choice
    user = (
        f"What we know about this person:\n{about}\n\nTheir request: {request}\n\n"
        f"Which of the items below suits this person best? Answer with its letter alone.\n\n{items}"
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def _cut(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 3].rstrip() + "..."


@dataclass
class SetwiseReranker:
    """Ranks candidates for a request given a preference memory, by 5-way LLM choices.

    Args:
        llm: the frozen LLM.
        mode: ``likelihood`` (each letter's log-likelihood; for local models) or ``sampled``
            (``samples`` sampled answers; for servers that only generate).
        samples: sampled answers per choice in ``sampled`` mode.
        seed: seeds the sampling.
        item_chars: characters of each candidate shown.
    """

    llm: FrozenLLM
    mode: Literal["likelihood", "sampled"] = "likelihood"
    samples: int = 8
    seed: int = 0
    item_chars: int = 400
    shifts: int = 1
    """Cyclic rotations of the set averaged per choice (1 to 5). Small models favour a position
    (SmolLM2-135M gives "A" ~0.8 whatever the items); averaging over all five rotations cancels a
    pure position bias at five times the cost."""
    calibrate: bool = False
    """Contextual calibration: divide each letter's probability by the one it gets when every item
    is a blank placeholder under the same request and memory (that prompt is scored once per request
    and memory, and cached), so a letter the model favours for no reason stops winning by default."""
    calls: int = 0
    """5-way choices made so far (for reports and the bench)."""
    _priors: dict[tuple[str, str, int], list[float]] = field(default_factory=dict, repr=False)

    def choice_probabilities(self, query: str, memory: str, candidates: Sequence[str]) -> list[float]:
        """The LLM's probability that each of up to five candidates is the best one (sums to 1)."""
        n = len(candidates)
        self.calls += 1
        total = [0.0] * n
        shifts = max(1, min(self.shifts, n))
        for shift in range(shifts):
            rotated = [candidates[(i + shift) % n] for i in range(n)]
            for position, p in enumerate(self._calibrated(query, memory, rotated)):
                total[(position + shift) % n] += p / shifts
        return total

    def _calibrated(self, query: str, memory: str, candidates: Sequence[str]) -> list[float]:
        probabilities = self._choose(query, memory, candidates)
        if not self.calibrate:
            return probabilities
        key = (query, memory, len(candidates))
        if key not in self._priors:
            self._priors[key] = self._choose(query, memory, [_BLANK] * len(candidates))
        weights = [p / max(prior, 1e-9) for p, prior in zip(probabilities, self._priors[key], strict=True)]
        return [w / sum(weights) for w in weights]

    def _choose(self, query: str, memory: str, candidates: Sequence[str]) -> list[float]:
        prompt = setwise_prompt(query, memory, candidates, item_chars=self.item_chars)
        n = len(candidates)
        if self.mode == "likelihood":
            scores = self.llm.loglikelihood([(prompt, LABELS[i]) for i in range(n)])
            top = max(scores)
            weights = [math.exp(s - top) for s in scores]
        else:
            answers = self.llm.generate(
                [prompt], n=self.samples, max_tokens=4, temperature=1.0, seed=self.seed
            )
            weights = [0.0] * n
            for answer in answers[0]:
                found = _CHOICE.search(answer.upper())
                if found and LABELS.index(found.group(1)) < n:
                    weights[LABELS.index(found.group(1))] += 1.0
            if not any(weights):  # no answer named a letter: no preference expressed
                weights = [1.0] * n
        total = sum(weights)
        return [w / total for w in weights]

    def best_of(self, query: str, memory: str, candidates: Sequence[str]) -> int:
        """Index of the most probable candidate among up to five (ties: the first)."""
        probabilities = self.choice_probabilities(query, memory, candidates)
        return max(range(len(candidates)), key=lambda i: (probabilities[i], -i))

    def rank(self, query: str, memory: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Indices of the top ``k`` candidates (default all), best first, by setwise heap sort.

        A choice orders its whole set, not just its winner, so the ranking keeps every order it was
        shown (:class:`Outcomes`) and asks the LLM only about the items none of the others is already
        known to beat: a group settled by earlier choices costs nothing, and the rest get a smaller set.
        """
        outcomes = Outcomes()

        def best_of(group: list[int]) -> int:
            contenders = outcomes.contenders(group)
            if len(contenders) == 1:
                return contenders[0]
            probabilities = self.choice_probabilities(query, memory, [candidates[i] for i in contenders])
            return outcomes.record(contenders, probabilities)

        return heap_top_k(len(candidates), len(candidates) if k is None else k, best_of)


@dataclass
class Outcomes:
    """The orders that one ranking's earlier choices showed.

    ``a`` beats ``b`` when a choice holding both gave ``a`` the higher probability, and by transitivity
    through other items. Only mutual contenders (neither known to beat the other) are ever compared,
    so the relation stays acyclic even when the LLM is not a consistent judge.
    """

    beats: dict[int, set[int]] = field(default_factory=dict)

    def contenders(self, group: Sequence[int]) -> list[int]:
        """The items of ``group`` that no other item of it is known to beat, in group order."""
        beaten: set[int] = set()
        stack = list(group)
        while stack:
            for loser in self.beats.get(stack.pop(), ()):
                if loser not in beaten:
                    beaten.add(loser)
                    stack.append(loser)
        return [i for i in group if i not in beaten]

    def record(self, group: Sequence[int], probabilities: Sequence[float]) -> int:
        """Keep the strict order ``probabilities`` give ``group``; returns the winner (ties: the first)."""
        order = sorted(range(len(group)), key=lambda i: (-probabilities[i], i))
        for better, worse in itertools.pairwise(order):
            if probabilities[better] > probabilities[worse]:
                self.beats.setdefault(group[better], set()).add(group[worse])
        return group[order[0]]


def heap_top_k(n: int, k: int, best_of: Callable[[list[int]], int]) -> list[int]:
    """The top ``k`` of items ``0..n-1`` by a 4-ary max-heap whose only comparison is ``best_of``.

    ``best_of(group)`` gets 2 to 5 item indices (a parent first, then its children) and returns the
    best one. With a consistent comparator (one hidden total order) the result is the full sort's.
    """
    heap = list(range(n))

    def sift_down(i: int, size: int) -> None:
        while True:
            children = [c for c in range(4 * i + 1, 4 * i + 5) if c < size]
            if not children:
                return
            winner = best_of([heap[i]] + [heap[c] for c in children])
            if winner == heap[i]:
                return
            j = next(c for c in children if heap[c] == winner)
            heap[i], heap[j] = heap[j], heap[i]
            i = j

    for i in reversed(range((n - 2) // 4 + 1 if n > 1 else 0)):
        sift_down(i, n)
    top: list[int] = []
    size = n
    while size and len(top) < k:
        top.append(heap[0])
        size -= 1
        heap[0] = heap[size]
        sift_down(0, size)
    return top


def shuffled(candidates: Sequence[str], seed: int) -> tuple[list[str], list[int]]:
    """The candidates in a seeded order and, for each shown position, its original index.

    Small models favour the first letter; the harness shows each instance in a different order per
    seed, so that bias becomes noise across seeds instead of a systematic gain for one position.
    """
    order = list(range(len(candidates)))
    random.Random(seed).shuffle(order)
    return [candidates[i] for i in order], order
