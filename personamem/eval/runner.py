"""Run methods over a benchmark: load the corpus into a store once, rank every question, score.

The corpus goes into a real :class:`~personamem.store.Store` (SQLite + Chroma in a work folder), so a
method is measured on the same read path users run. Vectors come from the corpus cache
(:func:`~personamem.datasets.vectors.build_store`), and one store serves every method and seed of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.progress import Progress

from personamem.datasets.benchmark import Benchmark, Question
from personamem.datasets.vectors import build_store
from personamem.eval.answer_judge import AnswerJudge
from personamem.eval.answering import answer_steps, history_rankings, score_answers
from personamem.eval.metrics import personabench_scores, ranx_scores
from personamem.llm import FrozenLLM
from personamem.llm.parsing import tally_outputs
from personamem.methods import Method
from personamem.retrieval import Preparable
from personamem.store import Store

__all__ = [
    "ANSWER_BASELINES",
    "DEFAULT_METRICS",
    "MethodRun",
    "build_store",
    "evaluate_answer_baseline",
    "evaluate_method",
    "warm_up_metrics",
]

DEFAULT_METRICS = (
    "recall@1",
    "recall@3",
    "recall@5",
    "recall@10",
    "ndcg@1",
    "ndcg@3",
    "ndcg@5",
    "ndcg@10",
    "mrr",
    "map",
    "recall@100",
)
"""Early precision and deep recall side by side, as the PersonalizedCIR reproduction asks."""

ANSWER_BASELINES = ("no-memory", "full-history")
"""What the reader answers from when no method chose: nothing, or the user's latest records that fit."""
PERSONABENCH_CUTOFFS = (1, 3, 5)
_PREPARE_CHUNK = 16  # questions per prepare call: a batch for the LLM, a step for the progress bar


@dataclass
class MethodRun:
    """One method's results: per metric, per question, one score per seed; and per-query latency.

    Attributes:
        method: the method's name.
        seeds: the seeds run (one for a deterministic method).
        stochastic: whether the method depends on the seed.
        scores: metric -> question id -> score per seed (aligned with ``seeds``).
        rankings: seed -> question id -> ranked record ids, kept for later analysis.
        latency_s: seconds per question, over all seeds.
        prepare_s: seconds per seed of batched work done before ranking (the LLM calls of
            :class:`~personamem.retrieval.Preparable` methods), not included in ``latency_s``.
        outputs: LLM answers parsed in this run, ``"<stage> <clean|repaired|failed>"`` -> count
            (:func:`~personamem.llm.parsing.tally_outputs`; cached answers are not parsed again).
    """

    method: str
    seeds: list[int]
    stochastic: bool
    scores: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    rankings: dict[int, dict[str, list[str]]] = field(default_factory=dict)
    latency_s: list[float] = field(default_factory=list)
    prepare_s: list[float] = field(default_factory=list)
    outputs: dict[str, int] = field(default_factory=dict)


def evaluate_method(
    method: Method,
    benchmark: Benchmark,
    store: Store,
    *,
    seeds: Sequence[int] = (0,),
    depth: int = 100,
    metrics: Sequence[str] = DEFAULT_METRICS,
    llm: FrozenLLM | None = None,
    generate: bool = True,
    judge: AnswerJudge | None = None,
    profile_k: int = 5,
    progress: Progress | None = None,
) -> MethodRun:
    """Rank every question of ``benchmark`` with ``method`` to ``depth`` and score each ranking.

    A deterministic method runs with the first seed only. PersonaBench's protocol metrics are added
    for benchmarks whose questions carry ``gold_groups``. With ``llm``, answer metrics of the top
    ``profile_k`` records are added (:func:`~personamem.eval.answering.score_answers`; ``generate``
    adds generated-answer overlap, ``judge`` the judged accuracy); answers and verdicts are kept in
    ``store``, so a rerun resumes.
    """
    if not seeds:
        raise ValueError("need at least one seed")
    run = MethodRun(method.name, list(seeds) if method.stochastic else [seeds[0]], method.stochastic)
    questions = benchmark.questions
    with tally_outputs() as outputs:
        for seed in run.seeds:
            retriever = method.build(store, seed)
            if isinstance(retriever, Preparable):
                run.prepare_s.append(
                    _prepare(retriever, questions, f"{method.name} LLM calls (seed {seed})", progress)
                )
            task = (
                progress.add_task(f"{method.name} (seed {seed})", total=len(questions)) if progress else None
            )
            rankings: dict[str, list[str]] = {}
            for question in questions:
                start = time.perf_counter()
                hits = retriever.search(question.user_id, question.text, depth)
                run.latency_s.append(time.perf_counter() - start)
                rankings[question.id] = [hit.record.id for hit in hits]
                if progress is not None and task is not None:
                    progress.advance(task)
            run.rankings[seed] = rankings
            scores = _score(questions, rankings, metrics)
            if llm is not None:
                records = {(r.user_id, r.id): r for r in benchmark.records}
                advance = _bar(progress, f"{method.name} answers (seed {seed})", questions, generate, judge)
                scores.update(
                    score_answers(
                        llm, questions, rankings, records, k=profile_k, generate=generate, judge=judge,
                        cache=store, advance=advance,
                    )
                )  # fmt: skip
            for metric, per_question in scores.items():
                for qid, value in per_question.items():
                    run.scores.setdefault(metric, {}).setdefault(qid, []).append(value)
    run.outputs = dict(sorted(outputs.items()))
    return run


