"""Every method by one name: the table the SDK, the CLI, both adapters and the harness read.

A method is a preset of the pipeline's stages (:class:`~personamem.pipeline.PipelineConfig`): ``pbr``
is the PBR personalizer over dense retrieval, ``listwise`` the listwise LLM reranker over hybrid's
top 20, ``purple:<folder>`` a trained PURPLE selector there. The preset sets every stage field;
the LLM, its deadline, the seed and the token budget come from the pipeline it is applied to. A new
trained component is one more row (and, if it is a new kind of stage, one more stage name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from personamem.errors import ConfigError, MethodError
from personamem.llm.base import FrozenLLM
from personamem.pipeline.config import PERSONALIZERS, PipelineConfig, pipeline_config, read_pipeline_table
from personamem.pipeline.pipeline import Pipeline
from personamem.retrieval.base import Retriever
from personamem.store import Store

__all__ = [
    "METHODS",
    "Method",
    "MethodSpec",
    "check_llm",
    "is_method",
    "method_config",
    "method_help",
    "method_named",
    "method_names",
]

_STAGES: dict[str, Any] = {
    **{
        name: PipelineConfig.model_fields[name].default
        for name in ("personalizer", "first_stage", "selector", "candidates", "profile_k", "chosen_by")
    },
    "query_encoder": "base",
    "dense_weight": None,
    "rrf_k": None,
}
"""Every stage field a preset sets; what a preset leaves out takes these values. The query encoder is
the store's own: a method name means the same ranking whatever the package's default adapter."""

_PROFILE = {"first_stage": "hybrid", "candidates": 20, "profile_k": 5}
"""Profile selection over hybrid's top 20, a 5-record profile (PURPLE's setting)."""


@dataclass(frozen=True)
class MethodSpec:
    """One row of the table.

    Attributes:
        name: the method's name; ``prefix:<argument>`` for a row that takes an argument.
        summary: one line for ``--help`` and error messages.
        preset: the stage fields for this method, given the argument (``""`` for plain names).
    """

    name: str
    summary: str
    preset: Callable[[str], dict[str, Any]]

    @property
    def prefix(self) -> str | None:
        """``"purple:"`` for ``purple:<folder>``; None for a plain name."""
        return self.name.split("<", 1)[0] if "<" in self.name else None


def _personalized(name: str) -> MethodSpec:
    return MethodSpec(name, PERSONALIZERS[name], lambda _: {"personalizer": name, "first_stage": "dense"})


def _selected(name: str, selector: str, summary: str) -> MethodSpec:
    return MethodSpec(name, summary, lambda _: {"selector": selector, **_PROFILE})


METHODS: tuple[MethodSpec, ...] = (
    MethodSpec(
        "dense", "cosine between the query's and the records' vectors", lambda _: {"first_stage": "dense"}
    ),
    MethodSpec("bm25", "BM25 over the user's records", lambda _: {"first_stage": "bm25"}),
    MethodSpec("hybrid", "reciprocal rank fusion of dense and BM25", lambda _: {"first_stage": "hybrid"}),
    *(_personalized(name) for name in PERSONALIZERS if name != "none"),
    _selected("random5", "random", "5 of hybrid's top 20 at random (a floor for profile selection)"),
    _selected("earliest5", "earliest", "the 5 oldest of hybrid's top 20"),
    _selected("listwise", "listwise", "a listwise LLM reranker's 5 of hybrid's top 20"),
    MethodSpec(
        "purple:<folder>",
        "a trained PURPLE selector's 5 of hybrid's top 20 (a checkpoint folder)",
        lambda folder: {"selector": f"purple:{folder}", **_PROFILE},
    ),
    MethodSpec(
        "pgret:<folder>",
        "dense search with a PG-Ret-trained query tower (a checkpoint folder)",
        lambda folder: {"first_stage": "dense", "query_encoder": f"pgret:{folder}"},
    ),
    MethodSpec(
        "pgret-rrf:<folder>",
        "hybrid with a PG-Ret-trained query tower as its dense side",
        lambda folder: {"first_stage": "hybrid", "query_encoder": f"pgret:{folder}"},
    ),
    MethodSpec(
        "adapter:<name>",
        "dense search with a query adapter (a folder, or a shipped one by name: adapter:mixed)",
        lambda spec: {"first_stage": "dense", "query_encoder": f"adapter:{spec}"},
    ),
    MethodSpec(
        "adapter-rrf:<name>",
        "hybrid with a query adapter on its dense side (weighted to dense as the default is)",
        lambda spec: {"first_stage": "hybrid", "query_encoder": f"adapter:{spec}"},
    ),
    MethodSpec(
        "default",
        "the package's default first stage: hybrid with the shipped query adapter (auto), weighted to dense",
        lambda _: {"query_encoder": "auto"},
    ),
    MethodSpec(
        "pipeline:<file>",
        "the composed pipeline of a TOML file (its pipeline table)",
        lambda path: read_pipeline_table(Path(path)),
    ),
)


def method_names() -> list[str]:
    """Every name as users write it (``purple:<folder>`` for the rows that take an argument)."""
    return [spec.name for spec in METHODS]


def method_help() -> str:
    """``name: summary`` for every row, for ``--method``'s help text."""
    return "; ".join(f"{spec.name}: {spec.summary}" for spec in METHODS)


