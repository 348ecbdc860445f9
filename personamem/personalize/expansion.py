"""LLM query-expansion baselines behind the personalizer seam: HyDE, Query2Term, CoT, ThinkQE, MILL.

Each asks the frozen LLM for text that expands the query and searches with the query's vector moved
toward the expansions' mean: ``q + mean(E(expansions))``. They are the non-personalized baselines PBR
is compared with (HyDE: Gao et al. 2023; Query2Term and CoT: Jagerman et al. 2023; ThinkQE: Lei et
al. 2025; MILL: Jia et al. 2024), written from their published descriptions with our own prompts:

- ``hyde``: passages that would answer the query.
- ``q2t``: keywords and terms related to the query.
- ``cot``: a step-by-step answer (the reasoning is the expansion).
- ``thinkqe``: think about the query, expand; then see the user's top records for the expanded query
  and expand again (corpus interaction), keeping both rounds.
- ``mill``: sub-questions with a short answer each, then mutual verification: keep the generated
  answers most similar to the user's top records for the raw query.

Outputs are cached per user like PBR's; an LLM failure or empty output falls back to the raw query
with a :class:`~personamem.personalize.pbr.PBRFallbackWarning`.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Literal

import numpy as np

from personamem.llm import FrozenLLM, LLMError, Message
from personamem.llm.parsing import extract_string_list
from personamem.personalize.pbr import PBRFallbackWarning
from personamem.retrieval.dense import DenseRetriever
from personamem.store import Store

__all__ = ["EXPANSIONS", "Expansion", "LLMExpansion"]

Expansion = Literal["hyde", "q2t", "cot", "thinkqe", "mill"]
EXPANSIONS: tuple[Expansion, ...] = ("hyde", "q2t", "cot", "thinkqe", "mill")
PROMPT_VERSION = "2"  # 2: MILL shares HyDE's passage prompt
_TOKENS = 160
_FEEDBACK_DOCS = 3  # the user's records shown to ThinkQE's second round and used by MILL's check
_MILL_KEEP = 2


def _ask(content: str) -> list[Message]:
    return [{"role": "user", "content": content}]


def _passage_prompt(query: str) -> list[Message]:
    """HyDE's request, also MILL's query-to-document generation."""
    return _ask(f"Write a short passage that answers this question.\nQuestion: {query}\nPassage:")


class LLMExpansion:
    """A :class:`~personamem.personalize.QueryPersonalizer` for one expansion baseline.

    Args:
        store: the user's records and the encoder.
        llm: the frozen LLM.
        kind: which baseline.
        n: expansions asked for (passages, terms lists, sub-questions).
        seed: sampling seed, part of the cache key.
        temperature: sampling temperature.
    """

    def __init__(
        self,
        store: Store,
        llm: FrozenLLM,
        kind: Expansion,
        *,
        n: int = 3,
        seed: int = 0,
        temperature: float = 0.7,
    ) -> None:
        if kind not in EXPANSIONS:
            raise ValueError(f"unknown expansion {kind!r}; choose from {EXPANSIONS}")
        self.store = store
        self.llm = llm
        self.kind = kind
        self.n = n
        self.seed = seed
        self.temperature = temperature
        self._dense = DenseRetriever(store)

    def personalize(self, user_id: str, query: str) -> np.ndarray:
        """The query vector moved toward the expansions' mean embedding (the query alone on fallback)."""
        q = self.store.encoder.encode([query])[0]
        key = hashlib.sha256(
            json.dumps(
                [PROMPT_VERSION, self.kind, query, self.llm.name, self.seed, self.n, self.temperature]
            ).encode()
        ).hexdigest()
        try:
            texts = self.store.derived(
                user_id, f"expansion-{self.kind}", key, lambda: self._expand(user_id, query, q)
            )
        except LLMError as exc:
            warnings.warn(
                f"{self.kind}: the LLM failed ({exc}); searching with the query",
                PBRFallbackWarning,
                stacklevel=2,
            )
            return q
        if not texts:
            warnings.warn(f"{self.kind}: no usable expansion for {query!r}", PBRFallbackWarning, stacklevel=2)
            return q
        return q + self.store.encoder.encode(texts).mean(axis=0)

    def _generate(self, prompts: list[list[Message]]) -> list[str]:
        out = self.llm.generate(prompts, max_tokens=_TOKENS, temperature=self.temperature, seed=self.seed)
        return [texts[0].strip() for texts in out]

    def _expand(self, user_id: str, query: str, q: np.ndarray) -> list[str]:
        if self.kind == "hyde":
            return [t for t in self._generate([_passage_prompt(query)] * self.n) if t]
        if self.kind == "q2t":
            prompt = _ask(
                f"List {self.n * 4} keywords or short phrases that a good answer to this question would "
                f"contain. Reply with a JSON list of strings.\nQuestion: {query}"
            )
            terms = extract_string_list(self._generate([prompt])[0], limit=self.n * 4)
            return [", ".join(terms)] if terms else []
        if self.kind == "cot":
            prompt = _ask(
                f"Answer the following question. Think step by step, then give the answer.\nQuestion: {query}"
            )
            return [t for t in self._generate([prompt]) if t]
        if self.kind == "thinkqe":
            return self._thinkqe(user_id, query)
        return self._mill(user_id, query, q)

    def _thinkqe(self, user_id: str, query: str) -> list[str]:
        think = _ask(
            "Think about what this question is really asking and what information would answer it, then "
            f"write a short passage with that information.\nQuestion: {query}"
        )
        first = self._generate([think])[0]
        if not first:
            return []
        expanded = self.store.encoder.encode([f"{query} {first}"])[0]
        seen = "\n".join(
            f"- {hit.record.text[:400]}"
            for hit in self._dense.search_vector(user_id, expanded, _FEEDBACK_DOCS)
        )
        refine = _ask(
            f"Question: {query}\nDraft answer: {first}\nRelated notes:\n{seen}\n"
            "Think again using the notes, then write an improved short passage that answers the question."
        )
        second = self._generate([refine])[0]
        return [t for t in (first, second) if t]

    def _mill(self, user_id: str, query: str, q: np.ndarray) -> list[str]:
        sub = _ask(
            f"Break this question into {self.n} simpler sub-questions and answer each in one sentence. "
            f'Reply with a JSON list of strings, each "sub-question: answer".\nQuestion: {query}'
        )
        sub_answers, passage = self._generate([sub, _passage_prompt(query)])  # one batched call
        generated = extract_string_list(sub_answers, limit=self.n)
        candidates = [t for t in (*generated, passage) if t]
        retrieved = [hit.record.text for hit in self._dense.search_vector(user_id, q, _FEEDBACK_DOCS)]
        if not candidates or not retrieved:
            return candidates
        # mutual verification: generated texts that agree with what retrieval found are trusted most
        agreement = self.store.encoder.encode(candidates) @ self.store.encoder.encode(retrieved).T
        order = np.argsort(-agreement.mean(axis=1), kind="stable")[:_MILL_KEEP]
        return [candidates[i] for i in order]
