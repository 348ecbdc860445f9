"""Every trainer by one name: the table ``personamem train`` is built from.

A row names a trainer's folder's ``run(config, progress=...)``, the run config it takes (its fields,
nested models' included, are the command's options) and a line of help. ``run`` reads its data,
splits users, trains and returns the summary the command prints, so a new trainer is its folder plus
one row, with no command-line code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from personamem.trainers.adapter.config import AdapterRunConfig
from personamem.trainers.adapter.run import run as run_adapter
from personamem.trainers.attribution.config import AttributionRunConfig
from personamem.trainers.attribution.run import run as run_attribution
from personamem.trainers.memrerank.config import MemRerankRunConfig
from personamem.trainers.memrerank.run import run as run_memrerank
from personamem.trainers.pgret.config import PGRetRunConfig
from personamem.trainers.pgret.run import run as run_pgret
from personamem.trainers.purple.config import PurpleRunConfig
from personamem.trainers.purple.run import run as run_purple
from personamem.trainers.ranker.config import RankerRunConfig
from personamem.trainers.ranker.run import run as run_ranker
from personamem.trainers.run import TrainerRun, TrainSummary

__all__ = ["TRAINERS", "TrainerSpec"]


@dataclass(frozen=True)
class TrainerSpec:
    """One row of the table.

    Attributes:
        name: the command, ``personamem train <name>``.
        config: the run config the command's options build.
        run: trains; returns the summary (None in processes other than the main one).
        help: one line for ``personamem train --help``; the command's own help is ``run``'s docstring.
    """

    name: str
    config: type[TrainerRun]
    run: Callable[..., TrainSummary | None]
    help: str


TRAINERS: tuple[TrainerSpec, ...] = (
    TrainerSpec(
        "adapter",
        AdapterRunConfig,
        run_adapter,
        "Query adapter: a small map on the query vector, from benchmarks' training users or a store.",
    ),
    TrainerSpec(
        "ranker",
        RankerRunConfig,
        run_ranker,
        "Learned ranker: reorder the default first stage's candidates (LightGBM on benchmarks' gold).",
    ),
    TrainerSpec(
        "attribution",
        AttributionRunConfig,
        run_attribution,
        "Answer attribution: which served records an answer used (from reference answers and gold evidence).",
    ),
    TrainerSpec(
        "purple",
        PurpleRunConfig,
        run_purple,
        "PURPLE: learn which K records (and in which order) make the LLM likeliest to give the answer.",
    ),
    TrainerSpec(
        "memrerank",
        MemRerankRunConfig,
        run_memrerank,
        "MemRerank: train the memory extractor so the setwise reranker picks the user's true next item.",
    ),
    TrainerSpec(
        "pgret",
        PGRetRunConfig,
        run_pgret,
        "PG-Ret: fine-tune the query tower to find relevant records the base retriever misses.",
    ),
)
"""Every trainer, in ``personamem train --help``'s order."""
