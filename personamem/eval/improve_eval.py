"""What ``personamem improve`` gains on a benchmark's held-out users, from feedback or from no label.

A deployment's store holds every user of a benchmark. With ``feedback``, each seed draws a share of
all questions as logged calls, searched with the live default (top 10), whose user reports the gold
records among those served: what someone marking the useful records of what they saw can report
(so the feedback is always right, and misses the gold the default did not serve; the trial counts
both). With ``answers``, the same share of calls is logged, but their user reports only the
benchmark's reference answer (no record id): improve attributes it to the served records it drew
on (:mod:`personamem.attribution`). With ``llm-answers``, the answer reported is the one a frozen
LLM writes from the served records and the question, as an application's LLM would. With
``synthetic``, no call is logged and improve writes its own questions with the LLM.
Then improve runs as a deployment would run it, and the store's live pipeline after it and before
it (the shipped default, or that default with another ranker, e.g. one trained without this
benchmark) are scored on the held-out users' questions that were not logged (the shipped
adapter's and ranker's split, so no shipped model saw those users), paired per question.

Trials are appended to a JSON-lines file as they finish, so a long run resumes where it stopped.
"""

from __future__ import annotations

import json
import math
import random
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.datasets import Benchmark, DataSource, UserSplit
from personamem.datasets.benchmark import Question
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.eval.metrics import ranx_scores
from personamem.eval.profile_eval import TEST_SHARE, VALIDATION_SHARE
from personamem.llm.base import FrozenLLM
from personamem.memory import PersonaMem, stored_pipeline
from personamem.pipeline.config import PipelineConfig
from personamem.pipeline.prompt import profile_prompt

__all__ = ["METRICS", "ImproveTrial", "improve_trial", "log_feedback", "summarize_trials"]

METRICS = ("recall@5", "recall@10", "ndcg@10", "mrr")
SERVED_K = 10
"""Records a logged call shows its user (who reports the useful ones among them)."""


@dataclass
class ImproveTrial:
    """One improve run on one benchmark's store, and the held-out questions scored before and after.

    Attributes:
        signal: what was asked (``feedback``, ``answers``, ``llm-answers``, ``synthetic``);
            learned_from: what improve used (too little feedback: synthetic questions).
        calls: logged calls; reported: those whose user reported a record (a gold one was served),
            or an answer; gold_reported: share of the reported calls' gold records that were reported.
        live: whether improve put its candidate live; chosen_by: the live pipeline's reason.
        ranker: the live ranker before improve (``auto``: the shipped default's); synthetic_live:
            improve's setting (whether synthetic questions may put a candidate live).
        scores: ``default`` (the live pipeline before improve) / ``improved`` (after) -> metric ->
            question id -> score.
    """

    benchmark: str
    signal: str
    learned_from: str
    seed: int
    share: float
    calls: int
    reported: int
    gold_reported: float
    live: bool
    chosen_by: str | None
    counts: dict[str, int]
    notes: list[str]
    seconds: float
    ranker: str = "auto"
    synthetic_live: bool = False
    scores: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, int, float, str, bool]:
        """What identifies the trial in a resumed run."""
        return (self.benchmark, self.signal, self.seed, self.share, self.ranker, self.synthetic_live)


LOGGED = ("feedback", "answers", "llm-answers")
"""The signals whose trials log a share of the calls (``synthetic`` logs none)."""


def improve_trial(
    loaded: Benchmark,
    *,
    name: str,
    signal: str,
    seed: int,
    share: float,
    settings: dict[str, Any],
    encoder: Encoder,
    ranker: str = "auto",
    split_seed: int = 0,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
    writer: FrozenLLM | None = None,
) -> ImproveTrial:
    """Build the store, log the calls (``feedback``, ``answers``), run improve, score both pipelines.

    ``name`` labels the trial (the benchmark's CLI name); ``settings`` are :meth:`PersonaMem.improve`'s
    keyword settings (its ``seed`` is ``seed``); ``ranker`` is the store's live ranker before improve;
    ``writer`` writes the answers of ``llm-answers``.
    """
    asked = [q for q in loaded.questions if any(g > 0 for g in q.relevant.values())]
    split = UserSplit.by_share(
        loaded.users(), test_share=TEST_SHARE, validation_share=VALIDATION_SHARE, seed=split_seed
    )
    logged = (
        random.Random(f"{name}-{seed}").sample(asked, round(share * len(asked))) if signal in LOGGED else []
    )
    taken = {q.id for q in logged}
    test = set(split.test)
    held = [q for q in asked if q.user_id in test and q.id not in taken]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="personamem-improve-eval-") as tmp:
        build_store(loaded, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress).close()
        with PersonaMem.open(Path(tmp) / "store", encoder=encoder) as mem:
            if ranker != "auto":
                mem.store.set_live_pipeline({"ranker": ranker})
            before = stored_pipeline(mem.store.live_pipeline)
            answers = {"answers": "reference", "llm-answers": "llm"}.get(signal)
            reported, gold_shares = log_feedback(mem, before, logged, progress, answers, writer)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a pinned-pipeline note: the eval reads the store's table
                # the held-out offline decision: interleaving on live traffic is judged against it
                result = mem.improve(progress=progress, **{"go_live": "now", **settings, "seed": seed})
            live = stored_pipeline(mem.store.live_pipeline)
            scores = {
                "default": _score(mem, before, held, progress, "before improve"),
                "improved": _score(mem, live, held, progress, "improved") if result.live else {},
            }
    if not result.live:  # the store still serves the default: the same rankings
        scores["improved"] = scores["default"]
    return ImproveTrial(
        name,
        signal,
        result.signal,
        seed,
        share,
        len(logged),
        reported,
        float(np.mean(gold_shares)) if gold_shares else math.nan,
        result.live,
        live.chosen_by,
        result.counts,
        result.notes,
        time.perf_counter() - start,
        ranker,
        bool(settings.get("synthetic_live", False)),
        scores,
    )


