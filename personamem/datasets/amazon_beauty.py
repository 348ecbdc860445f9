"""Amazon Beauty 2023 as next-review choices (MemRerank's benchmark).

The history is the user's reviews before the target, the positive is the user's true next review
(title and text), and the four negatives are other users' next reviews chosen the way the paper chooses
them from a first stage: two from ranks 1-20, one from 21-50 and one from 51-100 of a dense ranking of
the other targets by cosine to the centroid of the user's history. There is no written request: it is
next-review selection, not product search. The folder ships its own ``train``/``test`` files; the fixed
user split of :func:`~personamem.datasets.choice.split_users` applies on top of either.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds
from personamem.datasets.vectors import corpus_vectors
from personamem.errors import IngestError
from personamem.records import Record

__all__ = ["AMAZON_CATEGORY", "AmazonOptions", "load_amazon_choices", "review_text"]

AMAZON_CATEGORY = "beauty"
_NEGATIVE_RANKS = ((0, 20), (0, 20), (20, 50), (50, 100))  # the paper's first-stage bands
_TAG = re.compile(r"<br\s*/?>|<[^>]+>")


class AmazonOptions(BaseModel):
    """Amazon Beauty has no reading options: the part (train or test file) is the caller's."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


def review_text(review: dict[str, object]) -> str:
    """A review as one line of text: title, then body without HTML tags."""
    title = str(review.get("title") or "").strip()
    body = " ".join(_TAG.sub(" ", str(review.get("text") or "")).split())
    return f"{title}. {body}" if title else body


def load_amazon_choices(data_dir: str | Path, needs: ChoiceNeeds) -> list[ChoiceInstance]:
    """One instance per user of the ``needs.part`` file (see the module docstring for the negatives).

    Raises:
        IngestError: the file is missing or a line is not a user row (named with its line number).
    """
    split, encoder, cache_dir = needs.part, needs.encoder, needs.cache_dir
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
