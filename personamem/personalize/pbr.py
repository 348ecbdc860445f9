"""PBR (Personalize Before Retrieve): P-PRF pseudo feedback from the frozen LLM, fused with P-Anchor.

P-PRF: the user's top-k1 records for the raw query (H_q) show the LLM how this user writes; it returns
m pseudo utterances the user might say about the query (f_avg = mean of their embeddings) and a
step-by-step pseudo reasoning about what the user wants (r = its embedding). P-Anchor: a vector
summarizing the user's corpus (:mod:`personamem.personalize.anchor`). Fusion, with
b = (q + c_anchor) / 2:

    w1 = 1 + cos(b, f_avg),  w2 = 1 + cos(b, r),  q* = q + c_anchor + w1·f_avg + w2·r

Each part can be switched off for ablations (without both, q* = q: the Base retriever). LLM outputs
are cached durably per user (:meth:`Store.derived`), keyed by query, model, seed and the records
shown, so repeated evaluation does not pay twice. A failing or unparseable LLM degrades to the query
without P-PRF, with a :class:`PBRFallbackWarning`; it never raises.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import numpy as np

from personamem.errors import FallbackWarning, PBRFallbackWarning, warn_fallback
from personamem.llm import FrozenLLM, LLMError, Message
from personamem.llm.budget import fit_to_budget
from personamem.llm.parsing import extract_string_list
from personamem.records import Record
from personamem.retrieval.dense import DenseRetriever
from personamem.store import Store
from personamem.store.read import NOW, Read

__all__ = ["PBR", "PseudoFeedback", "UserAnchor", "cached_llm_outputs", "fuse"]

# Part of the cache key, which stores parsed outputs: a prompt or parser change must not reuse old ones.
# 2: only bulleted or numbered lines are list items.
PROMPT_VERSION = "2"
_RECORD_CHARS = 600  # one long session should not crowd the others out of H_q
_GENERATION_TOKENS = 256
_REQUESTS_PER_CALL = 16  # (user, query) pairs per batched LLM call: a failure loses only these


def cached_llm_outputs(
    store: Store,
    namespace: str,
    keys: Sequence[tuple[str, str]],
    compute: Callable[[list[int]], Sequence[Any]],
    *,
    who: str,
    fallback: str,
    category: type[FallbackWarning] = PBRFallbackWarning,
) -> list[Any | None]:
    """Cached LLM outputs per (user id, key), the misses computed in batches of a few requests.

    ``compute`` gets positions in ``keys`` and returns their outputs (one batched LLM call). A batch
    whose call fails gives None for each of its requests, with a warning of ``category`` naming
    ``who`` and the ``fallback``; the other batches are kept, so one failure loses at most a batch.
    Nothing of a failed batch is cached, so a later call asks again.
    """
    found: list[Any | None] = []
    for start in range(0, len(keys), _REQUESTS_PER_CALL):
        chunk = keys[start : start + _REQUESTS_PER_CALL]
        try:
            found += store.derived_many(namespace, chunk, partial(_shifted, compute, start))
        except LLMError as exc:
            warn_fallback(f"{who}: the LLM failed ({exc}); {fallback}", category, stacklevel=4)
            found += [None] * len(chunk)
    return found


def _shifted(compute: Callable[[list[int]], Sequence[Any]], offset: int, missing: list[int]) -> Sequence[Any]:
    """``compute`` for a batch's positions, which start at ``offset`` in the full request list."""
    return compute([offset + i for i in missing])


class UserAnchor(Protocol):
    """Anything that gives a user's P-Anchor vector (None for an unknown user)."""

    def anchor(self, user_id: str) -> np.ndarray | None:
        """The user's anchor c_anchor in the encoder's space."""
        ...


@dataclass(frozen=True)
class PseudoFeedback:
    """What the LLM said for one (user, query): pseudo utterances and a pseudo reasoning."""

    utterances: tuple[str, ...]
    reasoning: str


def fuse(
    query: np.ndarray, anchor: np.ndarray | None, utterances: np.ndarray | None, reasoning: np.ndarray | None
) -> np.ndarray:
    """q* from the query vector and whichever PBR parts are present (the paper's fusion rule).

    Args:
        query: q, a unit vector.
        anchor: c_anchor, or None without P-Anchor.
        utterances: the pseudo utterances' embeddings (one row each), or None without them.
        reasoning: r, or None without it.
    """
    centre = query + (anchor if anchor is not None else 0.0)
    fused = centre.copy()
    mid = centre / 2
    for part in (utterances.mean(axis=0) if utterances is not None and len(utterances) else None, reasoning):
        if part is not None:
            fused = fused + (1.0 + _cosine(mid, part)) * part
    return fused


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    denominator = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / denominator if denominator else 0.0


