"""Choice instances: a user's history, a request and five candidates of which one is the user's.

MemRerank's unit of evaluation and of reward. Each benchmark gives them differently:

* **Amazon Beauty 2023** (``load_amazon_choices``): the history is the user's reviews before the
  target, the positive is the user's true next review (title and text), and the four negatives are
  other users' next reviews chosen the way the paper chooses them from a first stage: two from ranks
  1-20, one from 21-50 and one from 51-100 of a dense ranking of the other targets by cosine to the
  centroid of the user's history. There is no written request: it is next-review selection, not
  product search.
* **PrefEval** (``prefeval_choices``): the history is the preference turns plus distractors, the
  request is the question, the candidates are the four multiple-choice options (aligned first).
* **PersonaBench** (``personabench_choices``): the ``Preference`` questions; the candidates are the
  user's gold answer and the answers other users give to the four most similar preference questions
  (by cosine of the question texts, so "which sports..." meets other users' sports).

Candidates are stored with the positive first; the harness and the trainer show them in a seeded
order (:func:`personamem.preference.setwise.shuffled`).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import IngestError
from personamem.eval.benchmark import Benchmark
from personamem.eval.vectors import corpus_vectors
from personamem.records import Record

__all__ = [
    "AMAZON_CATEGORY",
    "ChoiceInstance",
    "load_amazon_choices",
    "personabench_choices",
    "prefeval_choices",
    "split_users",
]

AMAZON_CATEGORY = "beauty"
_NEGATIVE_RANKS = ((0, 20), (0, 20), (20, 50), (50, 100))  # the paper's first-stage bands
_TAG = re.compile(r"<br\s*/?>|<[^>]+>")


@dataclass(frozen=True)
class ChoiceInstance:
    """One 1-in-n choice for one user.

    Attributes:
        id: unique within its benchmark.
        user_id: whose history.
        history: the user's records the memory is built from (oldest first).
        query: the request ("" when the benchmark has none).
        candidates: candidate texts, the user's (positive) one first.
        category: the category of the target (the within-category memory's section).
        group: what the held-out split is over (the user, or PrefEval's topic).
    """

    id: str
    user_id: str
    history: tuple[Record, ...]
    query: str
    candidates: tuple[str, ...]
    category: str
    group: str


def split_users(groups: Sequence[str], *, test_fraction: float = 0.3) -> tuple[set[str], set[str]]:
    """A fixed train/test split of group names by hash (the same split in every run and process)."""

    def bucket(group: str) -> float:
        return int(hashlib.sha256(group.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF

    distinct = set(groups)
    test = {g for g in distinct if bucket(g) < test_fraction}
    return distinct - test, test


def review_text(review: dict[str, object]) -> str:
    """A review as one line of text: title, then body without HTML tags."""
    title = str(review.get("title") or "").strip()
    body = " ".join(_TAG.sub(" ", str(review.get("text") or "")).split())
    return f"{title}. {body}" if title else body


def load_amazon_choices(
    data_dir: str | Path,
    *,
    split: Literal["train", "val", "test"] = "train",
    encoder: Encoder,
    cache_dir: Path | None = None,
) -> list[ChoiceInstance]:
    """One instance per user of ``split`` (see the module docstring for how negatives are chosen).

    Raises:
        IngestError: the file is missing or a line is not a user row (named with its line number).
    """
    path = Path(data_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise IngestError("Amazon Beauty split file not found", path=str(path))
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            user, history, target = row["user_id"], row["history"], row["target"]
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise IngestError(f"not a user row ({exc})", path=str(path), line=number) from None
        rows.append((str(user), [review_text(r) for r in history], review_text(target)))
    targets = [target for _, _, target in rows]
    target_vectors = corpus_vectors(encoder, targets, cache_dir)
    reviews = [text for _, history, _ in rows for text in history]
    review_vectors = corpus_vectors(encoder, reviews, cache_dir)  # one batched encode for every history
    starts = np.cumsum([0] + [len(history) for _, history, _ in rows])
    instances = []
    for index, (user, history, target) in enumerate(rows):
        centroid = review_vectors[starts[index] : starts[index + 1]].mean(axis=0)
        order = [int(i) for i in np.argsort(-(target_vectors @ centroid)) if i != index]
        rng = random.Random(f"amazon/{split}/{user}")
        negatives: list[int] = []
        for low, high in _NEGATIVE_RANKS:
            band = [i for i in order[low:high] if i not in negatives and targets[i] != target]
            negatives.append(rng.choice(band))
        records = tuple(
            Record(user_id=user, id=f"review-{n}", text=text, category=AMAZON_CATEGORY)
            for n, text in enumerate(history)
        )
        instances.append(
            ChoiceInstance(
                id=f"{split}/{user}",
                user_id=user,
                history=records,
                query="",
                candidates=(target, *(targets[i] for i in negatives)),
                category=AMAZON_CATEGORY,
                group=user,
            )
        )
    return instances


def prefeval_choices(benchmark: Benchmark) -> list[ChoiceInstance]:
    """PrefEval's questions as choices among their options; the topic is the category and the group."""
    by_user: dict[str, list[Record]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append(record)
    return [
        ChoiceInstance(
            id=question.id,
            user_id=question.user_id,
            history=tuple(
                r.model_copy(update={"category": question.category}) for r in by_user[question.user_id]
            ),
            query=question.text,
            candidates=question.choices,
            category=question.category,
            group=question.category,
        )
        for question in benchmark.questions
        if question.choices
    ]


def personabench_choices(benchmark: Benchmark, encoder: Encoder) -> list[ChoiceInstance]:
    """PersonaBench's preference questions as 1-in-5 choices against other users' answers, grouped by user."""
    by_user: dict[str, list[Record]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append(record)
    questions = [q for q in benchmark.questions if q.category == "Preference" and q.answer]
    vectors = encoder.encode([q.text for q in questions])
    instances = []
    for i, question in enumerate(questions):
        others = [j for j in np.argsort(-(vectors @ vectors[i])) if questions[j].user_id != question.user_id]
        negatives = list(dict.fromkeys(str(questions[j].answer) for j in others))
        negatives = [a for a in negatives if a != question.answer][:4]
        if len(negatives) < 4:
            continue
        instances.append(
            ChoiceInstance(
                id=question.id,
                user_id=question.user_id,
                history=tuple(by_user[question.user_id]),
                query=question.text,
                candidates=(str(question.answer), *negatives),
                category="",
                group=question.user_id,
            )
        )
    return instances
