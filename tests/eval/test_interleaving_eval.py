"""``personamem analyze interleaving``: simulated trials decide as the held-out comparison does."""

from __future__ import annotations

import random

from personamem.datasets.benchmark import Question
from personamem.eval.interleaving_eval import PairResult, simulated_trial, summarize_pairs


def _gold(question: Question, served: list[str]) -> list[str]:
    return [r for r in served if question.relevant.get(r, 0) > 0]


def _questions(n: int) -> list[Question]:
    return [
        Question(id=f"q{i}", user_id="u", text=f"question {i}", relevant={f"gold{i}": 1}) for i in range(n)
    ]


def test_a_trial_finds_the_ranking_that_serves_the_gold_higher() -> None:
    held = _questions(50)
    fillers = [f"other{j}" for j in range(20)]
    # the better ranking puts the gold first; the worse one puts it ninth, behind eight fillers
    better = {q.id: [f"gold{i}", *fillers[:9]] for i, q in enumerate(held)}
    worse = {q.id: [*fillers[:8], f"gold{i}", fillers[9]] for i, q in enumerate(held)}
    for seed in range(10):
        decision, calls = simulated_trial(held, (worse, better), _gold, 500, random.Random(seed))
        assert decision == "candidate" and 10 <= calls < 500  # the sign test stops it early
        decision, _ = simulated_trial(held, (better, worse), _gold, 500, random.Random(seed))
        assert decision == "live"
    same = {q.id: [f"gold{i}", *fillers[:9]] for i, q in enumerate(held)}
    decision, calls = simulated_trial(held, (same, dict(same)), _gold, 200, random.Random(0))
    assert decision is None and calls == 200  # identical rankings: ties only, never decided


def test_the_summary_counts_agreement_only_where_the_offline_test_decided() -> None:
    results = [
        PairResult(
            "b",
            "dense",
            "bm25",
            "gold",
            0.1,
            0.001,
            "candidate",
            ["candidate", "candidate", None, "live"],
            [20] * 4,
        ),
        PairResult("b", "dense", "hybrid", "gold", 0.0, 0.6, None, [None, "live"], [100, 30]),
    ]
    summary = summarize_pairs(results)
    assert summary["trials_on_decided_pairs"] == 4 and summary["agreement"] == 0.5
    assert summary["opposite"] == 0.25 and summary["undecided"] == 0.25
    assert summary["trials_on_undecided_pairs"] == 2 and summary["decided_anyway"] == 0.5
