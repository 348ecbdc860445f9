"""Every method by one name: the table the SDK, the CLI, both adapters and the harness read.

A method is a preset of the pipeline's stages (:class:`~personamem.pipeline.PipelineConfig`): ``pbr``
is the PBR personalizer over dense retrieval, ``listwise`` the listwise LLM reranker over hybrid's
top 20, ``purple:<folder>`` a trained PURPLE selector there. The preset sets every stage field;
the LLM, its deadline, the seed and the token budget come from the pipeline it is applied to. A new
trained component is one more row (and, if it is a new kind of stage, one more stage name).

A server answers only the names :class:`ServedMethods` allows: a request may not name a file or a
folder on the server's disk.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from personamem.errors import ConfigError, MethodError, PersonaMemError
from personamem.llm.base import FrozenLLM
from personamem.pipeline.config import PipelineConfig, pipeline_config, read_pipeline_table
from personamem.pipeline.pipeline import Pipeline
from personamem.pipeline.stage_table import STAGES, Stage
from personamem.retrieval.base import Retriever
from personamem.store import Store

__all__ = [
    "METHODS",
    "SERVED_BY_DEFAULT",
    "Method",
    "MethodSpec",
    "ServedMethods",
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
    "ranker": "none",
}
"""Every stage field a preset sets; what a preset leaves out takes these values. The query encoder is
the store's own: a method name means the same ranking whatever the package's default adapter."""

_PACKAGE_STAGES: dict[str, Any] = {name: PipelineConfig.model_fields[name].default for name in _STAGES}
"""What a pipeline file leaves out: the package's defaults, so ``pipeline:<file>`` runs what
``PersonaMem.open(..., pipeline=<file>)`` serves (the shipped adapter and ranker included)."""

_PROFILE = {"first_stage": "hybrid", "candidates": 20, "profile_k": 5}
"""Profile selection over hybrid's top 20, a 5-record profile (PURPLE's setting)."""


@dataclass(frozen=True)
class MethodSpec:
    """One row of the table.

    Attributes:
        name: the method's name; ``prefix:<argument>`` for a row that takes an argument.
        summary: one line for ``--help`` and error messages.
        preset: the stage fields for this method, given the argument (``""`` for plain names).
        shipped: for a row that takes an argument, the arguments that ship with the package
            (``mixed`` for ``adapter:<name>``); a server answers these without being told to.
    """

    name: str
    summary: str
    preset: Callable[[str], dict[str, Any]]
    shipped: Callable[[], Sequence[str]] | None = None

    @property
    def prefix(self) -> str | None:
        """``"purple:"`` for ``purple:<folder>``; None for a plain name."""
        return self.name.split("<", 1)[0] if "<" in self.name else None


def _first_stage(row: Stage) -> MethodSpec:
    return MethodSpec(row.name, row.summary, lambda _: {"first_stage": row.name})


def _personalized(row: Stage) -> MethodSpec:
    return MethodSpec(row.name, row.summary, lambda _: {"personalizer": row.name, "first_stage": "dense"})


def _selected(name: str, selector: str, summary: str) -> MethodSpec:
    return MethodSpec(name, summary, lambda _: {"selector": selector, **_PROFILE})


@functools.cache
def _shipped_adapters() -> tuple[str, ...]:
    from personamem.retrieval.query_adapter import shipped_adapters  # package data, listed once

    return tuple(shipped_adapters())


METHODS: tuple[MethodSpec, ...] = (
    *(_first_stage(row) for row in STAGES if row.kind == "first_stage"),
    *(_personalized(row) for row in STAGES if row.kind == "personalizer" and row.name != "none"),
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
        shipped=_shipped_adapters,
    ),
    MethodSpec(
        "adapter-rrf:<name>",
        "hybrid with a query adapter on its dense side (weighted to dense as the default is)",
        lambda spec: {"first_stage": "hybrid", "query_encoder": f"adapter:{spec}"},
        shipped=_shipped_adapters,
    ),
    MethodSpec(
        "default",
        "the package's default first stage: hybrid with the shipped query adapter (auto), weighted to dense, "
        "reordered by the shipped learned ranker",
        lambda _: {"query_encoder": "auto", "ranker": "auto"},
    ),
    MethodSpec(
        "pipeline:<file>",
        "the composed pipeline of a TOML file (its pipeline table)",
        lambda path: {**_PACKAGE_STAGES, **read_pipeline_table(Path(path))},
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


_ALIAS = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ADD_ONE = (
    "its operator can serve another (a checkpoint or a pipeline file on the server) with "
    "`personamem serve --allow-method METHOD`, or NAME=METHOD to give it a short name"
)


@dataclass(frozen=True)
class ServedMethods:
    """Which method names a server runs for a request; the rest are refused before any file is touched.

    A row that takes an argument names a file or a folder (``pipeline:<file>``, ``purple:<folder>``):
    from a request, that would make the server read a path of the caller's choosing, and its errors
    would tell which paths exist. So a server runs every plain row of :data:`METHODS` (``dense``,
    ``hybrid``, ``listwise``...), the arguments that ship with the package (``adapter:mixed``,
    ``adapter-rrf:mixed``), and what its operator allowed (``personamem serve --allow-method``): a
    method as requests must spell it (``purple:/srv/ckpt/v3``), or an alias
    (``fast=pipeline:/srv/fast.toml``: requests say ``fast``, and the path is never shown). A refusal
    is string work only, so it reads the same whether the path is a file, a folder or absent.

    :attr:`PersonaMem.served_methods <personamem.memory.PersonaMem.served_methods>` holds the policy
    (the server's and ``personamem mcp``'s); the SDK and the CLI hold None and take any name, paths
    included, since their callers own the machine.

    Attributes:
        allowed: methods with an argument that the operator allowed, exactly as requests write them.
        aliases: short names the operator gave methods, each with the method it runs.

    Raises:
        MethodError: an allowed name that is not in the table, or an alias that is not 1-64 letters,
            digits, ``_ . -``, hides a table name, or runs an unknown method.
    """

    allowed: frozenset[str] = frozenset()
    aliases: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in sorted(self.allowed):
            if _row(name) is None:
                raise MethodError(
                    f"allowed method {name!r}: unknown method; choose from: {', '.join(method_names())}"
                )
        for alias, method in self.aliases.items():
            if not _ALIAS.fullmatch(alias):
                raise MethodError(f"alias {alias!r}: use 1-64 letters, digits, '_', '.' or '-'")
            if _row(alias) is not None:
                raise MethodError(f"alias {alias!r} would hide the method of that name: choose another name")
            if _row(method) is None:
                raise MethodError(
                    f"alias {alias!r}: unknown method {method!r}; choose from: {', '.join(method_names())}"
                )

    @classmethod
    def allowing(cls, entries: Iterable[str]) -> ServedMethods:
        """The default set plus the operator's entries (``METHOD`` or ``NAME=METHOD``), each checked now.

        The checks read the operator's own files: a pipeline file must parse and validate, and every
        folder a method names (its own, or one its pipeline file names) must exist, an adapter being
        a shipped name or a folder with ``adapter.json``. A checkpoint's weights load on first use.

        Raises:
            MethodError: an entry that is not a method, an alias that is not valid (see the class)
                or names two methods, or a file or folder that is missing or not valid; the message
                names the entry.
        """
        allowed: set[str] = set()
        aliases: dict[str, str] = {}
        runs: dict[str, str] = {}  # each entry and the method it runs, to check on disk
        for entry in entries:
            alias, sep, method = entry.partition("=")
            if sep and ":" not in alias:  # pipeline:/srv/a=b.toml is a method, not an alias
                if aliases.setdefault(alias, method) != method:
                    raise MethodError(
                        f"--allow-method {entry!r}: alias {alias!r} already runs {aliases[alias]!r}"
                    )
                runs[entry] = method
            else:
                allowed.add(entry)
                runs[entry] = entry
        try:
            served = cls(frozenset(allowed), aliases)
        except MethodError as exc:
            raise MethodError(f"--allow-method: {exc}") from None
        for entry, method in runs.items():
            try:
                _check_on_disk(method)
            except PersonaMemError as exc:
                raise MethodError(f"--allow-method {entry!r}: {exc}") from None
        return served

    def resolve(self, name: str) -> str:
        """The method to run for a request's ``name``: an alias's method, else ``name`` if it is served.

        Reads nothing from disk.

        Raises:
            MethodError: ``name`` is not served; the message lists what is and how to add one, and
                holds nothing but ``name`` from the request.
        """
        found = self.aliases.get(name)
        if found is not None:
            return found
        row = _row(name)
        if row is None:
            raise MethodError(f"unknown method {name!r}; this server serves: {self._offer()}")
        spec, argument = row
        if spec.prefix is None or name in self.allowed or (spec.shipped and argument in spec.shipped()):
            return name
        raise MethodError(
            f"method {name!r} is not served here: a server runs the methods its operator allowed, never "
            f"a file or folder that a request names; this server serves: {self._offer()}"
        )

    def check_selector(self, name: str) -> None:
        """Refuse a selector that names a folder (``purple:<folder>``) unless that method is served.

        Raises:
            MethodError: such a selector whose method of the same spelling is not served.
        """
        if ":" not in name or name in self.allowed or name in self.aliases.values():
            return
        raise MethodError(
            f"selector {name!r} is not served here: a server loads the checkpoints its operator allowed, "
            f"never a folder that a request names; this server serves: {self._offer()}"
        )

    def names(self) -> list[str]:
        """Every name a request may give: the plain rows, the shipped arguments, then the operator's."""
        served = [spec.name for spec in METHODS if spec.prefix is None]
        served += [
            f"{spec.prefix}{arg}"
            for spec in METHODS
            if spec.prefix and spec.shipped
            for arg in spec.shipped()
        ]
        return [*served, *sorted(self.allowed - set(served)), *sorted(self.aliases)]

    def _offer(self) -> str:
        return f"{', '.join(self.names())}; {_ADD_ONE}"


SERVED_BY_DEFAULT = ServedMethods()
"""What a server runs unless its operator allows more: the plain rows and the shipped adapters."""


def _check_on_disk(name: str) -> None:
    """Read what method ``name`` names (a pipeline file) and check that every folder it names is there.

    Raises:
        MethodError, ConfigError, CheckpointError: a file that cannot be read or validated, a
            missing folder, or an adapter that is neither shipped nor a folder with ``adapter.json``.
    """
    from personamem.retrieval.query_adapter import adapter_folder

    config = method_config(name)
    for stage in ("selector", "query_encoder", "preference_memory"):
        value = getattr(config, stage)
        kind, _, folder = value.partition(":")
        if not folder:
            continue
        if kind == "adapter":
            adapter_folder(folder)
        elif not Path(folder).is_dir():
            raise MethodError(f"{stage} {value!r}: {folder} is not a folder")


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
