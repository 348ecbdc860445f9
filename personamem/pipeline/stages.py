"""Built-in stages by name: the personalizers, profile selectors and preference memories a config names.

Each builder returns ``None`` for ``"none"``; a user's own :class:`QueryPersonalizer` or
:class:`ProfileSelector` is passed to :class:`~personamem.pipeline.Pipeline` directly instead.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from personamem.encoder import Encoder, SentenceEncoder
from personamem.errors import MethodError
from personamem.llm.base import FrozenLLM
from personamem.personalize import EXPANSIONS, PBR, LLMExpansion, PAnchor, QueryPersonalizer
from personamem.pipeline.config import ADAPTER_FUSION, DEFAULT_ADAPTER, DEFAULT_RANKER, PipelineConfig
from personamem.preference import PreferenceMemories, PromptedExtractor
from personamem.profile import (
    EarliestSelector,
    ListwiseSelector,
    ProfileSelector,
    RandomSelector,
    RelevanceSelector,
)
from personamem.retrieval.bm25 import BM25Retriever
from personamem.store import Store

if TYPE_CHECKING:
    from personamem.retrieval.ranker import LearnedRanker

__all__ = [
    "build_extractor",
    "build_memories",
    "build_personalizer",
    "build_query_encoder",
    "build_ranker",
    "build_selector",
    "resolve_query_encoder",
    "resolve_ranker",
]

_TOKENS_PER_WORD = 1.6
"""Tokens an extractor may write per memory word: headers and evidence labels cost tokens too (the
extractor's own default is 192 tokens for 120 words)."""


def build_personalizer(name: str, store: Store, llm: FrozenLLM | None, seed: int) -> QueryPersonalizer | None:
    """The personalizer called ``name`` (see :data:`~personamem.pipeline.config.PERSONALIZERS`)."""
    if name == "none":
        return None
    if name == "pbr-no-prf":
        return PBR(store, None, PAnchor(store), seed=seed)
    if llm is None:
        raise MethodError(f"personalizer {name!r} needs a frozen LLM")
    if name in ("pbr", "pbr-no-anchor"):
        return PBR(store, llm, PAnchor(store) if name == "pbr" else None, seed=seed)
    if name in EXPANSIONS:
        return LLMExpansion(store, llm, name, seed=seed)  # type: ignore[arg-type]  # checked just above
    if name.startswith("rewrite-"):
        from personamem.rewriting.personalizer import RewritePersonalizer

        return RewritePersonalizer(store, llm, name.removeprefix("rewrite-"), seed=seed)  # type: ignore[arg-type]
    raise MethodError(f"unknown personalizer {name!r}")


def resolve_query_encoder(config: PipelineConfig, store: Store) -> str:
    """The query encoder ``config`` names, with ``auto`` resolved for ``store``.

    ``auto`` is the shipped adapter when the config can use one and the adapter was fitted to the
    store's encoder; any other encoder gets ``base``, so a store built with a model of its own keeps
    working unchanged.
    """
    if config.query_encoder != "auto":
        return config.query_encoder
    if config.wants_adapter:
        from personamem.retrieval.query_adapter import fits

        if fits(DEFAULT_ADAPTER, store.encoder):
            return f"adapter:{DEFAULT_ADAPTER}"
    return "base"


def build_query_encoder(name: str, store: Store) -> Encoder:
    """The query tower ``name`` names (see :data:`~personamem.pipeline.config.QUERY_ENCODERS`).

    Raises:
        CheckpointError: a PG-Ret checkpoint or query adapter that is missing, broken or trained
            against another record encoder.
        MethodError: an unknown name (``auto`` must be resolved first: :func:`resolve_query_encoder`).
    """
    if name == "base":
        return store.encoder
    if name.startswith("pgret:"):
        from personamem.retrieval.query_tower import QueryTower  # sentence-transformers, loaded when used

        return QueryTower.load(name.removeprefix("pgret:"), store.encoder)
    if name.startswith("adapter:"):
        from personamem.retrieval.query_adapter import QueryAdapter

        return QueryAdapter.load(name.removeprefix("adapter:"), store.encoder)
    raise MethodError(f"unknown query encoder {name!r}")


def resolve_ranker(config: PipelineConfig, query_encoder: str) -> str | None:
    """The learned ranker ``config`` runs given its resolved ``query_encoder`` (None: none).

    ``auto`` is the shipped ranker exactly where its features hold: the default's first stage (hybrid
    with the shipped adapter at its fusion, no personalizer); any other stage keeps its own order.
    """
    if config.ranker == "none":
        return None
    if config.ranker != "auto":
        return config.ranker
    default_shape = (
        config.first_stage == "hybrid"
        and config.personalizer == "none"
        and query_encoder == f"adapter:{DEFAULT_ADAPTER}"
        and config.fusion(query_encoder) == ADAPTER_FUSION
    )
    return DEFAULT_RANKER if default_shape else None


def build_ranker(
    name: str | None, store: Store, query_encoder: Encoder, bm25: BM25Retriever
) -> LearnedRanker | None:
    """The learned ranker called ``name`` over ``store`` (None: none).

    Raises:
        MethodError: a query encoder that is not a query adapter (the ranker's features need one).
        CheckpointError: a ranker folder that is missing, broken or for other features.
    """
    if name is None:
        return None
    from personamem.retrieval.query_adapter import QueryAdapter
    from personamem.retrieval.ranker import LearnedRanker, RankerModel

    if not isinstance(query_encoder, QueryAdapter):
        raise MethodError(
            f"ranker {name!r} reads a query adapter's vectors: set query_encoder to adapter:<name>"
        )
    return LearnedRanker(store, query_encoder, bm25, RankerModel.load(name))


def build_selector(name: str, store: Store, llm: FrozenLLM | None, seed: int) -> ProfileSelector | None:
    """The selector called ``name`` (see :data:`~personamem.pipeline.config.SELECTORS`).

    Raises:
        MethodError: ``listwise`` without an LLM, or PURPLE over an encoder without token states.
        CheckpointError: a PURPLE checkpoint folder that is missing, broken or for another encoder.
    """
    if name == "none":
        return None
    if name == "relevance":
        return RelevanceSelector(store.encoder)
    if name == "random":
        return RandomSelector(seed)
    if name == "earliest":
        return EarliestSelector()
    if name == "listwise":
        if llm is None:
            raise MethodError("selector 'listwise' needs a frozen LLM")
        return ListwiseSelector(llm)
    if name.startswith("purple:"):
        from personamem.profile.purple.selector import PurpleSelector  # torch, loaded only when used

        if not isinstance(store.encoder, SentenceEncoder):
            raise MethodError("PURPLE reads the encoder's token states: it needs a SentenceEncoder store")
        return PurpleSelector.load(name.removeprefix("purple:"), store.encoder)
    raise MethodError(f"unknown selector {name!r}")


def build_extractor(config: PipelineConfig, llm: FrozenLLM | None) -> PromptedExtractor | None:
    """The extractor ``config.preference_memory`` names (see :data:`~personamem.pipeline.config.MEMORIES`).

    ``llm`` writes prompted and atomic memories. Pass the backend itself, not the pipeline's metered
    view: a rebuild runs in its own thread under the memory's own deadline (``memory_timeout_s``),
    outside any one call's metering.

    Raises:
        MethodError: ``prompted`` or ``atomic`` without an LLM.
        CheckpointError: a ``memrerank`` checkpoint folder that is missing or broken.
        MissingExtraError: ``memrerank`` without peft installed.
    """
    name = config.preference_memory
    if name == "none":
        return None
    if name.startswith("memrerank:"):
        from personamem.preference.checkpoint import load_extractor  # peft, loaded only when used

        return load_extractor(name.removeprefix("memrerank:"))
    if llm is None:
        raise MethodError(f"preference memory {name!r} needs a frozen LLM")
    if name not in ("prompted", "atomic"):
        raise MethodError(f"unknown preference memory {name!r}")
    return PromptedExtractor(
        llm,
        style="sections" if name == "prompted" else "atomic",
        max_words=config.memory_words,
        max_tokens=math.ceil(config.memory_words * _TOKENS_PER_WORD),
    )


def build_memories(config: PipelineConfig, store: Store, llm: FrozenLLM | None) -> PreferenceMemories | None:
    """The users' preference memories ``config`` names over ``store`` (None for ``none``).

    Raises:
        See :func:`build_extractor`.
    """
    extractor = build_extractor(config, llm)
    if extractor is None:
        return None
    return PreferenceMemories(store, extractor, timeout_s=config.memory_timeout_s)
