"""Methods the harness can evaluate: named recipes that build a retriever over a store.

A method is a pipeline behind the :class:`~personamem.retrieval.Retriever` seam: the first-stage
retrievers today; a query personalizer (PBR) or profile selector (PURPLE) wraps one and is still a
retriever, so every method runs through the same command and metrics. ``build`` takes the seed so a
stochastic method is rebuilt per seed; a deterministic one is run once, and reported as such rather
than as several identical runs with a standard deviation of zero.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from personamem.llm import FrozenLLM
from personamem.personalize import EXPANSIONS, PBR, LLMExpansion, PAnchor, PersonalizedRetriever
from personamem.profile import EarliestSelector, ProfileRetriever, ProfileSelector, RandomSelector
from personamem.profile.listwise import ListwiseSelector
from personamem.retrieval import BM25Retriever, DenseRetriever, HybridRetriever, Retriever
from personamem.store import Store

__all__ = [
    "BM25",
    "DENSE",
    "FIRST_STAGE",
    "HYBRID",
    "NEEDS_LLM",
    "PERSONALIZED",
    "PROFILE",
    "Method",
    "is_method",
    "is_profile_method",
    "method_named",
    "personalized_method",
    "profile_method",
]


@dataclass(frozen=True)
class Method:
    """A named way to rank a user's records for a question.

    Attributes:
        name: how reports and ``--method`` call it.
        build: makes the retriever for one seed over the evaluation store.
        stochastic: whether results depend on the seed (LLM sampling, random policies).
    """

    name: str
    build: Callable[[Store, int], Retriever]
    stochastic: bool = False


DENSE = Method("dense", lambda store, seed: DenseRetriever(store))
BM25 = Method("bm25", lambda store, seed: BM25Retriever(store))
HYBRID = Method("hybrid", lambda store, seed: HybridRetriever([DenseRetriever(store), BM25Retriever(store)]))
FIRST_STAGE = {method.name: method for method in (DENSE, BM25, HYBRID)}
"""The first-stage retrievers by name, for the CLI."""

PERSONALIZED = ("pbr", "pbr-no-anchor", "pbr-no-prf", *EXPANSIONS)
"""Query-personalizing methods: PBR, its ablations (without P-Anchor; without P-PRF = P-Anchor only)
and the LLM expansion baselines. Without both PBR parts it is ``dense`` (the paper's Base)."""

NEEDS_LLM = (frozenset(PERSONALIZED) - {"pbr-no-prf"}) | {"listwise"}
"""Methods that call the frozen LLM. The personalizing ones sample, so they are stochastic across
seeds; ``listwise`` decodes greedily."""


def personalized_method(name: str, llm: FrozenLLM | None) -> Method:
    """The method called ``name`` from :data:`PERSONALIZED`, using ``llm`` where it needs one.

    Raises:
        ValueError: an unknown name, or a method that needs an LLM given none.
    """
    if name not in PERSONALIZED:
        raise ValueError(f"unknown personalized method {name!r}; choose from {PERSONALIZED}")
    if name in NEEDS_LLM and llm is None:
        raise ValueError(f"method {name!r} needs a frozen LLM")

    def build(store: Store, seed: int) -> Retriever:
        if name == "pbr-no-prf":
            return PersonalizedRetriever(store, PBR(store, None, PAnchor(store), seed=seed))
        assert llm is not None
        if name in ("pbr", "pbr-no-anchor"):
            anchor = PAnchor(store) if name == "pbr" else None
            return PersonalizedRetriever(store, PBR(store, llm, anchor, seed=seed))
        return PersonalizedRetriever(store, LLMExpansion(store, llm, name, seed=seed))  # type: ignore[arg-type]

    return Method(name, build, stochastic=name in NEEDS_LLM)


PROFILE = ("random5", "earliest5", "listwise")
"""Profile selectors over the hybrid first stage's top 20, as PURPLE's baselines; ``purple:<checkpoint
folder>`` is PURPLE itself. Each puts its 5-record profile first (what ``--answers`` scores)."""

_CANDIDATES, _PROFILE_K = 20, 5


def is_profile_method(name: str) -> bool:
    """Whether ``name`` is one of :data:`PROFILE` or ``purple:<folder>``."""
    return name in PROFILE or (name.startswith("purple:") and len(name) > len("purple:"))


def profile_method(name: str, llm: FrozenLLM | None) -> Method:
    """The profile-selection method called ``name`` (see :data:`PROFILE`).

    Raises:
        ValueError: an unknown name, or ``listwise`` without an LLM.
    """
    if not is_profile_method(name):
        raise ValueError(
            f"unknown profile method {name!r}; choose from {PROFILE} or purple:<checkpoint folder>"
        )
    if name in NEEDS_LLM and llm is None:
        raise ValueError(f"method {name!r} needs a frozen LLM")

    def build(store: Store, seed: int) -> Retriever:
        selector: ProfileSelector
        if name == "random5":
            selector = RandomSelector(seed)
        elif name == "earliest5":
            selector = EarliestSelector()
        elif name == "listwise":
            assert llm is not None
            selector = ListwiseSelector(llm)
        else:
            from personamem.encoder import SentenceEncoder
            from personamem.profile.purple.selector import PurpleSelector

            if not isinstance(store.encoder, SentenceEncoder):
                raise ValueError("PURPLE needs the encoder's token states (a SentenceEncoder store)")
            selector = PurpleSelector.load(name.removeprefix("purple:"), store.encoder)
        return ProfileRetriever(
            HYBRID.build(store, seed), selector, candidates=_CANDIDATES, profile_k=_PROFILE_K
        )

    return Method(name, build, stochastic=name == "random5")


def is_method(name: str) -> bool:
    """Whether ``name`` is a method :func:`method_named` can build."""
    return name in FIRST_STAGE or name in PERSONALIZED or is_profile_method(name)


def method_named(name: str, llm: FrozenLLM | None) -> Method:
    """The method called ``name``: a first stage, a personalizer or a profile selector.

    Raises:
        ValueError: an unknown name, or a method that needs an LLM given none.
    """
    if name in FIRST_STAGE:
        return FIRST_STAGE[name]
    return profile_method(name, llm) if is_profile_method(name) else personalized_method(name, llm)
