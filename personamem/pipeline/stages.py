"""Built-in stages by name: the components the rows of the stage table build.

Each builder returns ``None`` for ``"none"``; a user's own :class:`QueryPersonalizer` or
:class:`ProfileSelector` is passed to :class:`~personamem.pipeline.Pipeline` directly instead. What
each name is and needs is in ``pipeline/stage_table.py``; here are the checks every row shares.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from personamem.encoder import Encoder
from personamem.errors import MethodError
from personamem.llm.base import FrozenLLM
from personamem.personalize import QueryPersonalizer
from personamem.pipeline.config import DEFAULT_ADAPTER, DEFAULT_RANKER, PipelineConfig
from personamem.pipeline.stage_table import StageInputs, StageKind, choices, find_stage
from personamem.preference import PreferenceMemories, PromptedExtractor
from personamem.profile import ProfileSelector
from personamem.retrieval.bm25 import BM25Retriever
from personamem.retrieval.first_stage import FirstStage
from personamem.retrieval.hybrid import ADAPTER_FUSION, Fusion
from personamem.store import Store

__all__ = [
    "build_extractor",
    "build_first_stage",
    "build_memories",
    "build_personalizer",
    "build_query_encoder",
    "build_selector",
    "resolve_query_encoder",
    "resolve_ranker",
]


def _built(kind: StageKind, label: str, name: str, inputs: StageInputs) -> Any:
    """The component the stage table's row for ``name`` builds (None for a row that builds nothing).

    Raises:
        MethodError: an unknown name, or a stage that needs a frozen LLM without one.
    """
    row = find_stage(kind, name)
    if row is None:
        raise MethodError(f"unknown {label} {name!r}; choose from: {choices(kind)}")
    if row.needs_llm and inputs.llm is None:
        raise MethodError(f"{label} {name!r} needs a frozen LLM")
    argument = row.argument(name)
    return None if row.build is None or argument is None else row.build(inputs, argument)


def build_personalizer(name: str, store: Store, llm: FrozenLLM | None, seed: int) -> QueryPersonalizer | None:
    """The personalizer called ``name`` (a row of :data:`~personamem.pipeline.stage_table.STAGES`)."""
    built = _built("personalizer", "personalizer", name, StageInputs(store, llm, seed))
    return cast("QueryPersonalizer | None", built)


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
    """The query tower ``name`` names (a row of :data:`~personamem.pipeline.stage_table.STAGES`).

    Raises:
        CheckpointError: a PG-Ret checkpoint or query adapter that is missing, broken or trained
            against another record encoder.
        MethodError: an unknown name (``auto`` must be resolved first: :func:`resolve_query_encoder`).
    """
    if name == "base":
        return store.encoder
    if name == "auto":
        raise MethodError("query encoder 'auto' must be resolved first (resolve_query_encoder)")
    built = _built("query_encoder", "query encoder", name, StageInputs(store))
    return cast(Encoder, built)


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
        config.first_stage == config.ranker_row.over
        and config.personalizer == "none"
        and query_encoder == f"adapter:{DEFAULT_ADAPTER}"
        and config.fusion(query_encoder) == ADAPTER_FUSION
    )
    return DEFAULT_RANKER if default_shape else None


def build_first_stage(
    config: PipelineConfig,
    store: Store,
    *,
    query_encoder: Encoder,
    fusion: Fusion,
    bm25: BM25Retriever,
    ranker: str | None,
) -> FirstStage:
    """The first stage ``config`` names over ``store`` (a row of the stage table), and ``ranker`` over it.

    ``ranker`` is resolved (:func:`resolve_ranker`); None: the first stage's own order.

    Raises:
        MethodError: a ranker over a query encoder that is not a query adapter (its features need one).
        CheckpointError: a ranker folder that is missing, broken or for other features.
    """
    inputs = StageInputs(store, seed=config.seed, query_encoder=query_encoder, bm25=bm25, fusion=fusion)
    stage = cast(FirstStage, _built("first_stage", "first stage", config.first_stage, inputs))
    if ranker is None:
        return stage
    return cast(FirstStage, _built("ranker", "ranker", ranker, dataclasses.replace(inputs, under=stage)))


def build_selector(name: str, store: Store, llm: FrozenLLM | None, seed: int) -> ProfileSelector | None:
    """The selector called ``name`` (a row of :data:`~personamem.pipeline.stage_table.STAGES`).

    Raises:
        MethodError: ``listwise`` without an LLM, or PURPLE over an encoder without token states.
        CheckpointError: a PURPLE checkpoint folder that is missing, broken or for another encoder.
    """
    return cast("ProfileSelector | None", _built("selector", "selector", name, StageInputs(store, llm, seed)))


def build_extractor(config: PipelineConfig, llm: FrozenLLM | None) -> PromptedExtractor | None:
    """The extractor ``config.preference_memory`` names (a row of the stage table).

    ``llm`` writes prompted and atomic memories. Pass the backend itself, not the pipeline's metered
    view: a rebuild runs in its own thread under the memory's own deadline (``memory_timeout_s``),
    outside any one call's metering. The extractor needs no store.

    Raises:
        MethodError: ``prompted`` or ``atomic`` without an LLM.
        CheckpointError: a ``memrerank`` checkpoint folder that is missing or broken.
        MissingExtraError: ``memrerank`` without peft installed.
    """
    inputs = StageInputs(llm=llm, seed=config.seed, memory_words=config.memory_words)
    built = _built("memory", "preference memory", config.preference_memory, inputs)
    return cast("PromptedExtractor | None", built)


def build_memories(config: PipelineConfig, store: Store, llm: FrozenLLM | None) -> PreferenceMemories | None:
    """The users' preference memories ``config`` names over ``store`` (None for ``none``).

    Raises:
        See :func:`build_extractor`.
    """
    extractor = build_extractor(config, llm)
    if extractor is None:
        return None
    return PreferenceMemories(store, extractor, timeout_s=config.memory_timeout_s)
