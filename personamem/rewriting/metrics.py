"""Scoring rewrites against iKAT's gold: statement selection and closeness to the manual rewrite.

Selection is scored per turn against ``Question.relevant`` (the organizers' ``ptkb_provenance``);
the rewrite against ``attributes["resolved_utterance"]`` by ROUGE-L F (word overlap) and by the cosine
of sentence embeddings (meaning, robust to paraphrase).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from personamem.encoder import Encoder
from personamem.eval.answers import rouge_l
from personamem.eval.benchmark import Question
from personamem.rewriting.rewriter import Rewrite

__all__ = ["METRICS", "score_rewrites", "selection_prf"]

METRICS = ("selection_precision", "selection_recall", "selection_f1", "rouge_l", "cosine")


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


def score_rewrites(
    rewrites: Sequence[Rewrite], turns: Sequence[Question], encoder: Encoder
) -> dict[str, dict[str, float]]:
    """Per-turn scores, as metric name (:data:`METRICS`) -> question id -> value.

    Turns without a (non-blank) ``resolved_utterance`` get selection scores only. All rewrites are
    embedded in one batch; the encoder's rows are unit vectors, so their dot product is the cosine.

    Raises:
        ValueError: a rewrite names no turn of ``turns``.
    """
    by_id = {turn.id: turn for turn in turns}
    unknown = [r.question_id for r in rewrites if r.question_id not in by_id]
    if unknown:
        raise ValueError(f"rewrites for turns not given: {unknown}")
    scores: dict[str, dict[str, float]] = {name: {} for name in METRICS}
    pairs: list[tuple[str, str, str]] = []  # question id, rewrite, reference
    for rewrite in rewrites:
        turn = by_id[rewrite.question_id]
        p, r, f1 = selection_prf(rewrite.selected, turn.relevant)
        scores["selection_precision"][turn.id] = p
        scores["selection_recall"][turn.id] = r
        scores["selection_f1"][turn.id] = f1
        reference = turn.attributes.get("resolved_utterance")
        if isinstance(reference, str) and reference.strip():
            pairs.append((turn.id, rewrite.rewrite, reference))
            scores["rouge_l"][turn.id] = rouge_l(rewrite.rewrite, reference)
    if pairs:
        vectors = encoder.encode([p[1] for p in pairs] + [p[2] for p in pairs])
        cosines = np.einsum("ij,ij->i", vectors[: len(pairs)], vectors[len(pairs) :])
        for (question_id, _, _), cosine in zip(pairs, cosines, strict=True):
            scores["cosine"][question_id] = float(cosine)
    return scores
