"""The personalization pipeline: query personalizer → first stage → profile selector → token budget.

One object runs every method: :meth:`Pipeline.search` ranks (the profile first, then the other
candidates, so retrieval metrics stay defined) and :meth:`Pipeline.context` returns what an
application pastes into its prompt. The harness, the SDK, the CLI and the adapters all call these
two methods, so a method name ranks the same everywhere.

With a preference memory configured, the context has one format::

    Preferences:
    WITHIN skincare:
    - prefers fragrance-free moisturizers
    CROSS:
    - buys travel sizes

    Records:
    - I bought the travel-size cleanser again.

The memory (evidence stripped) comes first and the records take the budget it leaves; a memory
longer than the budget is cut from its last statement. Without a memory, or with an empty one, the
context is the record lines alone, as it always was.
"""

from __future__ import annotations

import functools
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import numpy as np

from personamem.contract import Context, Hits
from personamem.encoder import Encoder
from personamem.errors import (
    InvalidInputError,
    LLMError,
    PersonaMemWarning,
    StoreError,
    collect_fallbacks,
)
from personamem.interactions import Call
from personamem.interleaving import Draft
from personamem.llm.base import FrozenLLM
from personamem.llm.budget import Fitted, fit_to_budget
from personamem.personalize import QueryPersonalizer
from personamem.pipeline.config import PipelineConfig
from personamem.pipeline.diversity import distinct, mmr
from personamem.pipeline.metered import MeteredLLM, metering
from personamem.pipeline.prompt import render_record
from personamem.pipeline.stages import (
    build_first_stage,
    build_memories,
    build_personalizer,
    build_query_encoder,
    build_selector,
    resolve_query_encoder,
    resolve_ranker,
)
from personamem.preference import PreferenceMemories
from personamem.profile import ProfileSelector, QueryVectorSelector
from personamem.records import check_user_id
from personamem.retrieval import BM25Retriever, Hit, Preparable
from personamem.retrieval.base import ranked
from personamem.retrieval.first_stage import RankedStage
from personamem.store import Store
from personamem.store.read import NOW, Read
from personamem.telemetry import staged

__all__ = ["MEMORY_HEADER", "RECORDS_HEADER", "Context", "Hits", "Pipeline"]

MEMORY_HEADER = "Preferences:"
"""The line before the preference memory in a context."""
RECORDS_HEADER = "Records:"
"""The line before the records in a context that has a preference memory."""
_MAX_DEPTH = 8  # times candidates the first stage is searched for distinct records, at most


