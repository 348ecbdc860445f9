"""Leave one benchmark out: the ranker's recipe judged on benchmarks it never saw, by the worst fold.

For each benchmark in turn and each seed, a query adapter and a ranker (trees and gate) are trained
on the other benchmarks alone, exactly as ``personamem train ranker`` trains the shipped one, and
scored on every user of the left-out benchmark (none of them trained anything in the fold; its
held-out users alone left PersonaBench and iKAT 89 and 40 questions, where one question moved a
fold past the margin) against what needs no training on it: dense, BM25, plain hybrid, the
default's own RRF order with that fold's adapter (the unranked default), the score fusion served
where no trees do (``ranker.score_fusion``), the one served before it
(``ranker.adapted_score_fusion``), and a grid of RRF fusions (:data:`FUSIONS`) both are held
against. Methods
are scored over each question's candidates (the union of the top 50 of adapted dense, base dense
and BM25, where every method's top 10 lies), with ranx, gold outside the candidates counted as
missed. A history shape of a benchmark (:mod:`personamem.trainers.ranker.shapes`) is scored by
that benchmark's fold, on the shape's users, and judged as a fold of its own. Each fold's adapter
and each seed's ranker and scores are written to ``<out>/leave-one-out/`` when done, so a rerun
resumes.

The rule (issue 57): the ranker as served may fall below neither the best plain method nor the
unranked default by more than :data:`MARGIN` on recall@5, recall@10 or MRR in any fold, nor lose
significantly (paired t-test over questions, p < 0.05). The verdict separates the trees with their
gate (against the score fusion, what the same ranker serves without them) from the whole; a recipe
whose trees fail ships no trees.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.datasets.benchmark import Benchmark, Question
from personamem.encoder import Encoder
from personamem.eval.metrics import ranx_scores
from personamem.retrieval.query_adapter import CONFIG_FILE as ADAPTER_FILE
from personamem.retrieval.query_adapter import QueryAdapter
from personamem.retrieval.ranker import (
    FEATURES,
    INFO_FILE,
    POOL,
    RankerModel,
    adapted_score_fusion,
    score_fusion,
)
from personamem.retrieval.when import WINDOW_BOOST
from personamem.trainers.adapter.config import AdapterDataConfig, AdapterTrainConfig
from personamem.trainers.adapter.run import train_adapter
from personamem.trainers.ranker.config import RankerDataConfig, RankerTrainConfig
from personamem.trainers.ranker.data import FeatureSet, benchmark_features, default_features_dir
from personamem.trainers.ranker.shapes import Shape, shape_benchmark
from personamem.trainers.ranker.trainer import served_start, train_ranker

__all__ = [
    "CATEGORY_METHODS",
    "FUSIONS",
    "MARGIN",
    "METRICS",
    "PLAIN",
    "RULED",
    "by_category",
    "fusion_name",
    "leave_one_out",
    "method_scores",
    "per_question",
    "verdict",
]

METRICS = ("recall@5", "recall@10", "mrr", "ndcg@10")
"""What each fold reports."""
RULED = ("recall@5", "recall@10", "mrr")
"""The metrics the rule holds the served ranker to."""
MARGIN = 0.005
"""How far below a reference a fold's mean may fall before the recipe fails."""
ALPHA = 0.05
"""A paired t-test below this is a significant loss."""
PLAIN = ("dense", "bm25", "hybrid")
"""Methods that learn nothing: the best of them per fold is a reference."""
CATEGORY_METHODS = (
    *PLAIN,
    "default without ranker",
    "adapted score fusion",
    "score fusion",
    "ranker as served (gated)",
)
"""The methods each fold reports per question category."""
FUSIONS = tuple(
    (side, weight, k)
    for side in ("base", "adapter")
    for weight in (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
    for k in (2, 10, 60)
)
"""Fusions the unranked default's is held against: (query side, dense weight, RRF k), over the candidates."""
_COLUMN = {name: i for i, name in enumerate(FEATURES)}


def fusion_name(side: str, weight: float, k: int) -> str:
    """How a fusion of :data:`FUSIONS` is named in a report."""
    return f"fusion {side} {weight:g}/{k}"


def _fused(f: np.ndarray, side: str, weight: float, k: int) -> np.ndarray:
    """Weighted RRF of the side's dense ranks and BM25's, from the candidates' ranks (top 50 each)."""
    dense = f[:, _COLUMN["rank_base" if side == "base" else "rank_adapt"]]
    lexical = f[:, _COLUMN["rank_bm25"]]
    on_list = f[:, _COLUMN["bm25"]] > 0
    tie = 1e-9 * f[:, _COLUMN["cos_base" if side == "base" else "cos_adapt"]]  # ties: the dense order
    return (
        np.where(dense <= POOL, weight / (k + dense), 0.0)
        + np.where((lexical <= POOL) & on_list, (1 - weight) / (k + lexical), 0.0)
        + tie
    )


def method_scores(found: FeatureSet, ranker: RankerModel) -> dict[str, np.ndarray]:
    """Each method's score of every candidate row (higher first; -inf: the method does not return it)."""
    f = found.features
    bm25 = f[:, _COLUMN["bm25"]].astype(np.float64)
    window = WINDOW_BOOST * found.inside  # as the ranker serves: records inside the question's window raised
    adapted = np.repeat(ranker.adapts(found.profiles), found.groups)
    return {
        "dense": f[:, _COLUMN["cos_base"]],
        "bm25": np.where(bm25 > 0, bm25, -np.inf),
        "hybrid": f[:, _COLUMN["fused_plain"]],
        "default without ranker": f[:, _COLUMN["fused_default"]],
        "adapted score fusion": adapted_score_fusion(f) + window,
        "score fusion": score_fusion(f, adapted) + window,
        "ranker (trees everywhere)": ranker.score(f, trees=True, adapted=adapted) + window,
        "ranker as served (gated)": served_start(ranker)(found) + window,
        **{fusion_name(*fusion): _fused(f, *fusion) for fusion in FUSIONS},
    }


def per_question(found: FeatureSet, methods: dict[str, np.ndarray]) -> dict[str, dict[str, dict[str, float]]]:
    """Per method, per metric, each question's score (ranx) of the candidates ordered by the method's scores.

    Gold outside the candidates counts as missed. Every method goes through one ranx evaluation (a
    question per method and question), which costs a fraction of one evaluation per method.
    """
    questions, rankings = [], {}
    offsets = found.offsets
    for q, qid in enumerate(found.questions):
        at, end = offsets[q], offsets[q + 1]
        labels = found.labels[at:end]
        relevant = {f"c{i}": int(g) for i, g in enumerate(labels) if g > 0}
        relevant |= {f"missing{j}": 1 for j in range(int(found.relevant[q]) - len(relevant))}
        for name, scores in methods.items():
            key = f"{name}\t{qid}"
            order = np.argsort(-scores[at:end], kind="stable")
            rankings[key] = [f"c{i}" for i in order if np.isfinite(scores[at + i])]
            questions.append(Question(id=key, user_id=str(found.users[q]), text="", relevant=relevant))
    scored = ranx_scores(questions, rankings, METRICS)
    split: dict[str, dict[str, dict[str, float]]] = {name: {m: {} for m in METRICS} for name in methods}
    for metric, values in scored.items():
        for key, value in values.items():
            name, qid = key.split("\t", 1)
            split[name][metric][qid] = value
    return split


@dataclass(frozen=True)
class FoldSeed:
    """One left-out benchmark and seed: per method, per metric, each question's score."""

    fold: str
    seed: int
    scores: dict[str, dict[str, dict[str, float]]]
    admitted: list[str]
    served: float  # share of the fold's questions whose user the gate gave the trees


def leave_one_out(
    data: RankerDataConfig,
    config: RankerTrainConfig,
    out_dir: Path,
    *,
    seeds: Sequence[int],
    encoder: Encoder,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
    folds: Sequence[str] | None = None,
    adapter: AdapterTrainConfig | None = None,
    shapes: Sequence[Shape] = (),
) -> dict[str, Any]:
    """Train without each benchmark in turn, score on all of its users, and judge by the worst fold.

    ``folds`` names the benchmarks to leave out (default: each one); ``adapter`` how each fold's
    adapter is fitted (default: as the shipped one, seed 0); ``shapes`` other readings of a left-out
    benchmark, each scored by its benchmark's fold and judged as a fold of its own. Returns the
    report also written to ``out_dir / "leave-one-out.json"`` (and ``.md``).
    """
    folder = out_dir / "leave-one-out"
    folder.mkdir(parents=True, exist_ok=True)
    left_out = [b for b in data.benchmark if folds is None or b.value in folds]
    read = {shape.name: shape_benchmark(data, shape) for shape in shapes if shape.benchmark in left_out}
    task = (
        progress.add_task("leave one out", total=(len(left_out) + len(read)) * len(seeds))
        if progress
        else None
    )
    results: list[FoldSeed] = []
    categories = {q.id: q.category for benchmark in read.values() for q in benchmark.questions}
    for fold in left_out:
        loaded, _ = data.split(fold)
        categories |= {q.id: q.category for q in loaded.questions}
        which = (fold.value, tuple(b for b in data.benchmark if b != fold))
        scored = [(fold.value, loaded), *((s.name, read[s.name]) for s in shapes if s.benchmark == fold)]
        for seed in seeds:
            for name, benchmark in scored:
                done = folder / f"{name}-s{seed}.json"
                if not done.is_file():
                    models = _trained(
                        data, config, adapter, (*which, seed), folder, encoder, cache_dir, progress
                    )
                    _write(done, _scored(benchmark, name, seed, models, data, encoder, cache_dir, progress))
                results.append(FoldSeed(**json.loads(done.read_text(encoding="utf-8"))))
                if progress is not None and task is not None:
                    progress.advance(task)
    report = verdict(results, categories)
    (out_dir / "leave-one-out.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    (out_dir / "leave-one-out.md").write_text(markdown(report), encoding="utf-8")
    return report


def _write(done: Path, result: FoldSeed) -> None:
    """``result`` written to ``done`` whole (a partial file until then): a rerun resumes after it."""
    partial = done.with_suffix(".partial")
    partial.write_text(json.dumps(result.__dict__), encoding="utf-8")
    partial.replace(done)


def _trained(
    data: RankerDataConfig,
    config: RankerTrainConfig,
    adapter: AdapterTrainConfig | None,
    which: tuple[str, tuple[Any, ...], int],
    folder: Path,
    encoder: Encoder,
    cache_dir: Path | None,
    progress: Progress | None,
) -> tuple[Path, Path]:
    """The fold's adapter and ranker folders, trained without the fold's benchmark unless already there.

    ``which`` is (the left-out benchmark, the others, the trees' seed). The adapter is trained once
    per fold (its seeds move the default by at most 0.006, see docs/RESULTS.md); the trees take
    each seed.
    """
    fold, others, seed = which
    adapter_dir = folder / f"adapter-without-{fold}"
    if not (adapter_dir / ADAPTER_FILE).is_file():
        train_adapter(
            AdapterDataConfig(
                benchmark=others,
                data_root=data.data_root,
                test_share=data.test_share,
                validation_share=data.validation_share,
                split_seed=data.split_seed,
            ),
            adapter or AdapterTrainConfig(seed=0),
            adapter_dir,
            encoder=encoder,
            cache_dir=cache_dir,
            progress=progress,
        )
    ranker_dir = folder / f"ranker-without-{fold}-s{seed}"
    if not (ranker_dir / INFO_FILE).is_file():  # written last: a folder that has it is whole
        train_ranker(
            data.model_copy(update={"benchmark": others, "adapter": str(adapter_dir)}),
            config.model_copy(update={"seed": seed}),
            ranker_dir,
            encoder=encoder,
            cache_dir=cache_dir,
            progress=progress,
        )
    return adapter_dir, ranker_dir


def _scored(
    benchmark: Benchmark,
    name: str,
    seed: int,
    models: tuple[Path, Path],
    data: RankerDataConfig,
    encoder: Encoder,
    cache_dir: Path | None,
    progress: Progress | None,
) -> FoldSeed:
    """Each user of ``benchmark`` (the left-out one or a shape of it) scored by the fold's models."""
    adapter_dir, ranker_dir = models
    found, _ = benchmark_features(
        benchmark,
        name,
        encoder,
        QueryAdapter.load(adapter_dir, encoder),
        features_dir=data.features_dir or default_features_dir(),
        cache_dir=cache_dir,
        progress=progress,
    )
    model = RankerModel.load(ranker_dir)
    scores = per_question(found, method_scores(found, model))
    served = model.serves(found.profiles)
    admitted = [region.benchmark for region in model.gate.regions] if model.gate is not None else []
    return FoldSeed(name, seed, scores, admitted, float(served.mean()) if len(served) else 0.0)


def _paired_p(ours: np.ndarray, theirs: np.ndarray) -> float:
    """A paired t-test's p over questions (scipy); its precision warning on near-constant changes is moot."""
    from scipy.stats import ttest_rel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(ttest_rel(ours, theirs).pvalue)


def by_category(runs: Sequence[FoldSeed], categories: Mapping[str, str]) -> dict[str, Any]:
    """One fold's :data:`CATEGORY_METHODS` per question category: each metric's mean over seeds."""
    ids = sorted(runs[0].scores[CATEGORY_METHODS[0]][METRICS[0]])
    groups: dict[str, list[str]] = {}
    for qid in ids:
        groups.setdefault(categories.get(qid) or "uncategorized", []).append(qid)
    return {
        category: {
            "questions": len(members),
            "methods": {
                m: {
                    metric: float(np.mean([np.mean([r.scores[m][metric][q] for q in members]) for r in runs]))
                    for metric in METRICS
                }
                for m in CATEGORY_METHODS
            },
        }
        for category, members in sorted(groups.items())
    }


def verdict(results: Sequence[FoldSeed], categories: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Per fold: each method's mean ± std over seeds, the margins the rule reads, and the worst fold.

    With ``categories`` (question id to its benchmark's question type), each fold is also broken down
    by category (:func:`by_category`), reported, not ruled on.
    """
    folds: dict[str, Any] = {}
    for fold in dict.fromkeys(r.fold for r in results):
        runs = [r for r in results if r.fold == fold]
        methods = list(runs[0].scores)
        ids = sorted(runs[0].scores[methods[0]][METRICS[0]])

        def question_means(
            method: str, metric: str, ids: list[str] = ids, runs: list[FoldSeed] = runs
        ) -> np.ndarray:
            return np.array([np.mean([r.scores[method][metric][q] for r in runs]) for q in ids])

        table = {
            m: {
                metric: {
                    "mean": float(
                        np.mean(seed_means := [np.mean(list(r.scores[m][metric].values())) for r in runs])
                    ),
                    "std": float(np.std(seed_means, ddof=1)) if len(runs) > 1 else 0.0,
                }
                for metric in METRICS
            }
            for m in methods
        }
        checks = []
        for metric in RULED:
            best_plain = max(PLAIN, key=lambda m: float(table[m][metric]["mean"]))
            served = question_means("ranker as served (gated)", metric)
            for reference, role in (
                (best_plain, "best plain method"),
                ("default without ranker", "unranked default"),
                ("score fusion", "served without trees"),
            ):
                theirs = question_means(reference, metric)
                change = served - theirs
                difference = float(change.mean())
                p = (
                    _paired_p(served, theirs)
                    if len(ids) > 1 and not np.allclose(change, change[0])
                    else math.nan
                )
                checks.append(
                    {
                        "metric": metric,
                        "against": reference,
                        "role": role,
                        "difference": difference,
                        "p": p,
                        "fails": difference < -MARGIN or (difference < 0 and p < ALPHA),
                    }
                )
        folds[fold] = {
            "questions": len(ids),
            "seeds": [r.seed for r in runs],
            "served_share": float(np.mean([r.served for r in runs])),
            "admitted": [r.admitted for r in runs],
            "methods": table,
            "checks": checks,
        }
        if categories is not None:
            folds[fold]["by_category"] = by_category(runs, categories)
    every = [c | {"fold": f} for f, v in folds.items() for c in v["checks"]]
    worst = min(every, key=lambda c: c["difference"]) if every else None
    fusions = (
        {
            name: min(
                (
                    v["methods"][name][metric]["mean"] - max(v["methods"][m][metric]["mean"] for m in PLAIN),
                    f,
                    metric,
                )
                for f, v in folds.items()
                for metric in RULED
            )
            for name in next(iter(folds.values()))["methods"]
            if name.startswith("fusion ") or name == "score fusion"
        }
        if folds
        else {}
    )
    return {
        "rule": f"served >= reference - {MARGIN} on {', '.join(RULED)} in every fold; no loss at p < {ALPHA}",
        "folds": folds,
        "worst": worst,
        "trees_pass": not any(c["fails"] for c in every if c["role"] == "served without trees"),
        "passes": not any(c["fails"] for c in every),
        "fusions": dict(sorted(fusions.items(), key=lambda item: item[1][0], reverse=True)),
    }


def markdown(report: dict[str, Any]) -> str:
    """The report as tables: each fold's methods, then the checks, then the verdict."""
    lines = ["| left-out benchmark (questions) | method | " + " | ".join(METRICS) + " |"]
    lines.append("|---|---|" + "---|" * len(METRICS))
    for fold, v in report["folds"].items():
        for method, cells in v["methods"].items():
            if method.startswith("fusion "):
                continue
            shown = " | ".join(f"{c['mean']:.3f} ± {c['std']:.3f}" for c in cells.values())
            lines.append(f"| {fold} ({v['questions']}) | {method} | {shown} |")
    lines += ["", "| left-out benchmark | metric | served − reference | p | fails |", "|---|---|---|---|---|"]
    for fold, v in report["folds"].items():
        for c in v["checks"]:
            lines.append(
                f"| {fold} | {c['metric']} | {c['difference']:+.3f} vs {c['against']} ({c['role']}) | "
                f"{c['p']:.2g} | {'yes' if c['fails'] else 'no'} |"
            )
    if any("by_category" in v for v in report["folds"].values()):
        lines += [
            "",
            "| left-out benchmark | category (questions) | R@5: " + " | ".join(CATEGORY_METHODS) + " |",
        ]
        lines.append("|---|---|" + "---|" * len(CATEGORY_METHODS))
        for fold, v in report["folds"].items():
            for category, row in v.get("by_category", {}).items():
                cells = " | ".join(f"{row['methods'][m]['recall@5']:.3f}" for m in CATEGORY_METHODS)
                lines.append(f"| {fold} | {category} ({row['questions']}) | {cells} |")
    lines += [
        "",
        "| fusion (query side, dense weight / RRF k) | worst fold: change against its best plain method |",
    ]
    lines.append("|---|---|")
    for name, (difference, fold, metric) in report["fusions"].items():
        lines.append(f"| {name.removeprefix('fusion ')} | {difference:+.3f} ({fold}, {metric}) |")
    lines += [
        "",
        "Share of the left-out questions whose user the gate gave the trees: "
        + ", ".join(f"{f} {v['served_share']:.2f}" for f, v in report["folds"].items()),
        f"Trees with their gate pass: {report['trees_pass']}; "
        f"the whole served ranker passes: {report['passes']}.",
    ]
    return "\n".join(lines) + "\n"
