"""``personamem train ranker`` as a function: features per benchmark, a lambdarank fit, the model folder.

One run reads every named benchmark, splits each one's users (by default exactly as the shipped
adapter's split, so its test users are never trained on by either), computes each question's
candidates and features through the runtime code (:mod:`personamem.trainers.ranker.data`), and fits
LightGBM lambdarank on all training users together, each benchmark's questions weighing the same in
all. The trees start from the default's own order (``init_score = alpha · fused_default``), with
monotone constraints keeping the default's signals pushing up; validation users choose alpha and the
number of trees (in steps of 10, zero included: then the ranker is the default's order). It writes
the folder :meth:`~personamem.retrieval.ranker.RankerModel.load` reads, with the recipe, counts and
split, plus a ``split-<benchmark>.json`` per benchmark for ``personamem eval --held-out``.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.progress import Progress

from personamem.datasets import DataSource, UserSplit
from personamem.encoder import Encoder
from personamem.errors import InsufficientDataError
from personamem.retrieval.query_adapter import QueryAdapter
from personamem.retrieval.ranker import CATEGORICAL, FEATURES, INFO_FILE, RankerModel
from personamem.trainers.ranker.config import RankerDataConfig, RankerRunConfig, RankerTrainConfig
from personamem.trainers.ranker.data import FeatureSet, benchmark_features, default_features_dir
from personamem.trainers.ranker.export import save_ranker
from personamem.trainers.run import TrainSummary

if TYPE_CHECKING:
    import lightgbm

__all__ = ["PARAMS", "RankerFit", "RankerRun", "fit_ranker", "fit_residual", "run", "train_ranker"]

MIN_TRAIN_QUESTIONS = 30
"""Fewer training questions than this fit noise: the run refuses with the counts."""
STEP = 10
"""Validation scores every STEP-th number of trees."""
PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 50,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambdarank_truncation_level": 20,
    "lambda_l2": 1.0,
    "num_threads": 1,
    "deterministic": True,
    "verbose": -1,
    "monotone_constraints_method": "advanced",
}
"""LightGBM's settings (the seed and the constraints are added per run)."""
MONOTONE = ("fused_default", "rr_adapt", "rr_bm25", "cos_adapt")
"""The default's own signals: a higher value never lowers a candidate's score."""


@dataclass
class RankerFit:
    """The fit kept by validation, and the curve it was chosen on.

    Attributes:
        booster: the kept alpha's model (all rounds; ``iterations`` of them are used).
        alpha / iterations: the chosen start weight and number of trees (0: the default's order).
        start / best: validation nDCG@10 of the default's order and of the chosen model.
        curve: per alpha, validation nDCG@10 at 0, STEP, 2·STEP, ... trees.
        seconds: wall-clock time of the fits.
    """

    booster: lightgbm.Booster | None
    alpha: float
    iterations: int
    start: float
    best: float
    curve: dict[float, list[float]]
    seconds: float


@dataclass
class RankerRun:
    """What a run wrote: the folder, the fit, the per-benchmark counts and the model's sha256."""

    folder: Path
    fit: RankerFit
    sources: dict[str, dict[str, Any]]
    sha256: str | None  # None: no trees kept
    cached: dict[str, bool]


