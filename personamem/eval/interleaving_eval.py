"""Does interleaving reach the decision the held-out data reaches? Simulated trials on real benchmarks.

Per benchmark, a store of all its users (the shipped models' split, so none saw the held-out users)
ranks the held-out users' questions with each method (top 10, through the real store). For each
pair of methods, the **offline decision** is the paired t-test over every held-out question's
nDCG@10 (p < 0.05: the better mean wins; else neither). A **trial** is what a deployment would see
with the pair on trial: calls drawn from the held-out questions one at a time (with replacement,
``calls`` at most), each served as the team-draft interleaving of the two rankings, its user
reporting the gold records served (``gold``) or only the benchmark's reference answer, attributed to
the served records it drew on (``answers``); the trial stops at the first clear sign test
(:class:`~personamem.interleaving.Verdict`, as the store decides) or when the calls run out
(undecided). Agreement is the share of trials on pairs the offline test decides whose interleaving
decision is the same winner; trials on pairs it does not decide report how often interleaving
decided anyway.
"""

from __future__ import annotations

import math
import random
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.attribution import Attribution
from personamem.datasets import Benchmark, UserSplit
from personamem.datasets.benchmark import Question
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.eval.metrics import ranx_scores
from personamem.eval.profile_eval import TEST_SHARE, VALIDATION_SHARE
from personamem.interleaving import Verdict, credit, team_draft
from personamem.memory import PersonaMem
from personamem.pipeline.config import PipelineConfig
from personamem.records import Record

__all__ = ["METHODS", "PairResult", "interleaving_trials", "simulated_trial", "summarize_pairs"]

SERVED_K = 10
METHODS: dict[str, PipelineConfig | str] = {
    "dense": "dense",
    "bm25": "bm25",
    "hybrid": "hybrid",
    "default": "default",
    "default-unranked": PipelineConfig(ranker="none"),
}
"""The rankings paired: the plain methods, the package default and the default without its trees."""


@dataclass
class PairResult:
    """One pair of methods on one benchmark: the offline decision and each trial's."""

    benchmark: str
    live: str
    candidate: str
    feedback: str
    difference: float  # candidate's mean nDCG@10 minus live's, over every held-out question
    p: float
    offline: str | None  # "candidate", "live" or None (not significant)
    decisions: list[str | None]  # per trial
    calls: list[int]  # calls each trial took


def _offline(live: dict[str, float], candidate: dict[str, float]) -> tuple[float, float, str | None]:
    from scipy.stats import ttest_rel

    ids = sorted(live)
    ours, theirs = np.array([candidate[q] for q in ids]), np.array([live[q] for q in ids])
    difference = float((ours - theirs).mean())
    if np.allclose(ours, theirs):
        return difference, math.nan, None
    p = float(ttest_rel(ours, theirs).pvalue)
    return difference, p, (("candidate" if difference > 0 else "live") if p < 0.05 else None)


def _rankings(
    mem: PersonaMem, held: Sequence[Question], progress: Progress | None
) -> dict[str, dict[str, list[str]]]:
    """Every method's top 10 for every held-out question, through the real store (nothing logged)."""
    rankings: dict[str, dict[str, list[str]]] = {}
    for name, method in METHODS.items():
        config = mem.pipeline(method).config.model_copy(update={"log_interactions": False})
        pipeline = mem.pipeline(config)
        task = progress.add_task(f"held-out: {name}", total=len(held)) if progress else None
        rankings[name] = {}
        for question in held:
            hits = pipeline.search(question.user_id, question.text, SERVED_K)
            rankings[name][question.id] = [h.record.id for h in hits]
            if progress is not None and task is not None:
                progress.advance(task)
    return rankings


class _Used:
    """What a simulated user reports as used among the records a call served."""

    def __init__(self, mem: PersonaMem, feedback: str) -> None:
        self.mem, self.feedback = mem, feedback
        self._attribution = Attribution.load() if feedback == "answers" else None
        self._records: dict[str, dict[str, Record]] = {}
        self._reported: dict[tuple[str, tuple[str, ...]], list[str]] = {}

    def __call__(self, question: Question, served: list[str]) -> list[str]:
        if self._attribution is None:
            return [r for r in served if question.relevant.get(r, 0) > 0]
        key = (question.id, tuple(served))  # a question drawn again is often served the same records
        if key not in self._reported:
            self._reported[key] = self._attributed(question, served)
        return self._reported[key]

    def _attributed(self, question: Question, served: list[str]) -> list[str]:
        assert self._attribution is not None
        if not question.answer or not question.answer.strip():
            return []
        user = question.user_id
        if user not in self._records:
            self._records[user] = {r.id: r for r in self.mem.records(user)}
        held = self._records[user]
        return self._attribution.used_of(self.mem.store, user, question.text, question.answer, served, held)


