"""Relevance versus utility of a user's records: PURPLE's motivation study, on the user's own data.

For each candidate record of a question, relevance is the encoder's cosine between question and
record, and utility is how much the record alone raises the frozen LLM's log-likelihood of the true
answer: log p(y | {record}, x) − log p(y | {}, x). If the two were the same thing, ranking by
similarity would already give the best profile; a weak correlation is the case for learning it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from personamem.encoder import Encoder
from personamem.eval.answers import answer_loglikelihood
from personamem.llm.base import FrozenLLM
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record
from personamem.trainers.purple.data import ProfileExample

__all__ = ["UtilityPoint", "gold_auc", "gold_auc_gap", "pearson", "plot_utility", "record_utility"]


@dataclass(frozen=True)
class UtilityPoint:
    """One (question, candidate record): its cosine to the question and its Δ log-likelihood in nats."""

    question_id: str
    record_id: str
    relevance: float
    utility: float


def record_utility(
    llm: FrozenLLM, encoder: Encoder, examples: Sequence[ProfileExample]
) -> list[UtilityPoint]:
    """Relevance and utility of every candidate of every example (one batched LLM call per example)."""
    points = []
    for example in examples:
        vectors = encoder.encode([example.query, *(r.text for r in example.candidates)])
        relevance = vectors[1:] @ vectors[0]
        profiles: list[list[Record]] = [[], *([record] for record in example.candidates)]
        scores = answer_loglikelihood(
            llm, [profile_prompt(llm, p, example.query) for p in profiles], [example.answer] * len(profiles)
        )
        base = scores[0]
        points += [
            UtilityPoint(example.id, record.id, float(rel), float(score - base))
            for record, rel, score in zip(example.candidates, relevance, scores[1:], strict=True)
        ]
    return points


def pearson(points: Sequence[UtilityPoint]) -> tuple[float, float]:
    """Pearson r between relevance and utility, and its two-sided p-value (scipy)."""
    from scipy.stats import pearsonr

    if len(points) < 3:
        raise ValueError(f"need at least 3 points for a correlation, got {len(points)}")
    result = pearsonr([p.relevance for p in points], [p.utility for p in points])
    return float(result.statistic), float(result.pvalue)


def gold_auc(points: Sequence[UtilityPoint], gold: Collection[tuple[str, str]]) -> tuple[float, float] | None:
    """How well utility and relevance each rank the gold records of a question above the others.

    The ROC AUC over (question id, record id) pairs: the chance that a gold candidate scores above a
    non-gold one (Mann–Whitney U / (n_gold · n_other)), for utility then relevance. It says whether
    the LLM's log-likelihood — PURPLE's reward — can tell the records that hold the answer; None when
    the candidates hold no gold record or only gold ones.
    """
    from scipy.stats import mannwhitneyu

    is_gold = [(p.question_id, p.record_id) in gold for p in points]
    n_gold = sum(is_gold)
    if n_gold in (0, len(points)):
        return None
    aucs = []
    for value in (lambda p: p.utility, lambda p: p.relevance):
        hits = [value(p) for p, g in zip(points, is_gold, strict=True) if g]
        others = [value(p) for p, g in zip(points, is_gold, strict=True) if not g]
        aucs.append(float(mannwhitneyu(hits, others).statistic) / (len(hits) * len(others)))
    return aucs[0], aucs[1]


def gold_auc_gap(
    points: Sequence[UtilityPoint],
    gold: Collection[tuple[str, str]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float] | None:
    """Utility's gold AUC minus relevance's, with a 95% bootstrap interval over questions.

    Questions, not pairs, are resampled (with all their candidates), because a question's candidates
    share its answer and are not independent. An interval above zero says the LLM's reward tells
    gold records apart better than the encoder's cosine on these questions. None when
    :func:`gold_auc` is undefined.
    """
    observed = gold_auc(points, gold)
    if observed is None:
        return None
    by_question: dict[str, list[UtilityPoint]] = {}
    for point in points:
        by_question.setdefault(point.question_id, []).append(point)
    groups = list(by_question.values())
    rng = np.random.default_rng(seed)
    gaps = []
    for _ in range(resamples):
        drawn = [p for i in rng.integers(len(groups), size=len(groups)) for p in groups[i]]
        aucs = gold_auc(drawn, gold)
        if aucs is not None:  # a draw of questions without any gold record has no AUC
            gaps.append(aucs[0] - aucs[1])
    low, high = np.percentile(gaps, [2.5, 97.5])
    return observed[0] - observed[1], float(low), float(high)


def plot_utility(points: Sequence[UtilityPoint], path: Path, title: str) -> Path:
    """A scatter plot of utility against relevance, saved as PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

    figure = Figure(figsize=(6, 4.5))
    ax = figure.subplots()
    ax.scatter([p.relevance for p in points], [p.utility for p in points], s=10, alpha=0.5)
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ax.set_xlabel("relevance: cosine(question, record)")
    ax.set_ylabel("utility: Δ log p(answer) with the record alone (nats)")
    ax.set_title(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120, bbox_inches="tight")
    return path