class Pipeline:
    """The configured stages over one store; safe to share across threads.

    Args:
        store: the users' records.
        config: which stages run (names); see :class:`PipelineConfig`.
        llm: the frozen LLM for LLM stages (wrapped to meter usage and enforce the deadline).
        personalizer: your own query personalizer, instead of ``config.personalizer``.
        selector: your own profile selector, instead of ``config.selector``.
        bm25: a BM25 retriever to share (its per-user index cache), instead of a new one.
        memories: preference memories to share (their extractor and running rebuilds), instead of
            new ones from ``config.preference_memory``.
        name: what the interaction log records as the method (a method name, or ``pipeline``).

    Attributes:
        memories: the users' preference memories (None: the pipeline has none).
        query_encoder: encodes the query for dense search (the store's encoder, an adapter, a tower).
        query_encoder_name: its name, ``auto`` resolved (``adapter:mixed`` or ``base``).
        first: the first stage the config's row built (``retrieval/first_stage.py``), with the ranker
            over it where one runs; the one thing a search calls for candidates.
        ranker, ranker_name: the learned ranker reordering hybrid's candidates (None: none).
        dense_weight, rrf_k: hybrid's weight of the dense ranking (BM25's is 1 − it) and RRF's k.

    Raises:
        MethodError: a stage needs an LLM and ``llm`` is None.
        CheckpointError: a PURPLE, MemRerank or PG-Ret checkpoint cannot be loaded (a PG-Ret
            tower trained against another record encoder among them).
        MissingExtraError: a MemRerank checkpoint without peft installed.
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
        memories: PreferenceMemories | None = None,
        name: str = "pipeline",
    ) -> None:
        self.store = store
        self.name = name
        self.config = config = config or PipelineConfig()
        self.llm = MeteredLLM(llm) if llm is not None else None
        # the memory's LLM is not metered: a rebuild outlives the call that started it
        self.memories = memories if memories is not None else build_memories(config, store, llm)
        self.personalizer = personalizer or build_personalizer(
            config.personalizer, store, self.llm, config.seed
        )
        self.selector = selector or build_selector(config.selector, store, self.llm, config.seed)
        if self.personalizer is not None and not config.first_stage_row.takes_vector:
            raise ValueError("a query personalizer gives a vector: use the dense or hybrid first stage")
        self.query_encoder_name = resolve_query_encoder(config, store)
        self.query_encoder = build_query_encoder(self.query_encoder_name, store)
        self.dense_weight, self.rrf_k = fusion = config.fusion(self.query_encoder_name)
        self.ranker_name = resolve_ranker(config, self.query_encoder_name)
        self.first = build_first_stage(
            config,
            store,
            query_encoder=self.query_encoder,
            fusion=fusion,
            bm25=bm25 or BM25Retriever(store),
            ranker=self.ranker_name,
        )
        self.ranker = self.first.ranker if isinstance(self.first, RankedStage) else None
        # a user's records come back for many queries: their lines are counted once
        self._count_tokens = functools.lru_cache(maxsize=8192)(_token_counter(self.llm, store.encoder))

    def search(
        self, user_id: str, query: str, k: int, read: Read = NOW, *, draft: Draft | None = None
    ) -> Hits:
        """The profile, then the other candidates, cut to ``k`` (no selector: the first stage's top ``k``).

        Every stage reads the user's records as ``read`` sees them (its time and filter).
        ``diversity`` and near-duplicates change only what :meth:`context` shows, never this
        ranking, so a search without a method stays the first stage's. A ``draft`` interleaves a
        candidate's ranking with it (``personamem/interleaving.py``) and the log keeps which placed
        what.
        """
        _check(user_id, query)
        timings: dict[str, float] = {}
        with metering(self.config.llm_timeout_s) as meter:
            if self.selector is None:
                found, _ = self._candidates(user_id, query, k, timings, read)
            else:
                pool, vector = self._candidates(user_id, query, self.config.candidates, timings, read)
                profile = self._select(user_id, query, pool, vector, timings)
                chosen = {hit.record.id for hit in profile}
                rest = [(hit.record, 0.0) for hit in pool if hit.record.id not in chosen]
                found = ranked([(hit.record, hit.score) for hit in profile] + rest)[:k]
            if draft is not None:
                found = draft.search(user_id, query, found, k, read)
        return Hits(
            found,
            interaction_id=self._log(user_id, "search", query, found, draft=draft),
            usage=meter.usage,
            timings_ms=timings,
        )

    def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        draft: Draft | None = None,
        read: Read = NOW,
    ) -> Context:
        """The profile for ``query`` from what ``read`` sees, fitted to ``budget_tokens`` (default: config's).

        Without a selector the profile is the first stage's top ``profile_k`` with near-duplicates
        skipped and, at a ``diversity`` above 0, picked for coverage too (``pipeline/diversity.py``); so it
        may hold records below :meth:`search`'s top ``profile_k``, whose ranking never changes. A
        selector's profile is its own choice: it is left as the selector made it. A ``draft``
        interleaves a candidate's profile with it before the budget is fitted.
        """
        _check(user_id, query)
        budget = self.config.budget_tokens if budget_tokens is None else budget_tokens
        if budget < 0:
            raise ValueError(f"budget_tokens must be >= 0, got {budget}")
        timings: dict[str, float] = {}
        with collect_fallbacks() as notes, metering(self.config.llm_timeout_s) as meter:
            memory = self._memory(user_id, timings)
            profile = self._profile(user_id, query, timings, read)
            if draft is not None:
                profile = draft.profile(user_id, query, profile, read)
            start = time.perf_counter()
            fitted, shown = self._fit(memory, profile, budget)
            timings["fit"] = _ms(start)
        if memory is not None and shown < len(memory):
            notes.append(f"preference memory cut to {shown} of {len(memory)} line(s) to fit {budget} tokens")
        usage, served = meter.usage, self.served_first_stage(user_id)
        trace = {  # what the LLM was shown and what it cost, for the inspector's calls page
            "text": fitted.text,
            "tokens": fitted.tokens,
            "budget_tokens": budget,
            "timings_ms": timings,
            "warnings": list(notes),
            "usage": asdict(usage),
            "first_stage": served,
        }
        return Context(
            text=fitted.text,
            hits=[item for item in fitted.kept if isinstance(item, Hit)],
            dropped=[item for item in fitted.dropped if isinstance(item, Hit)],
            tokens=fitted.tokens,
            budget_tokens=budget,
            usage=usage,
            timings_ms=timings,
            warnings=list(notes),
            memory=None if memory is None else "\n".join(memory[:shown]),
            interaction_id=self._log(user_id, "context", query, fitted.kept, trace, draft=draft),
            first_stage=served,
        )

    @property
    def first_stage(self) -> dict[str, Any]:
        """The first stage's settings and why they serve (what ``Context.first_stage`` reports)."""
        config = self.config
        served: dict[str, Any] = {"first_stage": config.first_stage, "query_encoder": self.query_encoder_name}
        if config.first_stage == "hybrid":
            served["dense_weight"], served["rrf_k"] = self.dense_weight, self.rrf_k
            served["ranker"] = self.ranker_name or "none"
        served["chosen_by"] = config.chosen_by or "default"
        return served

    def served_first_stage(self, user_id: str) -> dict[str, Any]:
        """:attr:`first_stage` as it served ``user_id``: hybrid where the ranker cannot (and why)."""
        served = self.first_stage
        if not isinstance(self.first, RankedStage):
            return served
        skipped = self.first.hybrid_because(user_id, self.personalizer is not None)
        return served if skipped is None else {**served, "ranker": "none", "ranker_skipped": skipped}

    def profile(self, user_id: str, query: str, read: Read = NOW) -> list[Hit]:
        """What :meth:`context` would show before the budget is fitted (a trial's candidate side)."""
        _check(user_id, query)
        with metering(self.config.llm_timeout_s):
            return self._profile(user_id, query, {}, read)

    def _profile(self, user_id: str, query: str, timings: dict[str, float], read: Read) -> list[Hit]:
        if self.selector is None:
            return self._diverse(user_id, query, timings, read)
        pool, vector = self._candidates(user_id, query, self.config.candidates, timings, read)
        return self._select(user_id, query, pool, vector, timings)

    def _log(
        self,
        user_id: str,
        call: Call,
        query: str,
        shown: Sequence[object],
        trace: dict[str, Any] | None = None,
        *,
        draft: Draft | None = None,
    ) -> str | None:
        """The call's interaction id where the config logs interactions, else None."""
        if not self.config.log_interactions:
            return None
        hits = [(item.record.id, item.score) for item in shown if isinstance(item, Hit)]
        interleaved = None if draft is None else draft.logged
        try:
            return self.store.interactions.log(user_id, call, self.name, query, hits, trace, interleaved)
        except StoreError as exc:  # the answer stands; only its log entry is lost
            warnings.warn(f"interaction not logged: {exc}", PersonaMemWarning, stacklevel=3)
            return None

    @staged("memory")
    def _memory(self, user_id: str, timings: dict[str, float]) -> list[str] | None:
        """The lines of the user's preference memory as an LLM is shown it (None: no memory configured).

        A rebuild past ``memory_timeout_s`` or a failed one gives the older memory and a warning.
        """
        if self.memories is None:
            return None
        start = time.perf_counter()
        lines = self.memories.get(user_id).text().splitlines()
        timings["memory"] = _ms(start)
        return lines

    @staged("fit")
    def _fit(
        self, memory: list[str] | None, profile: list[Hit], budget: int
    ) -> tuple[Fitted[str | Hit], int]:
        """The context's lines fitted to ``budget``, and how many memory lines it kept.

        The memory's lines and the records are one list for :func:`fit_to_budget`, so the memory is
        kept first and the joined text, headers included, is what is counted. A cut that leaves a
        header or a blank line last drops it.
        """
        lines = memory or []
        items: list[str | Hit] = [MEMORY_HEADER, *lines, "", RECORDS_HEADER] if lines else []
        items += profile
        fitted = fit_to_budget(items, budget, self._count_tokens, render=_render)
        kept = list(fitted.kept)
        while kept and isinstance(kept[-1], str) and not kept[-1].startswith("- "):
            kept.pop()  # a section header, the blank line or a header with nothing under it
        shown = min(max(len(kept) - 1, 0), len(lines))  # kept[0] is the header
        if len(kept) == len(fitted.kept):
            return fitted, shown
        text = "\n".join(map(_render, kept))
        cut = Fitted(kept, list(items[len(kept) :]), text, self._count_tokens(text) if text else 0)
        return cut, shown

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Let the personalizer batch its LLM calls for many queries (a no-op if it cannot)."""
        if isinstance(self.personalizer, Preparable):
            self.personalizer.prepare(requests)

    def _candidates(
        self, user_id: str, query: str, n: int, timings: dict[str, float], read: Read
    ) -> tuple[list[Hit], np.ndarray | None]:
        """The first stage's top ``n`` (for the personalized vector where there is one) and its query vector.

        The vector is returned only where it is the store encoder's own encoding of the query, the one
        a selector on vectors would compute again; None elsewhere.
        """
        personalized = self._personalized(user_id, query, timings, read)
        hits, vector = self._first_stage(user_id, query, personalized, n, timings, read)
        plain = personalized is None and self.query_encoder_name == "base"
        return hits, vector if plain else None

    @staged("personalize")
    def _personalized(
        self, user_id: str, query: str, timings: dict[str, float], read: Read
    ) -> np.ndarray | None:
        """The personalizer's query vector (None: no personalizer)."""
        if self.personalizer is None:
            return None
        start = time.perf_counter()
        personalized = self.personalizer.personalize(user_id, query, read)
        vector = _unit(np.asarray(personalized, dtype=np.float32), user_id)
        timings["personalize"] = _ms(start)
        return vector

    @staged("first_stage")
    def _first_stage(
        self,
        user_id: str,
        query: str,
        vector: np.ndarray | None,
        n: int,
        timings: dict[str, float],
        read: Read,
    ) -> tuple[list[Hit], np.ndarray | None]:
        """The first stage's top ``n`` for ``query`` (or ``vector``) and the vector it searched with.

        The vector is None for BM25 and the ranker, which encode nothing here.
        """
        start = time.perf_counter()
        found = self.first.candidates(user_id, query, n, vector, read)
        timings["first_stage"] = timings.get("first_stage", 0.0) + _ms(start)
        return found

    def _diverse(self, user_id: str, query: str, timings: dict[str, float], read: Read) -> list[Hit]:
        """The profile: the first stage's best distinct records, by MMR over its top ``candidates``.

        A record within ``duplicate_cosine`` of a better-ranked one is skipped; while the skipped
        leave too few, the first stage is searched twice as deep (to ``_MAX_DEPTH`` times), so
        repeats of one turn cannot crowd the rest out. Redundancy uses the stored vectors of the
        results only (read as a search reads them; encoding 20 candidates would cost about 75 ms).
        """
        config = self.config
        vector = self._personalized(user_id, query, timings, read)
        want = config.profile_k if config.diversity == 0 else max(config.candidates, config.profile_k)
        depth = max(config.candidates, config.profile_k)
        while True:
            hits, _ = self._first_stage(user_id, query, vector, depth, timings, read)
            start = time.perf_counter()
            matrix = self.store.record_vectors(user_id, [hit.record.id for hit in hits])
            pool = distinct(matrix, config.duplicate_cosine) if hits else []
            timings["first_stage"] += _ms(start)  # about a millisecond: not a stage of its own
            if len(pool) >= want or len(hits) < depth or depth >= _MAX_DEPTH * want:
                break
            depth *= 2
        picked = mmr(matrix[pool[:want]], config.profile_k, config.diversity) if pool else []
        return [hits[pool[i]] for i in picked]

    @staged("select")
    def _select(
        self,
        user_id: str,
        query: str,
        pool: list[Hit],
        vector: np.ndarray | None,
        timings: dict[str, float],
    ) -> list[Hit]:
        assert self.selector is not None
        start = time.perf_counter()
        records = [hit.record for hit in pool]
        k = min(self.config.profile_k, len(records))
        if not records:
            profile = []
        elif vector is not None and isinstance(self.selector, QueryVectorSelector):
            profile = self.selector.select_with_vector(user_id, query, vector, records, k)
        else:
            profile = self.selector.select(user_id, query, records, k)
        if not {hit.record.id for hit in profile} <= {record.id for record in records}:
            raise ValueError("the selector returned a record that was not among the candidates")
        timings["select"] = _ms(start)
        return profile


def _render(item: str | Hit) -> str:
    """A context line: a memory line or header as is, a record as a profile line."""
    return item if isinstance(item, str) else render_record(item.record)


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
