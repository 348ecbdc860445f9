"""Every dataset by one name: the table that ``ingest``, ``eval``, ``eval-memory`` and the trainers read.

A row names a module's readers: ``records`` (what ``personamem ingest`` stores), ``questions`` (a
:class:`~personamem.datasets.benchmark.Benchmark` for the harness and the trainers) and ``choices``
(MemRerank's 1-in-5 instances), each only where the dataset provides it, and the module's options
model. Readers take the data path and the options as keywords (``load_personabench(path, noise=0.5)``),
so a row lists the module's own functions. The command-line choices (:data:`BenchmarkName`,
:data:`RecordFormat`, :data:`ChoiceName`) and every dataset's options (:data:`BenchmarkOptions`, one
nested model per dataset, flattened into ``--noise``, ``--split``, ...) are built from the rows: a new
dataset is one module plus one row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import BaseModel, ConfigDict, create_model

from personamem.datasets.amazon_beauty import AmazonOptions, load_amazon_choices
from personamem.datasets.benchmark import Benchmark
from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds
from personamem.datasets.ikat import IkatOptions, load_ikat, load_ikat_benchmark
from personamem.datasets.jsonl import JsonlOptions, read_jsonl
from personamem.datasets.locomo import LocomoOptions, load_locomo, load_locomo_benchmark
from personamem.datasets.personabench import (
    PersonaBenchOptions,
    load_personabench,
    load_personabench_benchmark,
    load_personabench_choices,
)
from personamem.datasets.prefeval import PrefEvalOptions, load_prefeval_benchmark, load_prefeval_choices
from personamem.records import Record

__all__ = [
    "DATASETS",
    "BenchmarkName",
    "BenchmarkOptions",
    "ChoiceName",
    "DatasetSpec",
    "RecordFormat",
    "RecordOptions",
    "choice_set",
    "dataset",
    "dataset_options",
    "nest_options",
    "read_choices",
    "read_questions",
    "read_records",
    "stray_options",
]


@dataclass(frozen=True)
class DatasetSpec:
    """One row of the table.

    Attributes:
        name: how commands and reports call it (a Python identifier: it names an options field).
        summary: one line for ``--help``.
        options: the module's options model; its fields are every reader's keywords.
        folder: its folder in the shared data layout (``trec_ikat``), for commands that take one root;
            None for a format with no shared copy.
        records: ``(path, **options) -> list[Record]``: records to store.
        questions: ``(path, **options) -> Benchmark``: records and the questions asked of them.
        choices: ``(path, needs, **options) -> list[ChoiceInstance]``: 1-in-n choices.
        choice_variant: an option whose values are separate choice sets, named ``<name>-<value>``
            (PrefEval's forms); None: one set, named ``<name>``.
        choices_trained: whether a trainer learns from this dataset's choices; if not, all of them
            are held out in ``eval-memory``, not only the fixed split's test side.
        choice_note: a line ``eval-memory`` adds to its report about what the choices are.
    """

    name: str
    summary: str
    options: type[BaseModel]
    folder: str | None = None
    records: Callable[..., list[Record]] | None = None
    questions: Callable[..., Benchmark] | None = None
    choices: Callable[..., list[ChoiceInstance]] | None = None
    choice_variant: str | None = None
    choices_trained: bool = True
    choice_note: str = ""


DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec(
        "jsonl",
        "the application's own format: one record per line",
        JsonlOptions,
        records=read_jsonl,
    ),
    DatasetSpec(
        "personabench",
        "PersonaBench: users' private sessions, questions about them, preference choices",
        PersonaBenchOptions,
        folder="personabench",
        records=load_personabench,
        questions=load_personabench_benchmark,
        choices=load_personabench_choices,
        choices_trained=False,
    ),
    DatasetSpec(
        "locomo",
        "LoCoMo: long conversations and the QA asked of them",
        LocomoOptions,
        folder="locomo",
        records=load_locomo,
        questions=load_locomo_benchmark,
    ),
    DatasetSpec(
        "ikat",
        "TREC iKAT: PTKB statements and the turns that need them",
        IkatOptions,
        folder="trec_ikat",
        records=load_ikat,
        questions=load_ikat_benchmark,
    ),
    DatasetSpec(
        "prefeval",
        "PrefEval: stated preferences, distractor turns, questions and their options",
        PrefEvalOptions,
        folder="prefeval",
        questions=load_prefeval_benchmark,
        choices=load_prefeval_choices,
        choice_variant="form",
    ),
    DatasetSpec(
        "amazon",
        "Amazon Beauty 2023: each user's next review among five",
        AmazonOptions,
        folder="amazon_beauty",
        choices=load_amazon_choices,
        choice_note="next-review selection (no written request), not product search",
    ),
)


def dataset(name: str) -> DatasetSpec:
    """The row called ``name``.

    Raises:
        ValueError: no such row (the message lists the table).
    """
    for spec in DATASETS:
        if spec.name == name:
            return spec
    raise ValueError(f"unknown dataset {name!r}; choose from: {', '.join(s.name for s in DATASETS)}")


def _choice_sets() -> dict[str, tuple[DatasetSpec, dict[str, Any]]]:
    """Choice set name -> (its row, the option values the name fixes)."""
    sets: dict[str, tuple[DatasetSpec, dict[str, Any]]] = {}
    for spec in DATASETS:
        if spec.choices is None:
            continue
        if spec.choice_variant is None:
            sets[spec.name] = (spec, {})
            continue
        for value in get_args(spec.options.model_fields[spec.choice_variant].annotation):
            sets[f"{spec.name}-{value}"] = (spec, {spec.choice_variant: value})
    return sets


def choice_set(name: str) -> tuple[DatasetSpec, dict[str, Any]]:
    """The row of choice set ``name`` and the options it fixes (``prefeval-choice``: ``form=choice``)."""
    sets = _choice_sets()
    if name not in sets:
        raise ValueError(f"unknown choices {name!r}; choose from: {', '.join(sets)}")
    return sets[name]


def _options_model(name: str, rows: list[DatasetSpec]) -> type[BaseModel]:
    """A model with one field per row that has options, named after the row, defaulting to them."""
    fields: dict[str, Any] = {
        spec.name: (spec.options, spec.options()) for spec in rows if spec.options.model_fields
    }
    config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)
    return create_model(name, __config__=config, **fields)


if TYPE_CHECKING:  # mypy cannot see the members of a generated enum or the fields of a generated model

    class BenchmarkName(StrEnum):
        """Datasets with questions (``personamem eval --benchmark``)."""

    class RecordFormat(StrEnum):
        """Datasets with records (``personamem ingest --format``)."""

    class ChoiceName(StrEnum):
        """Choice sets (``personamem eval-memory --benchmark``)."""

    class BenchmarkOptions(BaseModel):
        """The options of every dataset with questions or choices, one field per dataset."""

    class RecordOptions(BaseModel):
        """The options of every dataset with records, one field per dataset."""

else:
    BenchmarkName = StrEnum("BenchmarkName", {s.name.upper(): s.name for s in DATASETS if s.questions})
    BenchmarkName.__doc__ = "Datasets with questions (``personamem eval --benchmark``)."
    RecordFormat = StrEnum("RecordFormat", {s.name.upper(): s.name for s in DATASETS if s.records})
    RecordFormat.__doc__ = "Datasets with records (``personamem ingest --format``)."
    ChoiceName = StrEnum("ChoiceName", {n.upper().replace("-", "_"): n for n in _choice_sets()})
    ChoiceName.__doc__ = "Choice sets (``personamem eval-memory --benchmark``)."
    BenchmarkOptions = _options_model("BenchmarkOptions", [s for s in DATASETS if s.questions or s.choices])
    BenchmarkOptions.__doc__ = (
        "The options of every dataset with questions or choices, one field per dataset."
    )
    RecordOptions = _options_model("RecordOptions", [s for s in DATASETS if s.records])
    RecordOptions.__doc__ = "The options of every dataset with records, one field per dataset."


def dataset_options(spec: DatasetSpec, options: BaseModel | None) -> dict[str, Any]:
    """``spec``'s reader keywords from a :data:`BenchmarkOptions` or :data:`RecordOptions`.

    None, or options without a field for ``spec``, give its defaults.
    """
    own = getattr(options, spec.name, None) if options is not None else None
    return (own if own is not None else spec.options()).model_dump()


def stray_options(spec: DatasetSpec, options: BaseModel) -> list[str]:
    """The options given in ``options`` that belong to another dataset (``--noise`` for LoCoMo)."""
    given: list[str] = []
    for name in options.model_fields_set:
        if name != spec.name:
            own = getattr(options, name)
            fields = type(own).model_fields
            given += ["--" + (fields[f].alias or f).replace("_", "-") for f in sorted(own.model_fields_set)]
    return given


def read_records(name: str, path: Path, options: BaseModel | None = None) -> list[Record]:
    """The records of dataset ``name`` at ``path``.

    Raises:
        ValueError: an unknown name, or a dataset without records.
    """
    spec = dataset(name)
    if spec.records is None:
        raise ValueError(f"{name} has no records reader")
    return spec.records(path, **dataset_options(spec, options))


def read_questions(name: str, path: Path, options: BaseModel | None = None) -> Benchmark:
    """The benchmark (records and questions) of dataset ``name`` at ``path``.

    Raises:
        ValueError: an unknown name, or a dataset without questions.
    """
    spec = dataset(name)
    if spec.questions is None:
        raise ValueError(f"{name} has no questions")
    return spec.questions(path, **dataset_options(spec, options))


def read_choices(
    name: str, path: Path, needs: ChoiceNeeds, options: BaseModel | None = None
) -> list[ChoiceInstance]:
    """The instances of choice set ``name`` (a :data:`ChoiceName`) at ``path``.

    Raises:
        ValueError: an unknown choice set.
    """
    spec, fixed = choice_set(name)
    assert spec.choices is not None  # only rows with choices name a set
    return spec.choices(path, needs, **{**dataset_options(spec, options), **fixed})


def nest_options(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with dataset options given flat (``noise=0.5``) moved under ``options``.

    For configs holding a :data:`BenchmarkOptions` as ``options``: the command line gives it nested
    already; Python callers may write ``EvalConfig(..., noise=0.5)`` as the options read.
    """
    nested = dict(data)
    flat: dict[str, dict[str, Any]] = {}
    for spec in DATASETS:
        if spec.name in BenchmarkOptions.model_fields:
            for key in spec.options.model_fields:
                if key in nested:
                    flat.setdefault(spec.name, {})[key] = nested.pop(key)
    if flat:
        given = nested.get("options") or {}
        given = given.model_dump(exclude_unset=True) if isinstance(given, BaseModel) else dict(given)
        nested["options"] = {
            **given,
            **{name: {**given.get(name, {}), **keys} for name, keys in flat.items()},
        }
    return nested
