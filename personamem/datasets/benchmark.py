"""What every benchmark loader returns: a corpus of records and the questions asked of it.

Loaders differ (PersonaBench, LoCoMo, TREC iKAT, PrefEval) but the harness only sees this shape, so a
method is judged the same way everywhere. Gold labels are record ids, scoped to the question's user,
because record ids are unique per user only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from personamem.records import JsonScalar, Record

__all__ = ["Benchmark", "Question", "Skip", "evenly_spaced"]

T = TypeVar("T")


def evenly_spaced(items: Sequence[T], n: int | None) -> list[T]:
    """``n`` items spread evenly over ``items`` (all of them when ``n`` is None or not smaller).

    A subset of a subset: the picks for ``n`` include those for any ``m`` dividing ``n``, so a quick
    run on fewer questions reuses the LLM outputs cached by a larger one.
    """
    if not n or n >= len(items):
        return list(items)
    return [items[i * len(items) // n] for i in range(n)]


@dataclass(frozen=True)
class Question:
    """One query against one user's records, with whatever gold the benchmark provides.

    Attributes:
        id: unique within the benchmark (upstream ids where they exist).
        user_id: whose records answer it.
        text: the query as the user asked it.
        relevant: gold record ids of that user with graded relevance (1 = relevant); empty when the
            benchmark has no retrieval gold for this question.
        answer: the reference answer as text, if any.
        category: the benchmark's question type (PersonaBench ``type``, LoCoMo category name...),
            used to break metrics down.
        gold_groups: alternatives per answer value, for protocols that accept any one supporting
            record per value (PersonaBench upstream); None elsewhere.
        choices: multiple-choice options with the correct one first (PrefEval); empty elsewhere.
        context: earlier turns of the conversation, oldest first, for conversational benchmarks
            (iKAT), where the query alone is ambiguous.
        attributes: other per-question facts worth breaking down by or keeping (difficulty, ...).
    """

    id: str
    user_id: str
    text: str
    relevant: Mapping[str, int]
    answer: str | None = None
    category: str = ""
    gold_groups: tuple[tuple[str, ...], ...] | None = None
    choices: tuple[str, ...] = ()
    context: tuple[str, ...] = ()
    attributes: Mapping[str, JsonScalar] = field(default_factory=dict)


@dataclass(frozen=True)
class Skip:
    """A question left out of scoring and why, so the report can count it instead of hiding it."""

    question_id: str
    reason: str


@dataclass(frozen=True)
class Benchmark:
    """A loaded benchmark: records to ingest, questions to ask, questions skipped with reasons.

    Attributes:
        name: e.g. ``"personabench"``, with options that change the data (``"personabench@noise0.5"``).
        records: every user's records; their ``user_id`` values are the question users.
        questions: the questions to score.
        skipped: questions that could not be scored, with the reason (gold ids naming no record...).
        notes: repairs made while loading (e.g. malformed upstream evidence ids fixed), for the report.
    """

    name: str
    records: list[Record]
    questions: list[Question]
    skipped: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def users(self) -> list[str]:
        """Users that own records, in first-seen order."""
        return list(dict.fromkeys(record.user_id for record in self.records))

    def skip_reasons(self) -> Counter[str]:
        """How many questions were skipped for each reason."""
        return Counter(skip.reason for skip in self.skipped)
