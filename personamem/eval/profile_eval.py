"""What ``context()``'s profile knobs do on held-out users: recall of gold records, and the answer.

``context()`` without a selector shows the first stage's top ``profile_k`` with near-duplicates
skipped (``duplicate_cosine``) and, at a ``diversity`` above 0, picked by MMR
(``personamem/pipeline/diversity.py``). Each setting's profile is compared, question by question, with
the profile before those knobs: the first stage's top ``profile_k``, which :meth:`Pipeline.search`
still returns. Per setting: the profile's recall of the question's gold records (the share of its
distinct gold records in the profile), how many profiles differ from that baseline, a paired t-test,
and milliseconds per ``context()`` call.

With an LLM, the frozen LLM's log-likelihood of the gold answer given the profile and question, in the
prompt ``eval --answers`` and PURPLE's reward use (:func:`~personamem.pipeline.prompt.profile_prompt`,
:func:`~personamem.eval.answers.answer_loglikelihood`). Only a changed profile can change it, so only
changed questions are scored (the baseline's profile and the setting's); an unchanged question
differs by exactly 0, and the mean difference and its paired test run over every answered question.
Scores are cached by (benchmark, question, profile ids) in a JSON-lines file, so a rerun or a larger
sweep scores only profiles not seen before.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress

from personamem.datasets import Benchmark, BenchmarkName, DataSource, Question, UserSplit, dataset
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.eval.answers import answer_loglikelihood
from personamem.eval.runner import MethodRun
from personamem.eval.stats import compare
from personamem.llm import FrozenLLM
from personamem.pipeline import Pipeline, PipelineConfig
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record
from personamem.retrieval import BM25Retriever
from personamem.store import Store

__all__ = [
    "BASELINE",
    "BenchmarkProfiles",
    "LoglikCache",
    "ProfileReport",
    "ProfileRow",
    "ProfileSetting",
    "evaluate_profiles",
    "measure_profiles",
    "profile_settings",
]

TEST_SHARE, VALIDATION_SHARE = 0.4, 0.15  # the adapter's split, so these are the users it never saw
BASELINE = "first stage top k"
"""The row every setting is compared with: the profile before the knobs (``search``'s top ``profile_k``)."""
_BUDGET = 10**6  # every profile record shown: the knobs choose records, the budget is another question
_LL_BATCH = 8  # (prompt, answer) pairs per LLM call: a step of the progress bar and of the cache


@dataclass(frozen=True)
class ProfileSetting:
    """One point of the sweep: ``PipelineConfig.duplicate_cosine`` and ``PipelineConfig.diversity``."""

    duplicate_cosine: float
    diversity: float

    @property
    def label(self) -> str:
        """How rows name it: ``duplicate_cosine 0.9, diversity 0``."""
        return f"duplicate_cosine {self.duplicate_cosine:g}, diversity {self.diversity:g}"


def profile_settings(
    duplicate_cosines: Iterable[float], diversities: Iterable[float]
) -> list[ProfileSetting]:
    """Every pair of the two lists, in the order given (duplicates dropped)."""
    pairs = [ProfileSetting(c, d) for c in duplicate_cosines for d in diversities]
    return list(dict.fromkeys(pairs))


@dataclass
class ProfileRow:
    """One setting (or the baseline) on one benchmark.

    Attributes:
        setting: its label (:data:`BASELINE` for the baseline).
        duplicate_cosine, diversity: the knobs (None on the baseline row).
        recall: mean over questions of the share of the question's gold records in the profile.
        changed: questions whose profile (ids in order) differs from the baseline's.
        ms: milliseconds per call: ``context()``, or ``search()`` on the baseline row.
        recall_difference, recall_p: against the baseline, paired t-test over questions (p NaN when
            no profile changed).
        loglik_difference, loglik_p: mean over answered questions of the gold answer's log-likelihood
            (nats) minus the baseline's, 0 where the profile is unchanged; paired t-test. None
            without an LLM.
        loglik_changed: the mean of that difference over the changed answered questions only.
        scored: answered questions whose profile changed (each scored under both profiles).
    """

    setting: str
    duplicate_cosine: float | None
    diversity: float | None
    recall: float
    changed: int
    ms: float
    recall_difference: float | None = None
    recall_p: float | None = None
    loglik_difference: float | None = None
    loglik_p: float | None = None
    loglik_changed: float | None = None
    scored: int | None = None


@dataclass
class BenchmarkProfiles:
    """Every setting's rows and profiles on one benchmark's held-out questions."""

    name: str
    questions: int
    answered: int
    rows: list[ProfileRow]
    profiles: dict[str, dict[str, list[str]]]
    """Setting label -> question id -> the profile's record ids, in order."""


@dataclass
class ProfileReport:
    """The sweep over benchmarks, how it was run, and a note on what the log-likelihood covers."""

    benchmarks: list[BenchmarkProfiles] = field(default_factory=list)
    llm: str | None = None
    command: str = ""
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        """One table per benchmark, in the layout docs/RESULTS.md keeps."""
        with_ll = self.llm is not None
        head = ["setting", "recall", "Δ recall (p)", "changed", "ms / call"]
        head += ["Δ answer LL, nats (p)", "Δ LL on changed"] if with_ll else []
        lines: list[str] = []
        for bench in self.benchmarks:
            lines += [
                f"**{bench.name}**: {bench.questions} held-out questions with gold records"
                + (f", {bench.answered} with a gold answer" if with_ll else ""),
                "",
                "| " + " | ".join(head) + " |",
                "|---" * len(head) + "|",
            ]
            for row in bench.rows:
                cells = [row.setting, f"{row.recall:.4f}", _versus(row.recall_difference, row.recall_p, 4)]
                cells += [f"{row.changed}/{bench.questions}", f"{row.ms:.1f}"]
                if with_ll:
                    cells.append(_versus(row.loglik_difference, row.loglik_p, 3))
                    cells.append(
                        "" if row.loglik_changed is None else f"{row.loglik_changed:+.3f} ({row.scored})"
                    )
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        return "\n".join([*lines, *self.notes]).rstrip() + "\n"

    def to_json(self) -> dict[str, Any]:
        """Everything, JSON-ready (NaN p values as null)."""
        return _finite(
            {
                "command": self.command,
                "llm": self.llm,
                "notes": self.notes,
                "benchmarks": {b.name: asdict(b) for b in self.benchmarks},
            }
        )


class LoglikCache:
    """Gold-answer log-likelihoods by (benchmark, question, profile ids), kept in a JSON-lines file.

    Each line is one score, appended as it is computed, so an interrupted run loses at most a batch.
    Lines of another LLM are ignored (the file names the LLM in every line).
    """

    def __init__(self, path: Path | None, llm: str) -> None:
        self.path, self.llm = path, llm
        self._scores: dict[tuple[str, str, tuple[str, ...]], float] = {}
        if path is not None and path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    item = json.loads(line)
                    if item["llm"] == llm:
                        key = (item["benchmark"], item["question"], tuple(item["profile"]))
                        self._scores[key] = float(item["loglik"])
                except (ValueError, KeyError, TypeError):
                    continue  # a line cut short by an interrupted run: scored again

    def get(self, benchmark: str, question: str, profile: Sequence[str]) -> float | None:
        """The cached score, or None."""
        return self._scores.get((benchmark, question, tuple(profile)))

    def put(self, benchmark: str, question: str, profile: Sequence[str], loglik: float) -> None:
        """Keep a score (and append it to the file)."""
        self._scores[(benchmark, question, tuple(profile))] = loglik
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            item = {"llm": self.llm, "benchmark": benchmark, "question": question}
            with self.path.open("a", encoding="utf-8") as file:
                file.write(json.dumps({**item, "profile": list(profile), "loglik": loglik}) + "\n")


def measure_profiles(
    benchmark: Benchmark,
    store: Store,
    settings: Sequence[ProfileSetting],
    *,
    config: PipelineConfig | None = None,
    llm: FrozenLLM | None = None,
    cache: LoglikCache | None = None,
    progress: Progress | None = None,
) -> BenchmarkProfiles:
    """Each setting's profile for every question with gold records, against the first stage's top k.

    Args:
        benchmark: the questions (those without gold records are left out) and their records, which
            ``store`` holds.
        store: the benchmark's records.
        settings: the knobs to measure; every other field comes from ``config``.
        config: the pipeline (default: the package default).
        llm: scores the gold answer's log-likelihood on changed profiles; None: recall only.
        cache: where scores are looked up and kept (default: in memory only).
        progress: advanced per question and per scored batch.
    """
    base_config = config or PipelineConfig()
    k = base_config.profile_k
    questions = [q for q in benchmark.questions if q.relevant]
    bm25 = BM25Retriever(store)  # one per-user index cache for every setting: timings compare calls
    baseline_pipeline = Pipeline(store, base_config, bm25=bm25)
    total = len(questions) * (len(settings) + 2)
    task = progress.add_task(f"{benchmark.name}: profiles", total=total) if progress else None
    for q in questions:  # builds the BM25 indexes and warms the encoder: not in any row's time
        baseline_pipeline.search(q.user_id, q.text, k)
        _advance(progress, task)
    records: dict[tuple[str, str], Record] = {}
    profiles: dict[str, dict[str, list[str]]] = {}
    times: dict[str, float] = {}

    def run(label: str, call: Any) -> None:
        start = time.perf_counter()
        for q in questions:
            hits = call(q)
            records.update({(q.user_id, h.record.id): h.record for h in hits})
            profiles.setdefault(label, {})[q.id] = [h.record.id for h in hits]
            _advance(progress, task)
        times[label] = (time.perf_counter() - start) * 1000 / max(1, len(questions))

    run(BASELINE, lambda q: baseline_pipeline.search(q.user_id, q.text, k))
    for setting in settings:
        knobs = {"duplicate_cosine": setting.duplicate_cosine, "diversity": setting.diversity}
        pipeline = Pipeline(store, base_config.model_copy(update=knobs), bm25=bm25)
        run(setting.label, lambda q, p=pipeline: p.context(q.user_id, q.text, budget_tokens=_BUDGET).hits)

    answered = [q for q in questions if q.answer and q.answer.strip()]
    loglik: dict[tuple[str, tuple[str, ...]], float] = {}
    if llm is not None:
        cache = cache or LoglikCache(None, llm.name)
        loglik = _score_changed(benchmark.name, answered, profiles, records, llm, cache, progress)
    rows = [_row(BASELINE, None, questions, answered, profiles, times, loglik, llm is not None)]
    rows += [
        _row(s.label, s, questions, answered, profiles, times, loglik, llm is not None) for s in settings
    ]
    return BenchmarkProfiles(benchmark.name, len(questions), len(answered), rows, profiles)


def _score_changed(
    name: str,
    answered: Sequence[Question],
    profiles: dict[str, dict[str, list[str]]],
    records: dict[tuple[str, str], Record],
    llm: FrozenLLM,
    cache: LoglikCache,
    progress: Progress | None,
) -> dict[tuple[str, tuple[str, ...]], float]:
    """(question id, profile ids) -> log p(gold answer | profile, question), for every changed profile."""
    base = profiles[BASELINE]
    wanted: dict[tuple[str, tuple[str, ...]], Question] = {}
    for label, by_question in profiles.items():
        for q in answered:
            if label != BASELINE and by_question[q.id] != base[q.id]:
                wanted[(q.id, tuple(base[q.id]))] = q
                wanted[(q.id, tuple(by_question[q.id]))] = q
    scores: dict[tuple[str, tuple[str, ...]], float] = {}
    todo = []
    for (qid, ids), q in wanted.items():
        cached = cache.get(name, qid, ids)
        if cached is None:
            todo.append((qid, ids, q))
        else:
            scores[(qid, ids)] = cached
    task = progress.add_task(f"{name}: answer log-likelihood", total=len(todo)) if progress else None
    for start in range(0, len(todo), _LL_BATCH):
        batch = todo[start : start + _LL_BATCH]
        prompts = [profile_prompt(llm, [records[(q.user_id, i)] for i in ids], q.text) for _, ids, q in batch]
        values = answer_loglikelihood(llm, prompts, [str(q.answer) for _, _, q in batch])
        for (qid, ids, _), value in zip(batch, values, strict=True):
            scores[(qid, ids)] = float(value)
            cache.put(name, qid, ids, float(value))
        if progress is not None and task is not None:
            progress.advance(task, len(batch))
    return scores


def _row(
    label: str,
    setting: ProfileSetting | None,
    questions: Sequence[Question],
    answered: Sequence[Question],
    profiles: dict[str, dict[str, list[str]]],
    times: dict[str, float],
    loglik: dict[tuple[str, tuple[str, ...]], float],
    with_ll: bool,
) -> ProfileRow:
    ours, base = profiles[label], profiles[BASELINE]
    run, baseline = MethodRun(label, [0], False), MethodRun(BASELINE, [0], False)
    for q in questions:
        gold = {rid for rid, grade in q.relevant.items() if grade > 0}
        run.scores.setdefault("recall", {})[q.id] = [_recall(gold, ours[q.id])]
        baseline.scores.setdefault("recall", {})[q.id] = [_recall(gold, base[q.id])]
    row = ProfileRow(
        label,
        None if setting is None else setting.duplicate_cosine,
        None if setting is None else setting.diversity,
        recall=sum(v[0] for v in run.scores["recall"].values()) / max(1, len(questions)),
        changed=sum(ours[q.id] != base[q.id] for q in questions),
        ms=times[label],
    )
    if setting is None:
        return row
    recall = compare(run, baseline, "recall")
    row.recall_difference, row.recall_p = recall.difference, recall.p
    if not with_ll:
        return row
    # an unchanged profile scores exactly the baseline's: both 0 here, so the test sees a 0 difference
    changed = [q for q in answered if ours[q.id] != base[q.id]]
    for q in answered:
        moved = ours[q.id] != base[q.id]
        run.scores.setdefault("loglik", {})[q.id] = [loglik[(q.id, tuple(ours[q.id]))] if moved else 0.0]
        baseline.scores.setdefault("loglik", {})[q.id] = [loglik[(q.id, tuple(base[q.id]))] if moved else 0.0]
    if answered:
        ll = compare(run, baseline, "loglik")
        row.loglik_difference, row.loglik_p = ll.difference, ll.p
    row.scored = len(changed)
    if changed:
        diffs = [run.scores["loglik"][q.id][0] - baseline.scores["loglik"][q.id][0] for q in changed]
        row.loglik_changed = sum(diffs) / len(diffs)
    return row


def _recall(gold: set[str], profile: Sequence[str]) -> float:
    return len(gold & set(profile)) / len(gold) if gold else 0.0


def evaluate_profiles(
    data_root: Path,
    benchmarks: Sequence[BenchmarkName],
    settings: Sequence[ProfileSetting],
    encoder: Encoder,
    *,
    llm: FrozenLLM | None = None,
    cache: LoglikCache | None = None,
    seed: int = 0,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> ProfileReport:
    """:func:`measure_profiles` on each benchmark's held-out users (the adapter's split by ``seed``).

    A benchmark's users are split as ``personamem train adapter`` splits them (40 % test, 15 %
    validation), so the numbers are on users no shipped adapter trained on. Benchmarks without a
    gold answer are measured without the log-likelihood, and the report's notes say so.
    """
    report = ProfileReport(llm=llm.name if llm is not None else None)
    for benchmark in benchmarks:
        folder = data_root / str(dataset(benchmark).folder)
        loaded = DataSource(benchmark=benchmark, data=folder).questions()
        split = UserSplit.by_share(
            loaded.users(), test_share=TEST_SHARE, validation_share=VALIDATION_SHARE, seed=seed
        )
        test = set(split.test)
        held = Benchmark(loaded.name, loaded.records, [q for q in loaded.questions if q.user_id in test])
        scorer = llm if any(q.answer for q in held.questions if q.relevant) else None
        if llm is not None and scorer is None:
            report.notes.append(f"{loaded.name} has no gold answers: no answer log-likelihood.")
        with tempfile.TemporaryDirectory(prefix="personamem-profile-eval-") as tmp:
            store = build_store(loaded, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress)
            try:
                found = measure_profiles(held, store, settings, llm=scorer, cache=cache, progress=progress)
            finally:
                store.close()
        report.benchmarks.append(found)
    if llm is not None:
        report.notes.append(
            f"Answer LL: log p(gold answer | profile, question) under {llm.name}, in eval --answers' "
            "prompt. Only questions whose profile changed were scored (under both profiles); an "
            "unchanged profile differs by exactly 0, so Δ and its paired t-test are over every answered "
            "question, 'Δ LL on changed' over the changed ones (their count in brackets)."
        )
    return report


def _versus(difference: float | None, p: float | None, digits: int) -> str:
    if difference is None:
        return ""
    if p is None or math.isnan(p):
        return f"{difference:+.{digits}f}" + (" (no change)" if difference == 0 else "")
    return f"{difference:+.{digits}f} (p {p:.2g})"


def _advance(progress: Progress | None, task: Any) -> None:
    if progress is not None and task is not None:
        progress.advance(task)


def _finite(value: Any) -> Any:
    """``value`` with NaN floats as None (JSON has no NaN)."""
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value