def run(config: RankerRunConfig, *, progress: Progress | None = None) -> TrainSummary:
    """Learned ranker: reorder the default first stage's candidates, trained on benchmarks' gold labels.

    Features are computed by the same code that serves them, over a real store of each benchmark,
    and cached (a rerun, another seed or another mix of benchmarks reuses them; --resume has nothing
    more to resume). Validation users choose alpha and the number of trees; with none the ranker is
    exactly the default's order.

    Raises:
        InsufficientDataError: too few training questions, or no validation question.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder

    result = train_ranker(
        config.data,
        config.train,
        config.out_dir,
        encoder=default_encoder(),
        cache_dir=default_vector_cache(),
        progress=progress,
    )
    rows = [
        (
            f"{name}: questions (users) train / validation / test",
            f"{s['train_questions']} ({s['train_users']}) / {s['validation_questions']} "
            f"({s['validation_users']}) / {s['test_questions']} ({s['test_users']})"
            + (" [features cached]" if result.cached[name] else ""),
        )
        for name, s in result.sources.items()
    ]
    fit = result.fit
    rows += [
        ("chosen: alpha, trees", f"{fit.alpha:g}, {fit.iterations}"),
        ("validation nDCG@10: default → ranker", f"{fit.start:.4f} → {fit.best:.4f}"),
        ("wall-clock seconds (fits)", f"{fit.seconds:.0f}"),
        ("ranker (sha256)", f"{result.folder} ({(result.sha256 or 'no trees')[:16]})"),
    ]
    return TrainSummary("Learned ranker training", rows, f'ranker = "{result.folder}"')


def train_ranker(
    data: RankerDataConfig,
    config: RankerTrainConfig,
    out_dir: Path,
    *,
    encoder: Encoder,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> RankerRun:
    """Compute (or read) every benchmark's features, fit, and save the ranker in ``out_dir``.

    Raises:
        ValueError: no --data-root, or no benchmark.
        InsufficientDataError: fewer than :data:`MIN_TRAIN_QUESTIONS` training questions, or no
            validation question to choose the model on.
    """
    if not data.benchmark:
        raise ValueError("give at least one --benchmark")
    adapter = QueryAdapter.load(data.adapter, encoder)
    features_dir = data.features_dir or default_features_dir()
    train: list[FeatureSet] = []
    validation: list[FeatureSet] = []
    sources: dict[str, dict[str, Any]] = {}
    splits: dict[str, dict[str, Any]] = {}
    cached: dict[str, bool] = {}
    for benchmark in data.benchmark:
        name = benchmark.value
        loaded = DataSource(benchmark=benchmark, data=data.folder(benchmark)).questions()
        split = UserSplit.by_share(
            loaded.users(),
            test_share=data.test_share,
            validation_share=data.validation_share,
            seed=data.split_seed,
        )
        splits[name] = split.to_json()
        found, cached[name] = benchmark_features(
            loaded,
            name,
            encoder,
            adapter,
            features_dir=features_dir,
            cache_dir=cache_dir,
            progress=progress,
        )
        parts = {
            "train": found.only(split.train),
            "validation": found.only(split.validation),
            "test": found.only(split.test),
        }
        sources[name] = {
            **{f"{p}_users": len(set(s.users.tolist())) for p, s in parts.items()},
            **{f"{p}_questions": len(s) for p, s in parts.items()},
        }
        train.append(parts["train"])
        validation.append(parts["validation"])
    counts = ", ".join(f"{n}: {s['train_questions']}" for n, s in sources.items())
    found_train = sum(len(s) for s in train)
    if found_train < MIN_TRAIN_QUESTIONS:
        raise InsufficientDataError(
            f"too few training questions to fit a ranker: {found_train} ({counts}); need at least "
            f"{MIN_TRAIN_QUESTIONS}. Add benchmarks or lower --test-share / --validation-share."
        )
    if not any(len(s) for s in validation):
        held = ", ".join(f"{n}: {s['validation_users']} user(s)" for n, s in sources.items())
        raise InsufficientDataError(
            f"no validation question to choose the ranker on ({held}); raise --validation-share."
        )
    fit = fit_ranker(train, validation, config, progress=progress)
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("split-*.json"):  # a benchmark of an earlier run in this folder
        stale.unlink()
    for name, split_json in splits.items():
        (out_dir / f"split-{name}.json").write_text(
            json.dumps({"benchmark": name, **split_json}, indent=2) + "\n", encoding="utf-8"
        )
    info = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "recipe": {
            "params": {**_params(config.seed), "num_boost_round": config.rounds},
            "init_score": "alpha * fused_default",
            "weighting": "each benchmark's training questions weigh the same in all",
            "labels": "the benchmark's graded gold (question.relevant); 0 for other candidates",
            "train": config.model_dump(mode="json"),
            "data": data.model_dump(mode="json", exclude={"features_dir"}),
            "validation": {
                "metric": "nDCG@10 over the candidates, mean over benchmarks, validation users",
                "step": STEP,
                "chosen": {"alpha": fit.alpha, "iterations": fit.iterations},
                "start": round(fit.start, 5),
                "best": round(fit.best, 5),
                "curve": {f"{a:g}": [round(v, 5) for v in values] for a, values in fit.curve.items()},
            },
            "seconds": round(fit.seconds, 1),
        },
        "sources": sources,
        "split": splits,
    }
    save_ranker(out_dir, fit.booster, alpha=fit.alpha, iterations=fit.iterations, info=info)
    sha256 = json.loads((out_dir / INFO_FILE).read_text(encoding="utf-8"))["sha256"]
    return RankerRun(out_dir, fit, sources, sha256, cached)


def fit_ranker(
    train: list[FeatureSet],
    validation: list[FeatureSet],
    config: RankerTrainConfig,
    *,
    progress: Progress | None = None,
) -> RankerFit:
    """Fit one model per alpha on ``train``; keep the (alpha, trees) best on ``validation``.

    Validation is the mean over benchmarks (those with validation questions) of nDCG@10 over the
    candidates; a later setting is kept only if strictly better, so ties go to fewer trees and the
    first alpha.
    """
    task = progress.add_task("ranker: fit", total=len(config.alpha)) if progress else None
    start_time = time.perf_counter()
    best: tuple[float, lightgbm.Booster | None, float, int] = (-1.0, None, config.alpha[0], 0)
    curve: dict[float, list[float]] = {}
    for alpha in config.alpha:
        booster, curve[alpha] = _fit_from(
            train, validation, functools.partial(_fused_start, alpha), config.rounds, config.seed
        )
        for step, value in enumerate(curve[alpha]):
            if value > best[0] + 1e-9:
                best = (value, booster, alpha, step * STEP)
        if progress is not None and task is not None:
            progress.advance(task)
    value, kept, alpha, trees = best
    start = curve[config.alpha[0]][0]  # no trees: the default's order, whatever alpha
    return RankerFit(
        kept if trees else None, alpha, trees, start, value, curve, time.perf_counter() - start_time
    )


def fit_residual(
    train: FeatureSet, validation: FeatureSet, base: RankerModel, *, rounds: int, seed: int = 0
) -> RankerFit:
    """Trees added to ``base``'s scores on ``train``; their number (zero included) chosen on ``validation``.

    What ``personamem improve`` fits to one store: a correction to the ranker it serves, learned
    from that store's questions, which with no trees is the served ranker exactly.
    """
    start_time = time.perf_counter()
    booster, values = _fit_from([train], [validation], base.score, rounds, seed)
    step = max(range(len(values)), key=lambda i: values[i] - 1e-9 * i)  # ties: fewer trees
    return RankerFit(
        booster if step else None,
        base.alpha,
        step * STEP,
        values[0],
        values[step],
        {base.alpha: values},
        time.perf_counter() - start_time,
    )


def _fit_from(
    train: list[FeatureSet],
    validation: list[FeatureSet],
    start: Callable[[np.ndarray], np.ndarray],
    rounds: int,
    seed: int,
) -> tuple[lightgbm.Booster, list[float]]:
    """Trees fitted on top of ``start``'s scores, and validation nDCG@10 at 0, STEP, 2·STEP, ... trees."""
    import lightgbm

    used = [s for s in train if len(s)]
    features = np.concatenate([s.features for s in used])
    # every source's questions weigh the same in all (LightGBM weighs a query by its rows' mean)
    scale = 1000.0 / len(used)
    weights = np.concatenate([np.full(len(s.labels), scale / len(s), np.float32) for s in used])
    dataset = lightgbm.Dataset(
        features,
        np.concatenate([s.labels for s in used]),
        group=np.concatenate([s.groups for s in used]),
        weight=weights,
        feature_name=list(FEATURES),
        init_score=start(features),
        categorical_feature=list(CATEGORICAL),
        free_raw_data=False,
    )
    booster = lightgbm.train(_params(seed), dataset, num_boost_round=rounds)
    scored = [(s, start(s.features)) for s in validation if len(s)]
    values = [
        float(np.mean([s.ndcg10(_score(booster, trees, s.features, begin)) for s, begin in scored]))
        for trees in range(0, rounds + 1, STEP)
    ]
    return booster, values


def _fused_start(alpha: float, features: np.ndarray) -> np.ndarray:
    """The default's order as a score: ``alpha · fused_default``."""
    return alpha * features[:, FEATURES.index("fused_default")]


def _score(booster: lightgbm.Booster, trees: int, features: np.ndarray, start: np.ndarray) -> np.ndarray:
    """What :meth:`RankerModel.score` gives with ``trees`` trees of ``booster`` over ``start``."""
    if not trees:
        return start
    return start + np.asarray(booster.predict(features, num_iteration=trees, num_threads=1))


def _params(seed: int) -> dict[str, Any]:
    return {
        **PARAMS,
        "seed": seed,
        "monotone_constraints": [1 if name in MONOTONE else 0 for name in FEATURES],
    }
