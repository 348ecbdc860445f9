"""The personalization pipeline: query personalizer → first stage → profile selector → token budget.

One object runs every method: :meth:`Pipeline.search` ranks (the profile first, then the other
candidates, so retrieval metrics stay defined) and :meth:`Pipeline.context` returns what an
application pastes into its prompt. The harness, the SDK, the CLI and the adapters all call these
two methods, so a method name ranks the same everywhere.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import InvalidInputError, LLMError, collect_fallbacks
from personamem.llm.base import FrozenLLM, Usage
from personamem.llm.budget import fit_to_budget
from personamem.personalize import QueryPersonalizer
from personamem.pipeline.config import PipelineConfig
from personamem.pipeline.metered import MeteredLLM, metering
from personamem.pipeline.prompt import render_record
from personamem.pipeline.stages import build_personalizer, build_selector
from personamem.profile import ProfileSelector
from personamem.records import check_user_id
from personamem.retrieval import BM25Retriever, DenseRetriever, Hit, HybridRetriever, Preparable
from personamem.retrieval.base import ranked
from personamem.store import Store

__all__ = ["Context", "Pipeline"]


@dataclass(frozen=True)
class Context:
    """What the LLM should see for one query, and what it cost to find.

    Attributes:
        text: the rendered context (preference memory, then one line per record), within budget.
        hits: the records in ``text``, in order, with the score of the stage that placed them.
        dropped: profile records left out because they did not fit the budget.
        tokens: tokens ``text`` takes.
        budget_tokens: the budget it was fitted to.
        usage: LLM tokens this call cost (outputs served from the cache cost none).
        timings_ms: milliseconds per stage.
        warnings: LLM stages that fell back to the stage without them, and why.
        memory: the user's preference memory, when one is configured (the MemRerank slot).
    """

    text: str
    hits: list[Hit]
    dropped: list[Hit]
    tokens: int
    budget_tokens: int
    usage: Usage = field(default_factory=Usage)
    timings_ms: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    memory: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (records as id, score, rank and text)."""
        return {
            "text": self.text,
            "records": [_hit_json(h) for h in self.hits],
            "dropped": [_hit_json(h) for h in self.dropped],
            "tokens": self.tokens,
            "budget_tokens": self.budget_tokens,
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "completion_tokens": self.usage.completion_tokens,
            },
            "timings_ms": self.timings_ms,
            "warnings": self.warnings,
            "memory": self.memory,
        }


def _hit_json(hit: Hit) -> dict[str, Any]:
    return {"id": hit.record.id, "score": hit.score, "rank": hit.rank, "text": hit.record.text}


