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
from collections.abc import Sequence
from typing import Literal

import numpy as np

from personamem.errors import PBRFallbackWarning, warn_fallback
from personamem.llm import FrozenLLM, Message
from personamem.llm.parsing import extract_string_list
from personamem.personalize.pbr import cached_llm_outputs
from personamem.retrieval.dense import DenseRetriever
from personamem.store import Store
from personamem.store.read import NOW, Read

__all__ = ["EXPANSIONS", "Expansion", "LLMExpansion"]

Expansion = Literal["hyde", "q2t", "cot", "thinkqe", "mill"]
EXPANSIONS: tuple[Expansion, ...] = ("hyde", "q2t", "cot", "thinkqe", "mill")
# Part of the cache key, which stores parsed outputs: bumped by a prompt or parser change.
# 2: MILL shares HyDE's passage prompt; 3: only bulleted or numbered lines are list items.
PROMPT_VERSION = "3"
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

    def personalize(self, user_id: str, query: str, read: Read = NOW) -> np.ndarray:
        """The query vector moved toward the expansions' mean embedding (the query alone on fallback).

        The expansions that read the user's notes (``thinkqe``, ``mill``) search what ``read`` sees.
        """
        q = self.store.encoder.encode([query])[0]
        texts = self.expansions([(user_id, query)], q[None], read)[0]
        return q if texts is None else q + self.store.encoder.encode(texts).mean(axis=0)

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Fill the expansion cache for many (user id, query) pairs with batched LLM calls."""
        if requests:
            self.expansions(requests, self.store.encoder.encode([query for _, query in requests]))

    def expansions(
        self, requests: Sequence[tuple[str, str]], query_vectors: np.ndarray, read: Read = NOW
    ) -> list[list[str] | None]:
        """The expansion texts per (user id, query), from the cache or batched LLM calls.

        None (with a warning) where the LLM failed or gave nothing usable.
        """
        texts = cached_llm_outputs(
            self.store,
            f"expansion-{self.kind}",
            [(user_id, self._cache_key(query)) for user_id, query in requests],
            lambda missing: self._expand([requests[i] for i in missing], query_vectors[missing], read),
            who=self.kind,
            fallback="searching with the query",
        )
        for (_, query), expansion in zip(requests, texts, strict=True):
            if expansion is not None and not expansion:
                warn_fallback(
                    f"{self.kind}: no usable expansion for {query!r}", PBRFallbackWarning, stacklevel=3
                )
        return [expansion or None for expansion in texts]

    def _cache_key(self, query: str) -> str:
        payload = [PROMPT_VERSION, self.kind, query, self.llm.name, self.seed, self.n, self.temperature]
        return hashlib.sha256(json.dumps(payload).encode()).hexdigest()

    def _generate(self, prompts: list[list[Message]], n: int = 1) -> list[list[str]]:
        out = self.llm.generate(
            prompts, n=n, max_tokens=_TOKENS, temperature=self.temperature, seed=self.seed
        )
        return [[t.strip() for t in texts] for texts in out]

    def _expand(self, asks: list[tuple[str, str]], vectors: np.ndarray, read: Read) -> list[list[str]]:
        """The expansion texts for each (user id, query), with one batched LLM call per round."""
        queries = [query for _, query in asks]
        if self.kind == "hyde":
            return [
                [t for t in group if t]
                for group in self._generate([_passage_prompt(q) for q in queries], self.n)
            ]
        if self.kind == "q2t":
            prompts = [
                _ask(
                    f"List {self.n * 4} keywords or short phrases that a good answer to this question would "
                    f"contain. Reply with a JSON list of strings.\nQuestion: {q}"
                )
                for q in queries
            ]
            terms = [
                extract_string_list(group[0], limit=self.n * 4, stage="q2t terms")
                for group in self._generate(prompts)
            ]
            return [[", ".join(t)] if t else [] for t in terms]
        if self.kind == "cot":
            prompts = [
                _ask(
                    f"Answer the following question. Think step by step, then give the answer.\nQuestion: {q}"
                )
                for q in queries
            ]
            return [[t for t in group if t] for group in self._generate(prompts)]
        if self.kind == "thinkqe":
            return self._thinkqe(asks, read)
        return self._mill(asks, vectors, read)

    def _thinkqe(self, asks: list[tuple[str, str]], read: Read) -> list[list[str]]:
        thinks = [
            _ask(
                "Think about what this question is really asking and what information would answer it, then "
                f"write a short passage with that information.\nQuestion: {query}"
            )
            for _, query in asks
        ]
        firsts = [group[0] for group in self._generate(thinks)]
        expanded = self.store.encoder.encode(
            [f"{query} {first}" for (_, query), first in zip(asks, firsts, strict=True)]
        )
        refines = []
        for (user_id, query), first, vector in zip(asks, firsts, expanded, strict=True):
            seen = "\n".join(
                f"- {hit.record.text[:400]}"
                for hit in self._dense.search_vector(user_id, vector, _FEEDBACK_DOCS, read)
            )
            refines.append(
                _ask(
                    f"Question: {query}\nDraft answer: {first}\nRelated notes:\n{seen}\n"
                    "Think again using the notes, then write an improved short passage that answers the "
                    "question."
                )
            )
        seconds = [group[0] for group in self._generate(refines)]
        return [
            [t for t in (first, second) if t] if first else []
            for first, second in zip(firsts, seconds, strict=True)
        ]

    def _mill(self, asks: list[tuple[str, str]], vectors: np.ndarray, read: Read) -> list[list[str]]:
        prompts = []
        for _, query in asks:
            prompts += [
                _ask(
                    f"Break this question into {self.n} simpler sub-questions and answer each in one "
                    'sentence. Reply with a JSON list of strings, each "sub-question: answer".\n'
                    f"Question: {query}"
                ),
                _passage_prompt(query),
            ]
        out = self._generate(prompts)
        kept = []
        for i, ((user_id, _), q) in enumerate(zip(asks, vectors, strict=True)):
            generated = extract_string_list(out[2 * i][0], limit=self.n, stage="mill sub-questions")
            candidates = [t for t in (*generated, out[2 * i + 1][0]) if t]
            retrieved = [
                hit.record.text for hit in self._dense.search_vector(user_id, q, _FEEDBACK_DOCS, read)
            ]
            if not candidates or not retrieved:
                kept.append(candidates)
                continue
            # mutual verification: generated texts that agree with what retrieval found are trusted most
            agreement = self.store.encoder.encode(candidates) @ self.store.encoder.encode(retrieved).T
            order = np.argsort(-agreement.mean(axis=1), kind="stable")[:_MILL_KEEP]
            kept.append([candidates[j] for j in order])
        return kept
