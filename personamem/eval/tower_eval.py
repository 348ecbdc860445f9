"""Trained query towers against the base dense retriever: recall, nDCG, novelty and judged precision.

Each tower (a PG-Ret or InfoNCE checkpoint, one per training seed) is run as the method
``pgret:<folder>`` through a real store, as an application would run it; a variant's score is the
mean ± std over its seeds and comparisons with dense are paired t-tests over questions
(:mod:`personamem.eval.stats`). Novelty@k is measured against the base dense top-L; novelty alone
rewards any change, so it is read beside precision: gold recall and LLM-judged precision@k, where a
gold record counts as relevant and any other record by the judge's verdict at the threshold
calibrated on these users' gold.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress

from personamem.datasets import Benchmark, evenly_spaced
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.eval.judge import JudgeCalibration, RelevanceJudge, calibrate, labelled_pairs
from personamem.eval.metrics import novelty_at_k
from personamem.eval.runner import MethodRun, evaluate_method
from personamem.eval.stats import compare, summarize
from personamem.methods import method_named

__all__ = ["TowerReport", "evaluate_towers", "find_towers"]

_RANKED = ("recall@5", "recall@10", "ndcg@5", "ndcg@10")


@dataclass
class TowerReport:
    """Every variant's run beside dense's, the judge's agreement with gold, and novel finds.

    Attributes:
        runs: label -> scores per question per training seed (``dense``: one run).
        calibration: the judge against these users' gold (its threshold labels judged precision).
        examples: novel relevant records a tower ranked in its top k that dense left out of its top L.
        k: the cutoff of novelty and judged precision; depth: L.
    """

    runs: dict[str, MethodRun]
    calibration: JudgeCalibration
    examples: list[dict[str, str]] = field(default_factory=list)
    k: int = 5
    depth: int = 20
    command: str = ""

    @property
    def metrics(self) -> list[str]:
        """Metrics in report order."""
        return [*_RANKED, f"novelty@{self.k}", f"novel_gold@{self.k}", f"judged_precision@{self.k}"]

    def rows(self) -> list[dict[str, Any]]:
        """One row per variant: mean ± std over seeds per metric, and p against dense."""
        base = self.runs["dense"]
        out = []
        for label, run in self.runs.items():
            row: dict[str, Any] = {"method": label, "seeds": len(run.seeds)}
            for metric in self.metrics:
                summary = summarize(run, metric)
                row[metric] = {"mean": summary.mean, "std": summary.std, "questions": summary.questions}
                if label != "dense":
                    row[metric]["p"] = compare(run, base, metric).p
            out.append(row)
        return out

    def to_json(self) -> dict[str, Any]:
        """The whole report, JSON-ready."""
        return {
            "command": self.command,
            "k": self.k,
            "novelty_depth": self.depth,
            "judge": self.calibration.to_json(),
            "rows": self.rows(),
            "examples": self.examples,
        }


def find_towers(runs_dir: Path) -> dict[str, list[Path]]:
    """Checkpoints under ``runs_dir`` (``*/best/pgret.json``) grouped by variant, in seed order."""
    found: dict[str, list[tuple[int, Path]]] = {}
    for config in sorted(runs_dir.glob("*/best/pgret.json")):
        info = json.loads(config.read_text(encoding="utf-8"))
        variant, seed = str(info.get("variant", "tower")), int(info.get("seed", 0))
        found.setdefault(variant, []).append((seed, config.parent))
    return {label: [path for _, path in sorted(paths)] for label, paths in sorted(found.items())}


def evaluate_towers(
    benchmark: Benchmark,
    towers: Mapping[str, Sequence[Path]],
    judge: RelevanceJudge,
    encoder: Encoder,
    *,
    k: int = 5,
    depth: int = 20,
    judged_questions: int = 60,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> TowerReport:
    """Score dense and every tower on ``benchmark``'s questions (pass held-out users only).

    Args:
        benchmark: the corpus and the questions to score.
        towers: variant label -> its checkpoints, one per training seed.
        judge: judges the top-k records that are not gold (and is calibrated on these users' gold).
        encoder: the store's record encoder (the towers were trained against it).
        k: the cutoff of novelty and judged precision.
        depth: L, the base dense top list that novelty is measured against.
        judged_questions: evenly spaced questions whose top k is judged (judging is the slow part).
        cache_dir: the corpus vector cache.
        progress: shows the store's ingest and each method's ranking.
    """
    questions = [q for q in benchmark.questions if q.relevant]
    texts = {(r.user_id, r.id): r.text for r in benchmark.records}
    judged = {q.id for q in evenly_spaced(questions, judged_questions)}
    with tempfile.TemporaryDirectory(prefix="personamem-towers-") as tmp:
        store = build_store(benchmark, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress)
        try:

            def run(name: str) -> MethodRun:
                return evaluate_method(method_named(name, None), benchmark, store, progress=progress)

            dense = run("dense")
            towers_runs = {label: [run(f"pgret:{f}") for f in folders] for label, folders in towers.items()}
        finally:
            store.close()
    base = dense.rankings[dense.seeds[0]]
    by_user: dict[str, list[str]] = {}
    for record in benchmark.records:
        by_user.setdefault(record.user_id, []).append(record.id)
    pairs, labels = labelled_pairs(
        [
            (
                q.text,
                [texts[(q.user_id, g)] for g in q.relevant],
                [texts[(q.user_id, r)] for r in _non_gold(base[q.id], by_user[q.user_id], q.relevant)],
            )
            for q in questions
        ]
    )
    calibration = calibrate(judge.margins(pairs), labels)
    report = TowerReport({}, calibration, k=k, depth=depth)
    for label, runs in [("dense", [dense]), *towers_runs.items()]:
        merged = MethodRun(label, list(range(len(runs))), stochastic=len(runs) > 1)
        for seed, one in enumerate(runs):
            ranking = one.rankings[one.seeds[0]]
            scores = {m: {qid: v[0] for qid, v in one.scores[m].items()} for m in _RANKED}
            scores.update(_novelty(questions, ranking, base, k, depth))
            scores[f"judged_precision@{k}"] = _judged_precision(
                [q for q in questions if q.id in judged], ranking, texts, judge, calibration, k
            )
            for metric, per_question in scores.items():
                for qid, value in per_question.items():
                    merged.scores.setdefault(metric, {}).setdefault(qid, []).append(value)
            merged.rankings[seed] = ranking
            if label != "dense":
                report.examples += _novel_finds(questions, ranking, base, texts, label, seed, k, depth)
        report.runs[label] = merged
    return report


def _non_gold(ranking: Sequence[str], records: Sequence[str], gold: Mapping[str, int]) -> list[str]:
    """The user's non-gold records: dense's two best first (hard negatives), then the rest."""
    hard = [r for r in ranking if r not in gold][:2]
    return [*hard, *(r for r in records if r not in gold and r not in hard)]


def _novelty(
    questions: Sequence[Any],
    ranking: Mapping[str, list[str]],
    base: Mapping[str, list[str]],
    k: int,
    depth: int,
) -> dict[str, dict[str, float]]:
    novelty, novel_gold = {}, {}
    for q in questions:
        top, known = ranking[q.id][:k], base[q.id][:depth]
        novelty[q.id] = novelty_at_k(top, known, k)
        novel_gold[q.id] = sum(r in q.relevant and r not in known for r in top) / k
    return {f"novelty@{k}": novelty, f"novel_gold@{k}": novel_gold}


def _judged_precision(
    questions: Sequence[Any],
    ranking: Mapping[str, list[str]],
    texts: Mapping[tuple[str, str], str],
    judge: RelevanceJudge,
    calibration: JudgeCalibration,
    k: int,
) -> dict[str, float]:
    asked = [(q, r) for q in questions for r in ranking[q.id][:k] if r not in q.relevant]
    verdicts = judge.margins([(q.text, texts[(q.user_id, r)]) for q, r in asked])
    margin = {(q.id, r): m for (q, r), m in zip(asked, verdicts, strict=True)}
    threshold = calibration.threshold
    return {
        q.id: sum(r in q.relevant or margin[(q.id, r)] >= threshold for r in ranking[q.id][:k]) / k
        for q in questions
    }


def _novel_finds(
    questions: Sequence[Any],
    ranking: Mapping[str, list[str]],
    base: Mapping[str, list[str]],
    texts: Mapping[tuple[str, str], str],
    label: str,
    seed: int,
    k: int,
    depth: int,
) -> list[dict[str, str]]:
    finds = []
    for q in questions:
        for r in ranking[q.id][:k]:
            if r in q.relevant and r not in base[q.id][:depth]:
                dense_rank = base[q.id].index(r) + 1 if r in base[q.id] else None
                finds.append(
                    {
                        "method": f"{label} seed {seed}",
                        "question": q.text,
                        "record": texts[(q.user_id, r)],
                        "dense_rank": str(dense_rank or f">{len(base[q.id])}"),
                    }
                )
    return finds