class Pipeline:
    """The configured stages over one store; safe to share across threads.

    Args:
        store: the users' records.
        config: which stages run (names); see :class:`PipelineConfig`.
        llm: the frozen LLM for LLM stages (wrapped to meter usage and enforce the deadline).
        personalizer: your own query personalizer, instead of ``config.personalizer``.
        selector: your own profile selector, instead of ``config.selector``.
        bm25: a BM25 retriever to share (its per-user index cache), instead of a new one.

    Raises:
        MethodError: a stage needs an LLM and ``llm`` is None.
        CheckpointError: a PURPLE checkpoint cannot be loaded.
        ValueError: a personalizer of your own over the bm25 first stage (which takes no vector).
    """

    def __init__(
        self,
        store: Store,
        config: PipelineConfig | None = None,
        *,
        llm: FrozenLLM | None = None,
        personalizer: QueryPersonalizer | None = None,
        selector: ProfileSelector | None = None,
        bm25: BM25Retriever | None = None,
    ) -> None:
        self.store = store
        self.config = config = config or PipelineConfig()
        self.llm = MeteredLLM(llm) if llm is not None else None
        self.personalizer = personalizer or build_personalizer(
            config.personalizer, store, self.llm, config.seed
        )
        self.selector = selector or build_selector(config.selector, store, self.llm, config.seed)
        if self.personalizer is not None and config.first_stage == "bm25":
            raise ValueError("a query personalizer gives a vector: use the dense or hybrid first stage")
        self._dense = DenseRetriever(store)
        self._bm25 = bm25 or BM25Retriever(store)
        # a user's records come back for many queries: their lines are counted once
        self._count_tokens = functools.lru_cache(maxsize=8192)(_token_counter(self.llm, store.encoder))

    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        """The profile, then the other candidates, cut to ``k`` (no selector: the first stage's top ``k``)."""
        _check(user_id, query)
        with metering(self.config.llm_timeout_s):
            if self.selector is None:
                return self._candidates(user_id, query, k, {})
            pool = self._candidates(user_id, query, self.config.candidates, {})
            profile = self._select(user_id, query, pool, {})
            chosen = {hit.record.id for hit in profile}
            rest = [(hit.record, 0.0) for hit in pool if hit.record.id not in chosen]
            return ranked([(hit.record, hit.score) for hit in profile] + rest)[:k]

    def context(self, user_id: str, query: str, *, budget_tokens: int | None = None) -> Context:
        """The profile for ``query``, rendered and fitted to ``budget_tokens`` (default: the config's)."""
        _check(user_id, query)
        budget = self.config.budget_tokens if budget_tokens is None else budget_tokens
        if budget < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget}")
        timings: dict[str, float] = {}
        with collect_fallbacks() as notes, metering(self.config.llm_timeout_s) as usages:
            if self.selector is None:
                profile = self._candidates(user_id, query, self.config.profile_k, timings)
            else:
                pool = self._candidates(user_id, query, self.config.candidates, timings)
                profile = self._select(user_id, query, pool, timings)
            start = time.perf_counter()
            fitted = fit_to_budget(
                profile, budget, self._count_tokens, render=lambda h: render_record(h.record)
            )
            timings["fit"] = _ms(start)
        return Context(
            text=fitted.text,
            hits=fitted.kept,
            dropped=fitted.dropped,
            tokens=fitted.tokens,
            budget_tokens=budget,
            usage=sum(usages, Usage()),
            timings_ms=timings,
            warnings=list(notes),
        )

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Let the personalizer batch its LLM calls for many queries (a no-op if it cannot)."""
        if isinstance(self.personalizer, Preparable):
            self.personalizer.prepare(requests)

    def _candidates(self, user_id: str, query: str, n: int, timings: dict[str, float]) -> list[Hit]:
        """The first stage's top ``n``, searched with the personalized vector where there is one."""
        start = time.perf_counter()
        vector = None
        if self.personalizer is not None:
            vector = _unit(
                np.asarray(self.personalizer.personalize(user_id, query), dtype=np.float32), user_id
            )
            timings["personalize"] = _ms(start)
            start = time.perf_counter()
        stage = self.config.first_stage
        if stage == "bm25":
            hits = self._bm25.search(user_id, query, n)
        else:
            if vector is None:
                vector = self.store.encoder.encode([query])[0]
            dense = _VectorSearch(self._dense, vector)
            both = HybridRetriever([dense, self._bm25])
            hits = dense.search(user_id, query, n) if stage == "dense" else both.search(user_id, query, n)
        timings["first_stage"] = _ms(start)
        return hits

    def _select(self, user_id: str, query: str, pool: list[Hit], timings: dict[str, float]) -> list[Hit]:
        assert self.selector is not None
        start = time.perf_counter()
        records = [hit.record for hit in pool]
        profile = (
            self.selector.select(user_id, query, records, min(self.config.profile_k, len(records)))
            if records
            else []
        )
        if not {hit.record.id for hit in profile} <= {record.id for record in records}:
            raise ValueError("the selector returned a record that was not among the candidates")
        timings["select"] = _ms(start)
        return profile


@dataclass(frozen=True)
class _VectorSearch:
    """Dense search with a ready query vector, as a retriever (so hybrid fuses it like any other)."""

    dense: DenseRetriever
    vector: np.ndarray

    def search(self, user_id: str, query: str, k: int) -> list[Hit]:
        return self.dense.search_vector(user_id, self.vector, k)


def _check(user_id: object, query: object) -> None:
    check_user_id(user_id)
    if not isinstance(query, str):
        raise InvalidInputError(f"query must be a string, got {query!r}")


def _unit(vector: np.ndarray, user_id: str) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise ValueError(f"personalized query vector for user {user_id!r} has norm {norm}")
    return vector / norm


def _token_counter(llm: FrozenLLM | None, encoder: Encoder) -> Callable[[str], int]:
    """The LLM's tokenizer, else the encoder's word pieces, else ~4 characters a token.

    An LLM that cannot count (a remote one given no tokenizer) counts as no LLM here.
    """
    if llm is not None:
        try:
            llm.count_tokens("probe")
            return llm.count_tokens
        except LLMError:
            pass
    count = getattr(encoder, "count_tokens", None)
    if count is not None:
        return lambda text: int(count([text])[0])
    return lambda text: math.ceil(len(text) / 4)


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0
