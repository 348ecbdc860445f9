"""Aggregate per-question scores the way the PersonalizedCIR reproduction asks: seeds, then tests.

A seed's score is the mean over questions; a method's score is the mean ± sample standard deviation
of its seed scores. Comparisons are paired t-tests over questions (each question's score averaged over
seeds first), because both methods answer the same questions and per-question variance dwarfs the
difference between methods.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from personamem.eval.runner import MethodRun

__all__ = ["Comparison", "Summary", "compare", "compare_reports", "summarize"]


@dataclass(frozen=True)
class Summary:
    """A metric's mean and standard deviation over seeds, and how many questions and seeds it covers."""

    mean: float
    std: float
    questions: int
    seeds: int


@dataclass(frozen=True)
class Comparison:
    """A paired t-test of ``method`` against ``baseline`` on one metric.

    ``p`` is NaN when the two methods score every question identically (the test is undefined).
    """

    method: str
    baseline: str
    metric: str
    difference: float
    t: float
    p: float
    questions: int


def summarize(run: MethodRun, metric: str, question_ids: Iterable[str] | None = None) -> Summary:
    """Mean ± std over seeds of the mean over questions (all of the metric's, or only ``question_ids``).

    NaN for a metric the run has not scored (an answer baseline ranks nothing).
    """
    per_question = run.scores.get(metric, {})
    ids = [qid for qid in (question_ids if question_ids is not None else per_question) if qid in per_question]
    if not ids:
        return Summary(math.nan, math.nan, 0, len(run.seeds))
    matrix = np.array([per_question[qid] for qid in ids])  # questions x seeds
    seed_means = matrix.mean(axis=0)
    std = float(seed_means.std(ddof=1)) if len(seed_means) > 1 else 0.0
    return Summary(float(seed_means.mean()), std, len(ids), len(run.seeds))


def compare(run: MethodRun, baseline: MethodRun, metric: str) -> Comparison:
    """Paired t-test (scipy ``ttest_rel``) over the questions both runs scored."""
    from scipy.stats import ttest_rel

    ids = [qid for qid in run.scores[metric] if qid in baseline.scores[metric]]
    ours = np.array([np.mean(run.scores[metric][qid]) for qid in ids])
    theirs = np.array([np.mean(baseline.scores[metric][qid]) for qid in ids])
    difference = float((ours - theirs).mean()) if ids else math.nan
    # the t statistic is undefined when every question differs by the same amount (zero variance)
    if len(ids) < 2 or np.allclose(ours - theirs, (ours - theirs)[0]):
        return Comparison(run.method, baseline.method, metric, difference, math.nan, math.nan, len(ids))
    result = ttest_rel(ours, theirs)
    return Comparison(
        run.method,
        baseline.method,
        metric,
        difference,
        float(result.statistic),
        float(result.pvalue),
        len(ids),
    )


def compare_reports(
    ours: Mapping[str, Any],
    theirs: Mapping[str, Any],
    method: str,
    metric: str,
    *,
    baseline: str | None = None,
) -> Comparison:
    """Paired t-test between two written reports (``report.json``), e.g. two renderings of one corpus.

    Question ids must match between the runs (same benchmark, different data options); only questions
    both scored are compared. ``baseline`` names the method in ``theirs`` (default: ``method``).

    Raises:
        KeyError: naming the method or metric a report lacks.
    """
    return compare(_as_run(ours, method, metric), _as_run(theirs, baseline or method, metric), metric)


def _as_run(report: Mapping[str, Any], method: str, metric: str) -> MethodRun:
    """A method's per-question scores from a report (already averaged over seeds) as a one-seed run."""
    methods = report["methods"]
    if method not in methods:
        raise KeyError(f"method {method!r} not in report (has {sorted(methods)})")
    scores = methods[method]["per_question"]
    if metric not in scores:
        raise KeyError(f"metric {metric!r} not in report (has {sorted(scores)})")
    per_question = {qid: [value] for qid, value in scores[metric].items() if value is not None}
    return MethodRun(method, [0], False, scores={metric: per_question})
