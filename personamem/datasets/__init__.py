"""The data layer: every benchmark (and the application's own JSONL) by name, and where data comes from.

One module per dataset (:mod:`~personamem.datasets.personabench`, :mod:`~personamem.datasets.locomo`,
:mod:`~personamem.datasets.ikat`, :mod:`~personamem.datasets.prefeval`,
:mod:`~personamem.datasets.amazon_beauty`, :mod:`~personamem.datasets.jsonl`) holds its options and its
readers; :data:`DATASETS` lists them, and the command line's choices and every dispatcher are built from
it. :class:`DataSource` is a benchmark or an application's logged traffic, with the user split that the
harness and every trainer share. Reading data is core: nothing here imports the harness or the trainers.
"""

from personamem.datasets.benchmark import Benchmark, Question, Skip, evenly_spaced
from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds
from personamem.datasets.source import (
    DataSource,
    HeldOutBenchmarks,
    UserSplit,
    held_out_questions,
    write_split,
)
from personamem.datasets.table import (
    DATASETS,
    BenchmarkName,
    BenchmarkOptions,
    ChoiceName,
    DatasetSpec,
    RecordFormat,
    RecordOptions,
    dataset,
    read_choices,
    read_questions,
    read_records,
)
from personamem.datasets.traffic import Traffic, TrafficSource

__all__ = [
    "DATASETS",
    "Benchmark",
    "BenchmarkName",
    "BenchmarkOptions",
    "ChoiceInstance",
    "ChoiceName",
    "ChoiceNeeds",
    "DataSource",
    "DatasetSpec",
    "HeldOutBenchmarks",
    "Question",
    "RecordFormat",
    "RecordOptions",
    "Skip",
    "Traffic",
    "TrafficSource",
    "UserSplit",
    "dataset",
    "evenly_spaced",
    "held_out_questions",
    "read_choices",
    "read_questions",
    "read_records",
    "write_split",
]