def _row(name: str) -> tuple[MethodSpec, str] | None:
    for spec in METHODS:
        prefix = spec.prefix
        if prefix is None and name == spec.name:
            return spec, ""
        if prefix is not None and name.startswith(prefix) and len(name) > len(prefix):
            return spec, name.removeprefix(prefix)
    return None


def is_method(name: str) -> bool:
    """Whether ``name`` is in the table."""
    return _row(name) is not None


def method_config(name: str, base: PipelineConfig | None = None) -> PipelineConfig:
    """The pipeline that method ``name`` runs: its stage preset over ``base``'s LLM, seed and budget.

    Raises:
        MethodError: ``name`` is not in the table (the message lists the table).
        ConfigError: a ``pipeline:<file>`` that cannot be read or has a bad key.
    """
    row = _row(name)
    if row is None:
        raise MethodError(f"unknown method {name!r}; choose from: {', '.join(method_names())}")
    spec, argument = row
    fields = {**(base or PipelineConfig()).model_dump(), **_STAGES, **spec.preset(argument)}
    try:
        return pipeline_config(fields, source=f"method {name!r}")
    except ConfigError as exc:
        raise MethodError(str(exc)) from None


@dataclass(frozen=True)
class Method:
    """A named way for the harness to rank a user's records.

    Attributes:
        name: how reports and ``--method`` call it.
        build: makes the retriever for one seed over the evaluation store.
        stochastic: whether results depend on the seed (LLM sampling, random selection).
    """

    name: str
    build: Callable[[Store, int], Retriever]
    stochastic: bool = False


def method_named(name: str, llm: FrozenLLM | None, base: PipelineConfig | None = None) -> Method:
    """The method called ``name`` for the harness: a :class:`Pipeline` rebuilt per seed.

    Raises:
        MethodError: an unknown name, or a method that needs an LLM given none.
    """
    config = method_config(name, base)
    check_llm(f"method {name!r}", config, llm)

    def build(store: Store, seed: int) -> Retriever:
        return Pipeline(store, config.model_copy(update={"seed": seed}), llm=llm)

    return Method(name, build, stochastic=config.stochastic)


def check_llm(what: str, config: PipelineConfig, llm: FrozenLLM | None) -> None:
    """Raise :class:`MethodError` if ``config`` needs an LLM and ``llm`` is None.

    ``what`` names the thing asked for (``"method 'pbr'"``); the message lists the methods that
    run without an LLM.
    """
    if config.needs_llm and llm is None:
        without = [spec.name for spec in METHODS if spec.prefix or not method_config(spec.name).needs_llm]
        raise MethodError(
            f"{what} needs a frozen LLM and none is configured (set the pipeline's llm, e.g. --llm "
            f"smollm2-135m, or pass llm= to PersonaMem.open); methods without one: {', '.join(without)}"
        )