def evaluate_answer_baseline(
    name: str,
    benchmark: Benchmark,
    store: Store,
    llm: FrozenLLM,
    *,
    judge: AnswerJudge | None = None,
    history_tokens: int = 4096,
    progress: Progress | None = None,
) -> MethodRun:
    """The reader's answers without a method: from no memory, or from the full history that fits.

    ``name`` is one of :data:`ANSWER_BASELINES`; ``history_tokens`` caps the full history (the reader's
    window caps it too). Only answer metrics are scored: a baseline ranks nothing.
    """
    questions = benchmark.questions
    if name == "no-memory":
        rankings: dict[str, list[str]] = {q.id: [] for q in questions}
    elif name == "full-history":
        rankings = history_rankings(llm, questions, benchmark.records, history_tokens)
    else:
        raise ValueError(f"unknown answer baseline {name!r}; choose from {', '.join(ANSWER_BASELINES)}")
    records = {(r.user_id, r.id): r for r in benchmark.records}
    deepest = max(map(len, rankings.values()), default=0)
    run = MethodRun(name, [0], stochastic=False)
    advance = _bar(progress, f"{name} answers", questions, True, judge)
    with tally_outputs() as outputs:
        scores = score_answers(
            llm, questions, rankings, records, k=deepest, judge=judge, cache=store, advance=advance
        )
    for metric, per_question in scores.items():
        run.scores[metric] = {qid: [value] for qid, value in per_question.items()}
    run.outputs = dict(sorted(outputs.items()))
    return run


def _bar(
    progress: Progress | None,
    label: str,
    questions: Sequence[Question],
    generate: bool,
    judge: AnswerJudge | None,
) -> Callable[[int], None] | None:
    """A progress bar over the answer steps of ``questions``; its ``advance``, or None without progress."""
    if progress is None:
        return None
    task = progress.add_task(
        label, total=answer_steps(questions, generate=generate, judged=judge is not None)
    )
    return lambda done: progress.advance(task, done)


def _prepare(
    retriever: Preparable, questions: Sequence[Question], label: str, progress: Progress | None
) -> float:
    """Seconds spent letting ``retriever`` do its per-query LLM work in batches, with a progress bar."""
    requests = [(q.user_id, q.text) for q in questions]
    task = progress.add_task(label, total=len(requests)) if progress else None
    start = time.perf_counter()
    for at in range(0, len(requests), _PREPARE_CHUNK):
        retriever.prepare(requests[at : at + _PREPARE_CHUNK])
        if progress is not None and task is not None:
            progress.advance(task, len(requests[at : at + _PREPARE_CHUNK]))
    return time.perf_counter() - start


def _score(
    questions: Sequence[Question], rankings: dict[str, list[str]], metrics: Sequence[str]
) -> dict[str, dict[str, float]]:
    scores = ranx_scores(questions, rankings, metrics)
    if any(q.gold_groups for q in questions):
        for k in PERSONABENCH_CUTOFFS:
            scores.update(personabench_scores(questions, rankings, k))
    return scores


def warm_up_metrics() -> float:
    """Compile ranx's numba kernels on a toy run; returns the seconds it took.

    The first ranx evaluation in a process compiles (about 12 s cold, 2 s with numba's cache warm);
    paying it here keeps it out of every method's measured cost.
    """
    start = time.perf_counter()
    toy = Question(id="q", user_id="u", text="q", relevant={"a": 1})
    ranx_scores([toy], {"q": ["b", "a"]}, DEFAULT_METRICS)
    return time.perf_counter() - start
