"""Built-in stages by name: the query personalizers and profile selectors a config can name.

Each builder returns ``None`` for ``"none"``; a user's own :class:`QueryPersonalizer` or
:class:`ProfileSelector` is passed to :class:`~personamem.pipeline.Pipeline` directly instead.
"""

from __future__ import annotations

from personamem.encoder import SentenceEncoder
from personamem.errors import MethodError
from personamem.llm.base import FrozenLLM
from personamem.personalize import EXPANSIONS, PBR, LLMExpansion, PAnchor, QueryPersonalizer
from personamem.profile import (
    EarliestSelector,
    ListwiseSelector,
    ProfileSelector,
    RandomSelector,
    RelevanceSelector,
)
from personamem.store import Store

__all__ = ["build_personalizer", "build_selector"]


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
