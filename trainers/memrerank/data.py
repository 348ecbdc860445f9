"""MemRerank's training prompts: one extraction prompt per training-side user, as TRL reads them.

A :class:`ChoiceExample` keeps what a reward needs beside the instance: the extraction prompt (its
numbered lines map evidence back to records and are what copying is checked against) and the seed of
the order the candidates are shown in. The dataset TRL iterates holds only the chat messages and the
example id; the rewards look the rest up by id, so the dataset stays small and plain.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from personamem.datasets.choice import ChoiceInstance, split_users
from personamem.datasets.traffic import Traffic, accepted
from personamem.preference.extractor import ExtractionPrompt, PromptedExtractor

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = [
    "ChoiceExample",
    "choice_examples",
    "instances_from_traffic",
    "to_dataset",
    "training_instances",
]

NEGATIVES = 4
"""Shown-but-not-used records per choice: the reranker's 1-positive/4-negative instance."""


@dataclass(frozen=True)
class ChoiceExample:
    """One training prompt: a choice instance, its extraction prompt and its candidate order's seed.

    Attributes:
        instance: the user's history, request and candidates (the positive first).
        prompt: the extraction prompt built from ``instance.history``.
        order_seed: seeds :func:`~personamem.preference.setwise.shuffled`; one order per instance,
            so the memories of one GRPO group are compared on the same shown order.
    """

    instance: ChoiceInstance
    prompt: ExtractionPrompt
    order_seed: int

    @property
    def id(self) -> str:
        """The instance's id (the dataset's ``instance_id`` column)."""
        return self.instance.id


def training_instances(
    instances: Sequence[ChoiceInstance], *, users: int | None = None, seed: int = 0
) -> list[ChoiceInstance]:
    """The instances on the training side of the fixed split, optionally a seeded sample of users.

    The split is :func:`~personamem.datasets.choice.split_users`'s, the one ``personamem eval-memory``
    holds out, so no test user is ever trained on.
    """
    train, _ = split_users([i.group for i in instances])
    kept = [i for i in instances if i.group in train]
    if users is not None and users < len({i.user_id for i in kept}):
        chosen = set(random.Random(seed).sample(sorted({i.user_id for i in kept}), users))
        kept = [i for i in kept if i.user_id in chosen]
    return kept


def instances_from_traffic(traffic: Traffic, *, min_rating: float | None = None) -> list[ChoiceInstance]:
    """A 1-in-5 choice per interaction where the answer used a shown record and four were not used.

    The positive is the first used record, the negatives the first four shown records that were not
    used (the shown order is the pipeline's); the history is the user's other records, so the memory
    cannot quote the choice. The category is the positive's (``general`` without one).
    """
    instances = []
    for interaction in traffic.interactions:
        if not accepted(interaction, min_rating) or not interaction.used:
            continue
        records = traffic.records(interaction.user_id)
        shown = [r.record_id for r in interaction.results if r.record_id in records]
        chosen = next((r for r in interaction.used if r in shown), None)
        negatives = [r for r in shown if r not in interaction.used][:NEGATIVES]
        if chosen is None or len(negatives) < NEGATIVES:
            continue
        positive = records[chosen]
        held = {chosen, *negatives}
        instances.append(
            ChoiceInstance(
                id=interaction.id,
                user_id=interaction.user_id,
                history=tuple(r for r in records.values() if r.id not in held),
                query=interaction.query,
                candidates=(positive.text, *(records[r].text for r in negatives)),
                category=positive.category or "general",
                group=interaction.user_id,
            )
        )
    return instances


def choice_examples(
    instances: Sequence[ChoiceInstance], extractor: PromptedExtractor, *, seed: int = 0
) -> list[ChoiceExample]:
    """One example per instance with a history (an empty history has nothing to extract).

    Raises:
        ValueError: two instances share an id (the rewards find examples by id).
    """
    examples = [
        ChoiceExample(i, extractor.prompt(i.history), random.Random(f"{seed}/{i.id}").randrange(2**31))
        for i in instances
        if i.history
    ]
    if len({e.id for e in examples}) != len(examples):
        raise ValueError("choice instances must have distinct ids")
    return examples


def to_dataset(examples: Sequence[ChoiceExample]) -> Dataset:
    """TRL's conversational prompt dataset: ``prompt`` (chat messages) and ``instance_id``."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": e.prompt.messages, "instance_id": e.id} for e in examples],
    )