def simulated_trial(
    held: Sequence[Question],
    rankings: tuple[dict[str, list[str]], dict[str, list[str]]],
    used: Callable[[Question, list[str]], list[str]],
    calls: int,
    rng: random.Random,
) -> tuple[str | None, int]:
    """One simulated trial of the candidate (second ranking) against the live one: its decision and calls."""
    outcomes: list[str] = []
    for call in range(1, calls + 1):
        question = rng.choice(held)
        drafted = team_draft(rankings[0][question.id], rankings[1][question.id], SERVED_K, rng)
        outcome = credit(dict(drafted), used(question, [r for r, _ in drafted]))
        if outcome is not None:
            outcomes.append(outcome)
            decision = Verdict.of(outcomes).decision
            if decision is not None:
                return decision, call
    return None, calls


def interleaving_trials(
    loaded: Benchmark,
    *,
    name: str,
    feedback: str,
    trials: int,
    calls: int,
    encoder: Encoder,
    split_seed: int = 0,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[PairResult]:
    """Rank the held-out questions, then run ``trials`` simulated trials per pair of :data:`METHODS`."""
    split = UserSplit.by_share(
        loaded.users(), test_share=TEST_SHARE, validation_share=VALIDATION_SHARE, seed=split_seed
    )
    test = set(split.test)
    held = [q for q in loaded.questions if q.user_id in test and any(g > 0 for g in q.relevant.values())]
    results = []
    with tempfile.TemporaryDirectory(prefix="personamem-interleaving-eval-") as tmp:
        build_store(loaded, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress).close()
        with PersonaMem.open(Path(tmp) / "store", encoder=encoder) as mem:
            rankings = _rankings(mem, held, progress)
            ndcg = {m: ranx_scores(held, r, ["ndcg@10"])["ndcg@10"] for m, r in rankings.items()}
            used = _Used(mem, feedback)
            pairs = list(combinations(METHODS, 2))
            task = progress.add_task(f"{name}: trials", total=len(pairs) * trials) if progress else None
            for live, candidate in pairs:
                difference, p, offline = _offline(ndcg[live], ndcg[candidate])
                decisions, taken = [], []
                for seed in range(trials):
                    rng = random.Random(f"{name}-{live}-{candidate}-{seed}")
                    two = rankings[live], rankings[candidate]
                    decision, spent = simulated_trial(held, two, used, calls, rng)
                    decisions.append(decision)
                    taken.append(spent)
                    if progress is not None and task is not None:
                        progress.advance(task)
                results.append(
                    PairResult(name, live, candidate, feedback, difference, p, offline, decisions, taken)
                )
    return results


def summarize_pairs(results: Sequence[PairResult]) -> dict[str, Any]:
    """Agreement over the trials of decided pairs, and how often undecided pairs were decided anyway."""
    decided = [(r, d) for r in results if r.offline is not None for d in r.decisions]
    undecided = [d for r in results if r.offline is None for d in r.decisions]
    leaning = [  # on a pair the t-test leaves open, does a decision follow the better mean?
        d == ("candidate" if r.difference > 0 else "live")
        for r in results
        if r.offline is None
        for d in r.decisions
        if d is not None
    ]
    agree = sum(d == r.offline for r, d in decided)
    wrong = sum(d is not None and d != r.offline for r, d in decided)
    return {
        "trials_on_decided_pairs": len(decided),
        "agreement": agree / len(decided) if decided else math.nan,
        "opposite": wrong / len(decided) if decided else math.nan,
        "undecided": sum(d is None for _, d in decided) / len(decided) if decided else math.nan,
        "trials_on_undecided_pairs": len(undecided),
        "decided_anyway": sum(d is not None for d in undecided) / len(undecided) if undecided else math.nan,
        "decided_anyway_with_the_mean": sum(leaning) / len(leaning) if leaning else math.nan,
        "median_calls": float(np.median([c for r in results for c in r.calls])) if results else math.nan,
    }
