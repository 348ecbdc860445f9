"""History shapes a benchmark can be read in besides its own, each scored as a fold of leave one out.

A benchmark's default reading is one conversation style; some of its data also holds another (PrefEval's
distractor chats, read whole with the assistant's replies, make a long user–assistant history, the
shape issue 57's external sets have). A shape is scored in the fold that leaves its benchmark out,
with that fold's adapter and ranker, so nothing that scores it was trained on the benchmark. Its
users are a subset spread evenly over the benchmark's (all of them is too many records to featurize
on a laptop), and it is judged by the same rule as a fold of its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from personamem.datasets.benchmark import Benchmark, evenly_spaced
from personamem.datasets.source import HeldOutBenchmarks
from personamem.datasets.table import BenchmarkName, BenchmarkOptions, read_questions

__all__ = ["SHAPES", "Shape", "shape_benchmark", "shapes_named"]


@dataclass(frozen=True)
class Shape:
    """One more reading of a benchmark, judged as a fold of its own.

    Attributes:
        name: the fold's name in reports and checkpoint files.
        benchmark: whose fold (adapter and ranker trained without it) scores the shape.
        options: the benchmark's reading options (its loader's keywords).
        users: how many of its users, spread evenly over them in order (None: all).
        summary: what history the shape is, for ``--help``.
    """

    name: str
    benchmark: str
    options: dict[str, Any] = field(default_factory=dict)
    users: int | None = None
    summary: str = ""


SHAPES: tuple[Shape, ...] = (
    Shape(
        "prefeval-long",
        "prefeval",
        {"inter_turns": 316, "replies": True},
        160,
        "PrefEval with its 24 distractor chats whole: 633 user and assistant messages per user, a third "
        "past the encoder's window (160 users)",
    ),
)
"""The shapes leave one out scores beside the benchmarks' own folds (``--leave-one-out-shapes``)."""


def shapes_named(names: tuple[str, ...]) -> tuple[Shape, ...]:
    """The :data:`SHAPES` rows called ``names``.

    Raises:
        ValueError: a name no row has, listing those that exist.
    """
    known = {shape.name: shape for shape in SHAPES}
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"no history shape {', '.join(unknown)}: choose from {', '.join(known)}")
    return tuple(known[name] for name in names)


def shape_benchmark(data: HeldOutBenchmarks, shape: Shape) -> Benchmark:
    """The shape's records and questions: its benchmark read with its options, on its users alone."""
    benchmark = BenchmarkName(shape.benchmark)
    options = BenchmarkOptions.model_validate({shape.benchmark: shape.options})
    loaded = read_questions(benchmark, data.folder(benchmark), options)
    users = set(evenly_spaced(sorted({q.user_id for q in loaded.questions}), shape.users))
    return dataclasses.replace(
        loaded,
        name=shape.name,
        records=[r for r in loaded.records if r.user_id in users],
        questions=[q for q in loaded.questions if q.user_id in users],
    )
