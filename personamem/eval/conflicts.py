"""How precise conflict detection is: the labelled (earlier, newer) pairs built on PrefEval.

``personamem/data/conflict_pairs.jsonl`` names a PrefEval explicit preference (topic file and
index; the text is read from the user's copy of the benchmark, never shipped) and a newer statement
written for this set, three per preference for 32 preferences: one that replaces it, one compatible
statement on the same topic, and one that restates or refines it (the hard case: close in meaning,
nothing replaced). The detector is scored as ``add`` runs it (pairs under its
cosine gate are never asked, so count as "no") and on every pair; the cosine alone is the baseline
an embedding-only check would be.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from personamem.conflicts import ConflictDetector
from personamem.encoder import Encoder
from personamem.errors import InvalidInputError

__all__ = ["ConflictPair", "ConflictScores", "load_conflict_pairs", "score_conflicts"]


@dataclass(frozen=True)
class ConflictPair:
    """An earlier statement, a newer one, and whether the newer one replaces it."""

    earlier: str
    newer: str
    replaces: bool


@dataclass(frozen=True)
class ConflictScores:
    """Precision, recall and F1 (with 95 % bootstrap intervals) of one way of deciding.

    ``said_yes`` counts the pairs called replacements (precision is 0 when there are none); ``auc`` is
    the ROC AUC of the score the decision thresholds (0.5: chance).
    """

    name: str
    said_yes: int
    auc: float
    precision: float
    recall: float
    f1: float
    precision_ci: tuple[float, float]
    recall_ci: tuple[float, float]


def load_conflict_pairs(prefeval: Path) -> list[ConflictPair]:
    """The labelled pairs, their earlier statements read from PrefEval's ``explicit_preference`` files.

    Raises:
        InvalidInputError: the PrefEval folder lacks a topic file or an index the set names.
    """
    folder = prefeval / "benchmark_dataset" / "explicit_preference"
    text = resources.files("personamem").joinpath("data/conflict_pairs.jsonl").read_text(encoding="utf-8")
    pairs, topics = [], {}
    for number, line in enumerate(text.splitlines(), start=1):
        row = json.loads(line)
        if row["topic"] not in topics:
            path = folder / f"{row['topic']}.json"
            if not path.is_file():
                raise InvalidInputError(f"conflict pair {number}: {path} not found (is {prefeval} PrefEval?)")
            topics[row["topic"]] = json.loads(path.read_text(encoding="utf-8"))
        preference = topics[row["topic"]][row["index"]]["preference"]
        pairs.append(ConflictPair(preference, row["newer"], bool(row["replaces"])))
    return pairs


def _scores(
    name: str, scores: list[float], threshold: float, gold: list[bool], seed: int, rounds: int = 1000
) -> ConflictScores:
    said = [score > threshold for score in scores]

    def prf(indices: list[int]) -> tuple[float, float, float]:
        tp = sum(said[i] and gold[i] for i in indices)
        predicted, actual = sum(said[i] for i in indices), sum(gold[i] for i in indices)
        precision = tp / predicted if predicted else 0.0
        recall = tp / actual if actual else 0.0
        return precision, recall, 2 * precision * recall / (precision + recall) if tp else 0.0

    rng = random.Random(seed)
    everything = list(range(len(gold)))
    draws = [prf([rng.choice(everything) for _ in everything]) for _ in range(rounds)]
    precision, recall, f1 = prf(everything)
    positives = [x for x, g in zip(scores, gold, strict=True) if g]
    negatives = [x for x, g in zip(scores, gold, strict=True) if not g]
    auc = sum((a > b) + 0.5 * (a == b) for a in positives for b in negatives) / (
        len(positives) * len(negatives)
    )
    precision_ci, recall_ci = _ci([d[0] for d in draws]), _ci([d[1] for d in draws])
    return ConflictScores(name, sum(said), auc, precision, recall, f1, precision_ci, recall_ci)


def _ci(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))


def score_conflicts(
    pairs: list[ConflictPair], detector: ConflictDetector, encoder: Encoder, *, seed: int = 0
) -> tuple[list[ConflictScores], list[float], list[float]]:
    """The detector as ``add`` runs it, on every pair, and the cosine baseline; with margins and cosines."""
    earlier = encoder.encode([p.earlier for p in pairs])
    newer = encoder.encode([p.newer for p in pairs])
    cosines = [float(a @ b) for a, b in zip(earlier, newer, strict=True)]
    margins = detector.margins([(p.earlier, p.newer) for p in pairs])
    gold = [p.replaces for p in pairs]
    # a pair under the cosine gate is never asked: as add runs it, its score is -inf
    gated = [m if c >= detector.min_similarity else -np.inf for m, c in zip(margins, cosines, strict=True)]
    median_cos = float(np.median(cosines))
    return (
        [
            _scores("LLM as add runs it (cosine gate)", gated, detector.margin, gold, seed),
            _scores("LLM on every pair", margins, detector.margin, gold, seed),
            _scores(f"cosine > median ({median_cos:.2f}) alone", cosines, median_cos, gold, seed),
        ],
        margins,
        cosines,
    )
