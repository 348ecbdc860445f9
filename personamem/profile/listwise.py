"""A listwise LLM reranker as a profile selector (RankGPT-style, written from its description).

The frozen LLM sees the numbered candidates and the question and answers with an order such as
``[3] > [1] > [2]``. It is PURPLE's strongest untrained baseline and the yardstick for its speed:
one generation per query over all candidates, against PURPLE's single forward pass.
Numbers the model leaves out keep their first-stage order after the ones it ranked; an answer with
no usable number, or a failing backend, gives the first-stage order with a warning. Built over a store,
the answers are cached durably per user as the personalizers' are (keyed by the whole prompt, so a
changed record or candidate set asks again; a delete or ``forget`` erases them): decoding is greedy,
so a repeated request would get the same answer, at one generation's cost (seconds on a CPU).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from personamem.errors import ListwiseFallbackWarning, warn_fallback
from personamem.llm.base import FrozenLLM, LLMError, Message
from personamem.llm.budget import fit_to_budget
from personamem.personalize.pbr import cached_llm_outputs
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked

if TYPE_CHECKING:
    from personamem.store import Store

__all__ = ["ListwiseSelector", "parse_ranking"]

_NUMBER = re.compile(r"\d+")
_WHO, _FALLBACK = "listwise rerank", "keeping the first-stage order"  # what its warnings say
PROMPT_VERSION = "1"
"""Part of the cache key: a prompt change must not reuse the answers to the old one."""


def parse_ranking(text: str, n: int) -> list[int]:
    """0-based candidate indices in the order the answer names them (1-based numbers), deduplicated."""
    order: list[int] = []
    for match in _NUMBER.finditer(text):
        index = int(match.group()) - 1
        if 0 <= index < n and index not in order:
            order.append(index)
    return order


class ListwiseSelector:
    """Asks the LLM to order the candidates by usefulness for the question; keeps the first ``k``.

    Args:
        llm: the frozen LLM (greedy decoding).
        store: where answers are cached per user (None: every request asks the LLM).
        record_chars: characters of each record shown (long sessions are cut).
        max_tokens: tokens generated for the ranking.
    """

    def __init__(
        self, llm: FrozenLLM, *, store: Store | None = None, record_chars: int = 300, max_tokens: int = 96
    ) -> None:
        self.llm = llm
        self.store = store
        self.record_chars = record_chars
        self.max_tokens = max_tokens

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """The LLM's top ``k``, best first."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if not candidates:
            return []
        order = self._rank(user_id, query, candidates)
        return ranked([(candidates[i], float(len(candidates) - rank)) for rank, i in enumerate(order[:k])])

    def _rank(self, user_id: str, query: str, candidates: Sequence[Record]) -> list[int]:
        head = "Below are numbered notes about one user."
        ask = (
            f"Question: {query}\nRank the notes by how useful they are for answering the question. "
            "Reply only with the numbers, most useful first, like: [2] > [1] > [3]"
        )
        budget = self.llm.context_window - self.max_tokens - self.llm.count_tokens(f"{head}\n{ask}") - 32
        shown = [f"[{i + 1}] {self._cut(r.text)}" for i, r in enumerate(candidates)]
        fitted = fit_to_budget(shown, max(0, budget), self.llm.count_tokens, render=lambda t: t)
        text = self._answer(user_id, [{"role": "user", "content": f"{head}\n{fitted.text}\n\n{ask}"}])
        if text is None:  # the LLM failed: warned
            return list(range(len(candidates)))
        order = parse_ranking(text, len(fitted.kept))
        if not order:
            warn_fallback(
                f"{_WHO}: no ranking in {text[:80]!r}; {_FALLBACK}", ListwiseFallbackWarning, stacklevel=3
            )
        return order + [i for i in range(len(candidates)) if i not in order]

    def _answer(self, user_id: str, prompt: list[Message]) -> str | None:
        """The LLM's answer to ``prompt``, from the store's cache when it holds one; None if it failed."""

        def ask(_: object = None) -> list[str]:
            return [self.llm.generate([prompt], max_tokens=self.max_tokens, temperature=0.0)[0][0]]

        if self.store is not None:
            key = hashlib.sha256(
                json.dumps([PROMPT_VERSION, self.llm.name, self.max_tokens, prompt]).encode()
            )
            return cached_llm_outputs(
                self.store,
                "listwise",
                [(user_id, key.hexdigest())],
                ask,
                who=_WHO,
                fallback=_FALLBACK,
                category=ListwiseFallbackWarning,
            )[0]
        try:
            return ask()[0]
        except LLMError as exc:
            warn_fallback(
                f"{_WHO}: the LLM failed ({exc}); {_FALLBACK}", ListwiseFallbackWarning, stacklevel=4
            )
            return None

    def _cut(self, text: str) -> str:
        return text if len(text) <= self.record_chars else text[: self.record_chars] + " …"
