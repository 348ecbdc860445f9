"""Scoring a statement selection against the gold statements (no harness needed).

Scoring a whole run against iKAT's gold (the selection per turn, and the rewrite against the manual
one by ROUGE-L and embedding cosine) is :func:`personamem.rewriting.evaluate.score_rewrites`.
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["METRICS", "selection_prf"]

METRICS = ("selection_precision", "selection_recall", "selection_f1", "rouge_l", "cosine")
"""What :func:`~personamem.rewriting.evaluate.score_rewrites` reports per turn, in this order."""


def selection_prf(selected: Collection[str], gold: Collection[str]) -> tuple[float, float, float]:
    """Precision, recall and F1 of a selection against the gold statement ids.

    Most iKAT turns need no statement, so the empty cases are defined rather than skipped: selecting
    nothing when nothing is relevant is fully right (1.0, 1.0, 1.0); selecting nothing when something
    is relevant, or something when nothing is, is fully wrong (0.0, 0.0, 0.0). Otherwise the usual
    set ratios, with F1 0.0 when nothing selected is relevant.
    """
    chosen, truth = set(selected), set(gold)
    if not chosen or not truth:
        score = float(chosen == truth)
        return score, score, score
    hits = len(chosen & truth)
    precision, recall = hits / len(chosen), hits / len(truth)
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return precision, recall, f1