def log_feedback(
    mem: PersonaMem,
    live: PipelineConfig,
    logged: Sequence[Question],
    progress: Progress | None,
    answers: str | None = None,
    writer: FrozenLLM | None = None,
) -> tuple[int, list[float]]:
    """Search each logged question (logged, with ``live``) and report the gold records it served.

    ``answers="reference"``: report the question's reference answer instead (a question without one,
    none); ``"llm"``: the answer ``writer`` gives from the served records and the question.
    """
    if answers == "llm" and writer is None:
        raise ValueError("llm-answers needs the LLM that writes them")
    pipeline = mem.pipeline(live.model_copy(update={"log_interactions": True}))
    task = progress.add_task("logged calls", total=len(logged)) if progress and logged else None
    reported, shares = 0, []
    for question in logged:
        hits = pipeline.search(question.user_id, question.text, SERVED_K)
        answer = question.answer if answers == "reference" else None
        if answers == "llm" and writer is not None and hits:
            prompt = profile_prompt(writer, [h.record for h in hits], question.text)
            answer = writer.generate([prompt], max_tokens=48, stop=["\n"])[0][0]
        if answers is not None:
            if answer and answer.strip() and hits.interaction_id:
                mem.feedback(hits.interaction_id, answer=answer)
                reported += 1
        else:
            gold = {r for r, g in question.relevant.items() if g > 0}
            used = [h.record.id for h in hits if h.record.id in gold]
            if used and hits.interaction_id:
                mem.feedback(hits.interaction_id, used_record_ids=used)
                reported += 1
                shares.append(len(used) / len(gold))
        if progress is not None and task is not None:
            progress.advance(task)
    return reported, shares


def _score(
    mem: PersonaMem, config: PipelineConfig, held: Sequence[Question], progress: Progress | None, label: str
) -> dict[str, dict[str, float]]:
    pipeline = mem.pipeline(config.model_copy(update={"log_interactions": False}))
    task = progress.add_task(f"held-out: {label}", total=len(held)) if progress else None
    rankings = {}
    for question in held:
        rankings[question.id] = [h.record.id for h in pipeline.search(question.user_id, question.text, 10)]
        if progress is not None and task is not None:
            progress.advance(task)
    return ranx_scores(held, rankings, METRICS)


def load_trials(path: Path) -> list[ImproveTrial]:
    """The trials a run appended to ``path`` (none when it does not exist)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    return [ImproveTrial(**json.loads(line)) for line in lines if line.strip()]


def append_trial(path: Path, trial: ImproveTrial) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(asdict(trial), allow_nan=True) + "\n")


def summarize_trials(trials: Sequence[ImproveTrial]) -> list[dict[str, Any]]:
    """Per benchmark, signal and share: improved vs default per metric (mean ± std over seeds, paired p).

    The paired t-test runs over held-out questions, each question's difference averaged over the
    seeds that scored it (a seed's logged questions are not scored in that seed).
    """
    from scipy.stats import ttest_1samp

    groups: dict[tuple[str, str, float], list[ImproveTrial]] = {}
    for trial in trials:
        groups.setdefault((trial.benchmark, trial.signal, trial.share), []).append(trial)
    rows = []
    for (benchmark, signal, share), runs in sorted(groups.items()):
        row: dict[str, Any] = {
            "benchmark": benchmark,
            "signal": signal,
            "share": share,
            "seeds": len(runs),
            "live": sum(t.live for t in runs),
            "calls": float(np.mean([t.calls for t in runs])),
            "learned_from": sorted({t.learned_from for t in runs}),
            "reported_share": float(np.mean([t.reported / t.calls if t.calls else math.nan for t in runs])),
            "gold_reported": float(np.mean([t.gold_reported for t in runs])),
            "seconds": float(np.mean([t.seconds for t in runs])),
        }
        for metric in METRICS:
            means = {
                side: [float(np.mean(list(t.scores[side][metric].values()))) for t in runs]
                for side in ("default", "improved")
            }
            differences: dict[str, list[float]] = {}
            for t in runs:
                for qid, value in t.scores["improved"][metric].items():
                    differences.setdefault(qid, []).append(value - t.scores["default"][metric][qid])
            per_question = np.array([np.mean(v) for v in differences.values()])
            p = (
                float(ttest_1samp(per_question, 0.0).pvalue)
                if len(per_question) > 1 and per_question.any()
                else math.nan
            )
            row[metric] = {
                "default": float(np.mean(means["default"])),
                "improved": float(np.mean(means["improved"])),
                "improved_std": float(np.std(means["improved"])),
                "difference": float(per_question.mean()) if len(per_question) else math.nan,
                "p": p,
                "questions": len(per_question),
            }
        rows.append(row)
    return rows


def read_benchmark(data_root: Path, benchmark: Any) -> Benchmark:
    """A benchmark's questions and records from ``data_root`` (its usual folder there)."""
    from personamem.datasets import dataset

    return DataSource(benchmark=benchmark, data=data_root / str(dataset(benchmark).folder)).questions()
