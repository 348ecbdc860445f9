"""Every stage a pipeline config can name, one row each: what it is, what it needs, how it is built.

Config validation (:class:`~personamem.pipeline.config.PipelineConfig`), the config's ``--help``
text, the method presets (:mod:`personamem.methods`) and the builders (``pipeline/stages.py``) all
read this table, so a new personalizer, first stage, selector or preference memory is its own module
and one row here. A row's builder imports its module when called: reading the table imports nothing
heavy.

A row whose name ends in ``<argument>`` (``purple:<folder>``) matches every name with its prefix and a
non-empty argument, which the builder gets.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator

if TYPE_CHECKING:
    from personamem.encoder import Encoder
    from personamem.llm.base import FrozenLLM
    from personamem.retrieval.bm25 import BM25Retriever
    from personamem.retrieval.first_stage import FirstStage
    from personamem.retrieval.hybrid import Fusion
    from personamem.store import Store

__all__ = [
    "STAGES",
    "FirstStageName",
    "Stage",
    "StageInputs",
    "StageKind",
    "choices",
    "find_stage",
    "stage_names",
]

StageKind = Literal["personalizer", "first_stage", "ranker", "query_encoder", "selector", "memory"]


@dataclass(frozen=True)
class StageInputs:
    """What a builder may use: the store, the pipeline's LLM (None: no LLM), its seed, a memory's words.

    ``store`` is None only where an extractor is built on its own (it reads no store). A first
    stage's builder gets the query encoder, the shared BM25 indexes and hybrid's fusion; a ranker's,
    the stage it reorders (``under``).
    """

    store: Store | None = None
    llm: FrozenLLM | None = None
    seed: int = 0
    memory_words: int = 120
    query_encoder: Encoder | None = None
    bm25: BM25Retriever | None = None
    fusion: Fusion | None = None
    under: FirstStage | None = None

    @property
    def the_store(self) -> Store:
        """The store, for the builders that read one."""
        assert self.store is not None, "this stage reads the store"
        return self.store


@dataclass(frozen=True)
class Stage:
    """One row of the table.

    Attributes:
        kind: which config field names it.
        name: its name in that field; ``prefix:<argument>`` for a row that takes an argument.
        summary: one line for ``--help``, the method table and error messages.
        needs_llm: it calls the pipeline's frozen LLM (refused without one).
        stochastic: its results depend on the seed (LLM sampling, random choice).
        takes_vector: a first stage that searches with a query vector (a personalizer's, a tower's).
        over: the first stage a ranker reorders (its candidates and the config it needs).
        build: makes the component from the inputs and the argument (``""`` for a plain name);
            None for a name that builds nothing (``none``) or is built by the pipeline itself.
    """

    kind: StageKind
    name: str
    summary: str
    needs_llm: bool = False
    stochastic: bool = False
    takes_vector: bool = False
    over: str | None = None
    build: Callable[[StageInputs, str], Any] | None = None

    @property
    def prefix(self) -> str | None:
        """``"purple:"`` for ``purple:<folder>``; None for a plain name."""
        return self.name.split("<", 1)[0] if "<" in self.name else None

    def argument(self, value: str) -> str | None:
        """The argument ``value`` gives this row (``""`` for its plain name); None if it is not this row."""
        if self.prefix is None:
            return "" if value == self.name else None
        argument = value.removeprefix(self.prefix)
        return argument if value.startswith(self.prefix) and argument else None


# -- builders: each imports its module when called -----------------------------------------------


def _pbr(anchor: bool, prf: bool) -> Callable[[StageInputs, str], Any]:
    def build(inputs: StageInputs, _: str) -> Any:
        from personamem.personalize import PBR, PAnchor

        store = inputs.the_store
        return PBR(store, inputs.llm if prf else None, PAnchor(store) if anchor else None, seed=inputs.seed)

    return build


def _expansion(name: str) -> Callable[[StageInputs, str], Any]:
    def build(inputs: StageInputs, _: str) -> Any:
        from personamem.personalize import LLMExpansion

        return LLMExpansion(inputs.the_store, inputs.llm, name, seed=inputs.seed)  # type: ignore[arg-type]

    return build


def _rewrite(strategy: str) -> Callable[[StageInputs, str], Any]:
    def build(inputs: StageInputs, _: str) -> Any:
        from personamem.rewriting.personalizer import RewritePersonalizer

        return RewritePersonalizer(inputs.the_store, inputs.llm, strategy, seed=inputs.seed)  # type: ignore[arg-type]

    return build


def _dense(inputs: StageInputs, _: str) -> Any:
    from personamem.retrieval.dense import DenseRetriever
    from personamem.retrieval.first_stage import DenseStage

    store = inputs.the_store
    return DenseStage(DenseRetriever(store), inputs.query_encoder or store.encoder)


def _lexical(inputs: StageInputs, _: str) -> Any:
    from personamem.retrieval.bm25 import BM25Retriever
    from personamem.retrieval.first_stage import LexicalStage

    return LexicalStage(inputs.bm25 or BM25Retriever(inputs.the_store))


def _hybrid(inputs: StageInputs, _: str) -> Any:
    from personamem.retrieval.bm25 import BM25Retriever
    from personamem.retrieval.first_stage import HybridStage
    from personamem.retrieval.hybrid import PLAIN_RRF

    bm25 = inputs.bm25 or BM25Retriever(inputs.the_store)
    return HybridStage(_dense(inputs, ""), bm25, inputs.fusion or PLAIN_RRF)


def _ranker(inputs: StageInputs, spec: str) -> Any:
    from personamem.errors import MethodError
    from personamem.retrieval.first_stage import HybridStage, RankedStage
    from personamem.retrieval.query_adapter import QueryAdapter
    from personamem.retrieval.ranker import LearnedRanker, RankerModel

    hybrid = inputs.under
    assert isinstance(hybrid, HybridStage), "a ranker is built over the hybrid first stage"
    adapter = hybrid.dense.query_encoder
    if not isinstance(adapter, QueryAdapter):
        raise MethodError(
            f"ranker {spec!r} reads a query adapter's vectors: set query_encoder to adapter:<name>"
        )
    return RankedStage(LearnedRanker(inputs.the_store, adapter, hybrid.bm25, RankerModel.load(spec)), hybrid)


def _pgret(inputs: StageInputs, folder: str) -> Any:
    from personamem.retrieval.query_tower import QueryTower  # sentence-transformers, loaded when used

    return QueryTower.load(folder, inputs.the_store.encoder)


def _adapter(inputs: StageInputs, spec: str) -> Any:
    from personamem.retrieval.query_adapter import QueryAdapter

    return QueryAdapter.load(spec, inputs.the_store.encoder)


def _relevance(inputs: StageInputs, _: str) -> Any:
    from personamem.profile import RelevanceSelector

    return RelevanceSelector(inputs.the_store.encoder)


def _random(inputs: StageInputs, _: str) -> Any:
    from personamem.profile import RandomSelector

    return RandomSelector(inputs.seed)


def _earliest(inputs: StageInputs, _: str) -> Any:
    from personamem.profile import EarliestSelector

    return EarliestSelector()


def _listwise(inputs: StageInputs, _: str) -> Any:
    from personamem.profile import ListwiseSelector

    return ListwiseSelector(inputs.llm, store=inputs.store)  # type: ignore[arg-type]  # needs_llm: checked


def _purple(inputs: StageInputs, folder: str) -> Any:
    from personamem.encoder import SentenceEncoder
    from personamem.errors import MethodError
    from personamem.profile.purple.selector import PurpleSelector  # torch, loaded only when used

    encoder = inputs.the_store.encoder
    if not isinstance(encoder, SentenceEncoder):
        raise MethodError("PURPLE reads the encoder's token states: it needs a SentenceEncoder store")
    return PurpleSelector.load(folder, encoder)


_TOKENS_PER_WORD = 1.6
"""Tokens an extractor may write per memory word: headers and evidence labels cost tokens too (the
extractor's own default is 192 tokens for 120 words)."""


def _prompted(style: str) -> Callable[[StageInputs, str], Any]:
    def build(inputs: StageInputs, _: str) -> Any:
        import math

        from personamem.preference import PromptedExtractor

        words = inputs.memory_words
        return PromptedExtractor(
            inputs.llm,  # type: ignore[arg-type]  # needs_llm: checked by the caller
            style=style,  # type: ignore[arg-type]
            max_words=words,
            max_tokens=math.ceil(words * _TOKENS_PER_WORD),
        )

    return build


def _memrerank(inputs: StageInputs, folder: str) -> Any:
    from personamem.preference.checkpoint import load_extractor  # peft, loaded only when used

    return load_extractor(folder)


_EXPANSIONS = {
    "hyde": "HyDE: the LLM's hypothetical answer passages",
    "q2t": "Query2Term: the LLM's related terms",
    "cot": "CoT: the LLM's step-by-step answer",
    "thinkqe": "ThinkQE: two rounds of expansion, the second seeing the user's top records",
    "mill": "MILL: sub-questions and answers, kept where they agree with the user's records",
}
_REWRITES = {
    "all": "query rewriting with all of the user's knowledge records",
    "str": "query rewriting: select the relevant knowledge records, then reformulate",
    "sar": "query rewriting: select and reformulate in one LLM call",
}

STAGES: tuple[Stage, ...] = (
    # query personalizers: (user, query) -> a query vector in the encoder's space
    Stage("personalizer", "none", "the query as typed"),
    Stage(
        "personalizer",
        "pbr",
        "PBR: P-PRF pseudo utterances and reasoning from the LLM, fused with the P-Anchor",
        needs_llm=True,
        stochastic=True,
        build=_pbr(anchor=True, prf=True),
    ),
    Stage(
        "personalizer",
        "pbr-no-anchor",
        "PBR without P-Anchor (P-PRF only)",
        needs_llm=True,
        stochastic=True,
        build=_pbr(anchor=False, prf=True),
    ),
    Stage(
        "personalizer",
        "pbr-no-prf",
        "PBR without P-PRF (the P-Anchor only; no LLM)",
        build=_pbr(anchor=True, prf=False),
    ),
    *(
        Stage("personalizer", name, summary, needs_llm=True, stochastic=True, build=_expansion(name))
        for name, summary in _EXPANSIONS.items()
    ),
    *(  # rewriting decodes greedily: its results do not depend on the seed
        Stage("personalizer", f"rewrite-{strategy}", summary, needs_llm=True, build=_rewrite(strategy))
        for strategy, summary in _REWRITES.items()
    ),
    # first stages: (user, query or its vector) -> candidates (personamem/retrieval/first_stage.py)
    Stage(
        "first_stage",
        "dense",
        "cosine between the query's and the records' vectors",
        takes_vector=True,
        build=_dense,
    ),
    Stage("first_stage", "bm25", "BM25 over the user's records", build=_lexical),
    Stage(
        "first_stage",
        "hybrid",
        "reciprocal rank fusion of dense and BM25",
        takes_vector=True,
        build=_hybrid,
    ),
    # rankers: reorder a first stage's candidates (personamem/retrieval/ranker.py)
    Stage(
        "ranker",
        "auto",
        "the shipped ranker (mixed) where the first stage is the default's: hybrid with adapter:mixed "
        "at its fusion, no personalizer; else none",
        over="hybrid",
    ),
    Stage("ranker", "none", "the first stage's own order"),
    Stage(
        "ranker",
        "<name or folder>",
        "a learned ranker: a shipped one by name (mixed) or a folder from 'personamem train ranker' or "
        "'personamem improve'; it reads a query adapter's vectors",
        over="hybrid",
        build=_ranker,
    ),
    # query encoders: a query -> a vector in the store encoder's space
    Stage(
        "query_encoder",
        "auto",
        "the shipped adapter where it applies (dense or hybrid first stage, no personalizer, the "
        "encoder it was fitted to), else base",
    ),
    Stage("query_encoder", "base", "the store's encoder (the records' own)"),
    Stage(
        "query_encoder",
        "pgret:<folder>",
        "a PG-Ret-trained query tower, from a checkpoint folder (records keep their vectors)",
        build=_pgret,
    ),
    Stage(
        "query_encoder",
        "adapter:<name>",
        "a query adapter (a learned map on the store encoder's query vectors): a shipped one by name "
        "(mixed) or a folder from 'personamem train adapter' or 'personamem improve'",
        build=_adapter,
    ),
    # profile selectors: pick and order the profile from the first stage's candidates
    Stage("selector", "none", "the first stage's top profile_k, in its order"),
    Stage("selector", "relevance", "the candidates re-scored by cosine to the query", build=_relevance),
    Stage(
        "selector",
        "random",
        "profile_k candidates drawn at random (seeded by seed, user and query)",
        stochastic=True,
        build=_random,
    ),
    Stage("selector", "earliest", "the profile_k oldest candidates", build=_earliest),
    Stage("selector", "listwise", "a listwise LLM reranker (RankGPT-style)", needs_llm=True, build=_listwise),
    Stage(
        "selector",
        "purple:<folder>",
        "PURPLE, a trained Plackett–Luce selector, from a checkpoint folder",
        build=_purple,
    ),
    # preference memories: written once per history revision, put before the records
    Stage("memory", "none", "no preference memory"),
    Stage(
        "memory",
        "prompted",
        "MemRerank's memory (within- and cross-category statements), written by the pipeline's LLM",
        needs_llm=True,
        build=_prompted("sections"),
    ),
    Stage(
        "memory",
        "atomic",
        "one preference fact per line, written by the pipeline's LLM (a Mem0-style baseline)",
        needs_llm=True,
        build=_prompted("atomic"),
    ),
    Stage(
        "memory",
        "memrerank:<folder>",
        "a trained MemRerank extractor, from a checkpoint folder",
        build=_memrerank,
    ),
)
"""Every stage, grouped by kind; within a kind, the order ``--help`` and the method table list."""


def find_stage(kind: StageKind, value: str) -> Stage | None:
    """The row of ``kind`` that ``value`` names (a plain name, or a prefix and its argument); None if none."""
    return next((s for s in STAGES if s.kind == kind and s.argument(value) is not None), None)


def stage_names(kind: StageKind) -> dict[str, str]:
    """Names of ``kind`` (``prefix:<argument>`` for rows with one) and their summaries, in table order."""
    return {s.name: s.summary for s in STAGES if s.kind == kind}


def choices(kind: StageKind) -> str:
    """The names of ``kind`` as a comma-separated list, for messages and ``--help``."""
    return ", ".join(stage_names(kind))


def _known_first_stage(name: str) -> str:
    if find_stage("first_stage", name) is None:
        raise ValueError(f"unknown first_stage {name!r}; choose from: {choices('first_stage')}")
    return name


FirstStageName = Annotated[str, AfterValidator(_known_first_stage)]
"""A first stage's name as a pydantic field's type: validated against the rows, so a new first stage
is its module and its row."""
