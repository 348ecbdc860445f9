"""PURPLE's training examples: a user's history H as candidate records, a question x and its answer y.

Candidates are the user's top records from a first-stage retriever (the harness found hybrid best on
LoCoMo: R@100 0.87 against dense's 0.80), so the policy chooses among records that plausibly matter.
Splits are by user (a LoCoMo conversation, a PersonaBench person; :class:`~personamem.datasets.DataSource`
draws them), so test users are never seen in training.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from personamem.datasets.benchmark import Benchmark
from personamem.datasets.traffic import Traffic, accepted
from personamem.encoder import Encoder
from personamem.records import Record
from personamem.retrieval.base import Retriever

__all__ = [
    "ProfileExample",
    "build_examples",
    "examples_from_benchmark",
    "examples_from_traffic",
]


@dataclass(frozen=True)
class ProfileExample:
    """One (H, x, y): the candidates a profile is picked from, the question, the user's true answer.

    ``gold`` names the records holding the answer: a benchmark's marked evidence, or for traffic the
    records the accepted answer used (named in feedback, or attributed to the answer). The LLM
    reward never reads it (the reward model's agreement report does); the ``used`` reward is it.
    """

    id: str
    user_id: str
    query: str
    answer: str
    candidates: tuple[Record, ...]
    gold: frozenset[str] = frozenset()


def build_examples(
    benchmark: Benchmark, retriever: Retriever, *, candidates: int = 20
) -> list[ProfileExample]:
    """An example per question that has an answer, with ``retriever``'s top ``candidates`` records."""
    if candidates < 1:
        raise ValueError(f"candidates must be at least 1, got {candidates}")
    examples = []
    for question in benchmark.questions:
        if not question.answer or not question.answer.strip():
            continue
        hits = retriever.search(question.user_id, question.text, candidates)
        if hits:
            examples.append(
                ProfileExample(
                    question.id,
                    question.user_id,
                    question.text,
                    question.answer.strip(),
                    tuple(h.record for h in hits),
                    frozenset(rid for rid, grade in question.relevant.items() if grade > 0),
                )
            )
    return examples


def examples_from_benchmark(
    benchmark: Benchmark,
    encoder: Encoder,
    *,
    first_stage: str = "hybrid",
    candidates: int = 20,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[ProfileExample]:
    """:func:`build_examples` over a temporary store holding the benchmark's corpus.

    Raises:
        ValueError: an unknown first stage.
    """
    from personamem.datasets.vectors import build_store
    from personamem.methods import method_named
    from personamem.pipeline.config import FIRST_STAGES

    if first_stage not in FIRST_STAGES:
        raise ValueError(f"first stage must be one of {list(FIRST_STAGES)}, got {first_stage!r}")
    with tempfile.TemporaryDirectory(prefix="personamem-examples-") as tmp:
        store = build_store(benchmark, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress)
        try:
            first = method_named(first_stage, None).build(store, 0)
            return build_examples(benchmark, first, candidates=candidates)
        finally:
            store.close()


def examples_from_traffic(
    traffic: Traffic,
    *,
    first_stage: str = "hybrid",
    candidates: int = 20,
    min_rating: float | None = None,
    used: bool = False,
    progress: Progress | None = None,
) -> list[ProfileExample]:
    """An example per logged interaction whose feedback carries the answer the application accepted.

    With ``used``, an example per interaction whose feedback says which records the answer used
    (named, or attributed to the answer: :func:`~personamem.attribution.labelled`), those records
    its ``gold``. The candidates are ``first_stage``'s top ``candidates`` from the user's records in
    the store now, so records deleted since the call are not offered and the policy learns over what
    serving sees.
    """
    from personamem.attribution import labelled
    from personamem.methods import method_named

    usable = [i for i in traffic.interactions if accepted(i, min_rating)]
    usable = labelled(traffic.store, usable) if used else [i for i in usable if i.accepted_answer]
    first = method_named(first_stage, None).build(traffic.store, 0)
    task = progress.add_task("candidates from the store", total=len(usable)) if progress else None
    examples = []
    for interaction in usable:
        hits = first.search(interaction.user_id, interaction.query, candidates)
        answer = interaction.accepted_answer or ""
        if hits and (answer or used):
            records = tuple(h.record for h in hits)
            gold = frozenset(interaction.used or ())
            examples.append(
                ProfileExample(interaction.id, interaction.user_id, interaction.query, answer, records, gold)
            )
        if progress is not None and task is not None:
            progress.advance(task)
    return examples