class PBR:
    """A :class:`~personamem.personalize.QueryPersonalizer`: q* from P-PRF and P-Anchor.

    Args:
        store: the user's records and the encoder.
        llm: the frozen LLM for P-PRF; None disables P-PRF (P-Anchor only).
        anchor: P-Anchor vectors per user; None disables P-Anchor.
        k1: records in H_q (the paper: 5).
        m: pseudo utterances asked for (the paper: 5).
        seed: sampling seed, part of the cache key.
        temperature: sampling temperature for the pseudo feedback.
    """

    def __init__(
        self,
        store: Store,
        llm: FrozenLLM | None,
        anchor: UserAnchor | None,
        *,
        k1: int = 5,
        m: int = 5,
        seed: int = 0,
        temperature: float = 0.7,
    ) -> None:
        if k1 < 1 or m < 1:
            raise ValueError(f"k1 and m must be at least 1, got k1={k1}, m={m}")
        self.store = store
        self.llm = llm
        self.anchor = anchor
        self.k1 = k1
        self.m = m
        self.seed = seed
        self.temperature = temperature
        self._dense = DenseRetriever(store)

    def personalize(self, user_id: str, query: str, read: Read = NOW) -> np.ndarray:
        """q* for this user and query (not normalized); the pseudo feedback searches what ``read`` sees."""
        encoder = self.store.encoder
        q = encoder.encode([query])[0]
        anchor = self.anchor.anchor(user_id) if self.anchor is not None else None
        feedback = self.feedback([(user_id, query)], q[None], read)[0] if self.llm is not None else None
        utterances = reasoning = None
        if feedback is not None:
            texts = [*feedback.utterances, *([feedback.reasoning] if feedback.reasoning else [])]
            vectors = encoder.encode(texts) if texts else np.zeros((0, len(q)), dtype=np.float32)
            utterances = vectors[: len(feedback.utterances)] if feedback.utterances else None
            reasoning = vectors[-1] if feedback.reasoning else None
        return fuse(q, anchor, utterances, reasoning)

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Fill the P-PRF cache for many (user id, query) pairs with batched LLM calls."""
        if self.llm is not None and requests:
            self.feedback(requests, self.store.encoder.encode([query for _, query in requests]))

    def feedback(
        self, requests: Sequence[tuple[str, str]], query_vectors: np.ndarray, read: Read = NOW
    ) -> list[PseudoFeedback | None]:
        """P-PRF per (user id, query), from the cache or batched LLM calls.

        None (with a warning) where the LLM failed or nothing usable came back.
        """
        assert self.llm is not None
        llm = self.llm
        asks = [
            ([hit.record for hit in self._dense.search_vector(user_id, vector, self.k1, read)], query)
            for (user_id, query), vector in zip(requests, query_vectors, strict=True)
        ]
        keys = [
            (
                user_id,
                _cache_key(query, llm.name, self.seed, self.m, self.temperature, [r.id for r in history]),
            )
            for (user_id, _), (history, query) in zip(requests, asks, strict=True)
        ]
        raw = cached_llm_outputs(
            self.store,
            "pbr-prf",
            keys,
            lambda missing: self._ask([asks[i] for i in missing]),
            who="PBR",
            fallback="searching without P-PRF",
        )
        found: list[PseudoFeedback | None] = []
        for (_, query), value in zip(requests, raw, strict=True):
            if value is not None and (value["utterances"] or value["reasoning"]):
                found.append(PseudoFeedback(tuple(value["utterances"]), value["reasoning"]))
                continue
            if value is not None:
                warn_fallback(
                    f"PBR: no usable pseudo feedback for {query!r}; searching without P-PRF",
                    PBRFallbackWarning,
                    stacklevel=3,
                )
            found.append(None)
        return found

    def _ask(self, asks: Sequence[tuple[Sequence[Record], str]]) -> list[dict[str, Any]]:
        """Both prompts for each (H_q, query) in one batched LLM call, parsed leniently."""
        assert self.llm is not None
        prompts = [p for h, q in asks for p in (self._utterance_prompt(h, q), self._reasoning_prompt(h, q))]
        out = self.llm.generate(
            prompts, max_tokens=_GENERATION_TOKENS, temperature=self.temperature, seed=self.seed
        )
        return [
            {
                "utterances": extract_string_list(out[2 * i][0], limit=self.m, stage="pbr utterances"),
                "reasoning": out[2 * i + 1][0].strip(),
            }
            for i in range(len(asks))
        ]

    def _history_text(self, history: Sequence[Record], frame: str) -> str:
        assert self.llm is not None
        budget = self.llm.context_window - _GENERATION_TOKENS - self.llm.count_tokens(frame) - 32
        shown = [r.text if len(r.text) <= _RECORD_CHARS else r.text[:_RECORD_CHARS] + " …" for r in history]
        return fit_to_budget(shown, max(0, budget), self.llm.count_tokens, render=lambda t: f"- {t}").text

    def _utterance_prompt(self, history: Sequence[Record], query: str) -> list[Message]:
        frame = (
            "Below are things one particular person wrote or did. Their new request is: {query}\n"
            "Write {m} short messages this same person might write about that request: their own voice, "
            "their concerns, their wording. Reply with only a JSON list of {m} strings."
        )
        text = frame.format(query=query, m=self.m)
        return [{"role": "user", "content": f"{self._history_text(history, text)}\n\n{text}"}]

    def _reasoning_prompt(self, history: Sequence[Record], query: str) -> list[Message]:
        frame = (
            "Below are things one particular person wrote or did. Their new request is: {query}\n"
            "Reason step by step about what this person most likely wants, given what you know about them, "
            "and write that reasoning in a few sentences."
        )
        text = frame.format(query=query)
        return [{"role": "user", "content": f"{self._history_text(history, text)}\n\n{text}"}]


def _cache_key(query: str, model: str, seed: int, m: int, temperature: float, shown: list[str]) -> str:
    payload = json.dumps([PROMPT_VERSION, query, model, seed, m, temperature, shown], ensure_ascii=False)
    return hashlib.sha256(payload.encode()).hexdigest()
