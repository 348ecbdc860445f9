"""Which served records an answer drew on: implicit feedback from the answer alone.

An application rarely knows which records its LLM used, but it has the answer the LLM wrote from
the context personamem served. For each served record, :func:`answer_signals` measures what the
answer shares with it: content words (the share of the answer's, that share weighted towards words
few served records hold, and the count), names, numbers and
dates, the best encoder cosine between one of the answer's sentences and the record (and its gap to
the best record's), and the share of the question's content words the record holds (the answer
alone, "2022", rarely says which record it came from; with the question it does). Not the record's
served rank: labels that follow the live order would teach ``improve`` the order it already has.
A logistic model over those signals
(:class:`Attribution`, fitted on the benchmarks' gold evidence by ``personamem train attribution``
and shipped as ``personamem/data/attribution.json``) scores each record; those at or above its
threshold are the records the answer used, which ``improve`` learns from as it does from
``used_record_ids``.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import CheckpointError
from personamem.records import Record
from personamem.retrieval.bm25 import tokenize
from personamem.retrieval.cues import dates, names, numbers

if TYPE_CHECKING:
    from personamem.interactions import Interaction
    from personamem.store import Store

__all__ = ["SHIPPED_ATTRIBUTION", "SIGNALS", "Attribution", "answer_signals", "labelled", "sentences"]

SHIPPED_ATTRIBUTION = Path(__file__).resolve().parent / "data" / "attribution.json"
"""The fitted model that ships with the package."""
SIGNALS: tuple[str, ...] = (
    "answer_share",
    "answer_unique",
    "shared_log",
    "names",
    "numbers",
    "dates",
    "cosine",
    "cosine_gap",
    "query_share",
    "answer_x_query",
)
"""What the model reads of one (answer, served record) pair, in column order."""
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")


def sentences(text: str) -> list[str]:
    """The answer's sentences (the whole answer when it has one)."""
    parts = [p.strip() for p in _SENTENCE.split(text) if p.strip()]
    return parts or [text]


def answer_signals(
    query: str, answer: str, records: Sequence[Record], vectors: np.ndarray, encoder: Encoder
) -> np.ndarray:
    """``(len(records), len(SIGNALS))``: what ``answer`` (to ``query``) shares with each served record.

    Rows in served order; ``vectors`` are the records' stored vectors (rows as ``records``); the
    answer's sentences are encoded here, once.
    """
    if not records:
        return np.zeros((0, len(SIGNALS)), np.float32)
    words, asked = (set(t) for t in tokenize([answer, query]))
    record_words = [set(t) for t in tokenize([r.text for r in records])]
    holders = {w: sum(w in tokens for tokens in record_words) for w in words}  # served records holding it
    a_names, a_numbers, a_dates = names(answer), numbers(answer), dates(answer)
    said = encoder.encode(sentences(answer))
    cosine = (np.asarray(vectors, np.float32) @ said.T).max(axis=1)
    rows = []
    for row, (record, tokens) in enumerate(zip(records, record_words, strict=True)):
        shared = len(words & tokens)
        answer_share = shared / len(words) if words else 0.0
        query_share = len(asked & tokens) / len(asked) if asked else 0.0
        unique = sum(1.0 / holders[w] for w in words & tokens) / len(words) if words else 0.0
        rows.append(
            [
                answer_share,
                unique,
                float(np.log1p(shared)),
                float(len(a_names & names(record.text))),
                float(len(a_numbers & numbers(record.text))),
                float(len(a_dates & dates(record.text))),
                float(cosine[row]),
                float(cosine[row] - cosine.max()),
                query_share,
                answer_share * query_share,
            ]
        )
    return np.array(rows, np.float32)


@dataclass(frozen=True)
class Attribution:
    """A logistic model over :data:`SIGNALS` and the threshold its probability must reach."""

    weights: tuple[float, ...]
    bias: float
    threshold: float
    info: dict[str, Any]

    @classmethod
    def load(cls, path: str | Path = SHIPPED_ATTRIBUTION) -> Attribution:
        """A model written by ``personamem train attribution`` (default: the shipped one).

        Raises:
            CheckpointError: no such file, or one for other signals than this version computes.
        """
        return _load(str(path))

    def probability(self, signals: np.ndarray) -> np.ndarray:
        """Each pair's probability that the answer used the record."""
        z = signals @ np.asarray(self.weights, np.float32) + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    def used(
        self, query: str, answer: str, records: Sequence[Record], vectors: np.ndarray, encoder: Encoder
    ) -> list[str]:
        """The ids of the served ``records`` (in served order) the answer to ``query`` drew on."""
        if not answer.strip() or not records:
            return []
        signals = answer_signals(query, answer, records, vectors, encoder)
        chosen = self.probability(signals) >= self.threshold
        return [record.id for record, keep in zip(records, chosen, strict=True) if keep]

    def used_of(
        self,
        store: Store,
        user_id: str,
        query: str,
        answer: str,
        served: Sequence[str],
        held: dict[str, Record],
    ) -> list[str]:
        """:meth:`used` for the served record ids of a stored user (``held``: their records by id)."""
        records = [held[record_id] for record_id in served if record_id in held]
        vectors = store.record_vectors(user_id, [r.id for r in records])
        return self.used(query, answer, records, vectors, store.encoder)

    def to_json(self) -> dict[str, Any]:
        """The file :meth:`load` reads."""
        return {
            "signals": list(SIGNALS),
            "weights": list(self.weights),
            "bias": self.bias,
            "threshold": self.threshold,
            **self.info,
        }


@functools.cache
def _load(path: str) -> Attribution:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if tuple(data["signals"]) != SIGNALS:
            raise CheckpointError(
                f"attribution model {path}: fitted on other signals than this version computes"
            )
        info = {k: v for k, v in data.items() if k not in ("signals", "weights", "bias", "threshold")}
        return Attribution(
            tuple(map(float, data["weights"])), float(data["bias"]), float(data["threshold"]), info
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"attribution model {path}: unreadable ({exc})") from None


def labelled(
    store: Store, interactions: Sequence[Interaction], attribution: Attribution | None = None
) -> list[Interaction]:
    """The interactions whose feedback names the records the answer used, or whose answer says which.

    Feedback with an answer and no ``used_record_ids`` is attributed to the served records it drew
    on (by ``attribution``, default the shipped model; its ids become the feedback's
    ``used_record_ids``); an answer that drew on none of them teaches nothing and is left out.
    ``improve`` and PURPLE's ``used`` reward learn from what this returns.
    """
    attribution = attribution or Attribution.load()
    held: dict[str, dict[str, Record]] = {}  # user -> record id -> record, read once per user
    found = []
    for interaction in interactions:
        answer, feedback = interaction.accepted_answer, interaction.feedback
        if interaction.used or answer is None or feedback is None:
            found += [interaction] if interaction.used else []
            continue
        user = interaction.user_id
        if user not in held:
            held[user] = {r.id: r for r in store.records(user)}
        served = [r.record_id for r in interaction.results]
        used = attribution.used_of(store, user, interaction.query, answer, served, held[user])
        if used:
            attributed = feedback.model_copy(update={"used_record_ids": used})
            found.append(interaction.model_copy(update={"feedback": attributed}))
    return found
