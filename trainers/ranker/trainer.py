"""The learned ranker's fit: features per benchmark, a lambdarank fit, the gate, the model folder.

One run reads every named benchmark, splits each one's users (by default exactly as the shipped
adapter's split, so its test users are never trained on by either), computes each question's
candidates and features through the runtime code (:mod:`personamem.trainers.ranker.data`), and fits
LightGBM lambdarank on all training users together, each benchmark's questions weighing the same in
all. The trees start from the default's own order (``init_score = alpha · fused_default``), with
monotone constraints keeping the default's signals pushing up; validation users choose alpha and the
number of trees (in steps of 10, zero included: then the ranker is the default's order). It writes
the folder :meth:`~personamem.retrieval.ranker.RankerModel.load` reads, with the recipe, counts and
split, plus a ``split-<benchmark>.json`` per benchmark for ``personamem eval --held-out``.

The folder also names where its learned parts serve (:mod:`personamem.retrieval.ranker_gate`), each
as the history shapes of the benchmarks on whose validation users it gained at least
:data:`ADMIT_GAIN` nDCG@10: the query adapter's cosine in the score fusion
(:func:`~personamem.retrieval.ranker.score_fusion`) over the base cosine (``adapter_gate``), then the
kept trees over that score fusion (``gate``). Elsewhere the ranker is the score fusion on the base
cosine: nothing learned on a benchmark but its two fixed weights.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.progress import Progress

from personamem.encoder import Encoder
from personamem.errors import InsufficientDataError
from personamem.retrieval.query_adapter import QueryAdapter
from personamem.retrieval.ranker import CATEGORICAL, FEATURES, INFO_FILE, RankerModel, score_fusion
from personamem.retrieval.ranker_gate import PROFILE, TOLERANCE, RankerGate, calibrate
from personamem.trainers.ranker.config import RankerDataConfig, RankerTrainConfig
from personamem.trainers.ranker.data import FeatureSet, benchmark_features, default_features_dir
from personamem.trainers.ranker.export import save_ranker

if TYPE_CHECKING:
    import lightgbm

__all__ = [
    "ADMIT_GAIN",
    "PARAMS",
    "RankerFit",
    "RankerRun",
    "fit_adapter_gate",
    "fit_gate",
    "fit_ranker",
    "fit_residual",
    "served_start",
    "train_ranker",
]

Start = Callable[["FeatureSet"], np.ndarray]
"""A question set's candidates' scores before the trees being fitted."""

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
ADMIT_GAIN = 0.01
"""The validation nDCG@10 gain over the default's order on a benchmark's users that admits its
history shape to the ranker's gate (below it, a gain is within the noise of a few validation users)."""


@dataclass
class RankerFit:
    """The fit kept by validation, and the curve it was chosen on.

    Attributes:
        booster: the kept alpha's model (all rounds; ``iterations`` of them are used).
        alpha / iterations: the chosen start weight and number of trees (0: the default's order).
        start / best: validation nDCG@10 of the default's order and of the chosen model.
        curve: per alpha, validation nDCG@10 at 0, STEP, 2·STEP, ... trees.
        seconds: wall-clock time of the fits.
        per_source: per benchmark, validation nDCG@10 of the score fusion (no trees) and of the model.
    """

    booster: lightgbm.Booster | None
    alpha: float
    iterations: int
    start: float
    best: float
    curve: dict[float, list[float]]
    seconds: float
    per_source: dict[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


@dataclass
class RankerRun:
    """What a run wrote: the folder, the fit, the per-benchmark counts and the model's sha256."""

    folder: Path
    fit: RankerFit
    sources: dict[str, dict[str, Any]]
    sha256: str | None  # None: no trees kept
    cached: dict[str, bool]
    admitted: list[str] = dataclasses.field(default_factory=list)
    adapting: list[str] = dataclasses.field(default_factory=list)  # the adapter gate's benchmarks


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
    profiles: dict[str, np.ndarray] = {}
    for benchmark in data.benchmark:
        name = benchmark.value
        loaded, split = data.split(benchmark)
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
        profiles[name] = np.array(list(found.user_profiles().values()), np.float32).reshape(-1, len(PROFILE))
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
    adapter_gate, adapter_gains = fit_adapter_gate(validation, profiles)
    adapting = [region.benchmark for region in adapter_gate.regions]
    fit = fit_ranker(train, validation, config, adapting=adapting, progress=progress)
    gate, admitted = fit_gate(fit, profiles)
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
                "per_benchmark": {n: [round(a, 5), round(b, 5)] for n, (a, b) in fit.per_source.items()},
            },
            "adapter_gate": {
                "admitted": f"benchmarks whose validation nDCG@10 the adapter's cosine raised by >= "
                f"{ADMIT_GAIN} over the base cosine in the score fusion",
                "per_benchmark": {n: [round(a, 5), round(b, 5)] for n, (a, b) in adapter_gains.items()},
                "calibration": calibrate(profiles, adapting),
            },
            "gate": {
                "admitted": f"benchmarks whose validation nDCG@10 the trees raised by >= {ADMIT_GAIN} "
                "over the score fusion",
                "region": f"each admitted benchmark's users' range of each statistic, +- {TOLERANCE} "
                "pooled std (every benchmark's users pooled)",
                "calibration": calibrate(profiles, admitted),
            },
            "seconds": round(fit.seconds, 1),
        },
        "sources": sources,
        "split": splits,
        "gate": gate.to_json(),
        "adapter_gate": adapter_gate.to_json(),
    }
    save_ranker(out_dir, fit.booster, alpha=fit.alpha, iterations=fit.iterations, info=info)
    sha256 = json.loads((out_dir / INFO_FILE).read_text(encoding="utf-8"))["sha256"]
    return RankerRun(out_dir, fit, sources, sha256, cached, admitted, adapting)


def fit_adapter_gate(
    validation: list[FeatureSet], profiles: dict[str, np.ndarray]
) -> tuple[RankerGate, dict[str, tuple[float, float]]]:
    """Where the score fusion reads the query adapter's cosine: the benchmarks it gained on.

    Per benchmark with validation users, nDCG@10 of the score fusion on the base cosine and on the
    adapter's; a gain of :data:`ADMIT_GAIN` admits the benchmark's history shape. An adapter helps
    where it was trained and not reliably elsewhere (leave-one-benchmark-out, docs/RESULTS.md), so a
    history unlike every admitted benchmark's gets the base cosine.
    """
    gains = {
        s.source: (s.ndcg10(score_fusion(s.features)), s.ndcg10(score_fusion(s.features, adapted=True)))
        for s in validation
        if len(s)
    }
    admitted = [name for name, (base, adapted) in gains.items() if adapted - base >= ADMIT_GAIN]
    return RankerGate.fit(profiles, admitted), gains


def fit_gate(fit: RankerFit, profiles: dict[str, np.ndarray]) -> tuple[RankerGate, list[str]]:
    """The gate of ``fit``'s trees: the history shapes of the benchmarks whose validation they raised.

    ``profiles``: per benchmark, its users' history shapes (all of them: a shape reads no label).
    """
    admitted = [
        name
        for name, (before, after) in fit.per_source.items()
        if fit.iterations and after - before >= ADMIT_GAIN
    ]
    return RankerGate.fit(profiles, admitted), admitted


def fit_ranker(
    train: list[FeatureSet],
    validation: list[FeatureSet],
    config: RankerTrainConfig,
    *,
    adapting: Collection[str] = (),
    progress: Progress | None = None,
) -> RankerFit:
    """Fit one model per alpha on ``train``; keep the (alpha, trees) best on ``validation``.

    Validation is the mean over benchmarks (those with validation questions) of nDCG@10 over the
    candidates; a later setting is kept only if strictly better, so ties go to fewer trees and the
    first alpha. ``adapting``: the benchmarks whose score fusion (what the trees are judged against
    per benchmark) reads the adapter's cosine.
    """
    task = progress.add_task("ranker: fit", total=len(config.alpha)) if progress else None
    start_time = time.perf_counter()
    best: tuple[float, lightgbm.Booster | None, float, int] = (-1.0, None, config.alpha[0], 0)
    curve: dict[float, list[float]] = {}
    for alpha in config.alpha:
        booster, curve[alpha] = _fit_from(train, validation, _fused_start(alpha), config.rounds, config.seed)
        for step, value in enumerate(curve[alpha]):
            if value > best[0] + 1e-9:
                best = (value, booster, alpha, step * STEP)
        if progress is not None and task is not None:
            progress.advance(task)
    value, kept, alpha, trees = best
    start = curve[config.alpha[0]][0]  # no trees: the default's order, whatever alpha
    begin = _fused_start(alpha)
    per_source = {  # the trees against what is served without them
        s.source: (
            s.ndcg10(score_fusion(s.features, adapted=s.source in adapting)),
            s.ndcg10(_score(kept, trees, s.features, begin(s))),
        )
        for s in validation
        if len(s)
    }
    return RankerFit(
        kept if trees else None,
        alpha,
        trees,
        start,
        value,
        curve,
        time.perf_counter() - start_time,
        per_source,
    )


def fit_residual(
    train: FeatureSet, validation: FeatureSet, base: RankerModel, *, rounds: int, seed: int = 0
) -> RankerFit:
    """Trees added to ``base``'s scores on ``train``; their number (zero included) chosen on ``validation``.

    What ``personamem improve`` fits to one store: a correction to the ranker it serves, learned
    from that store's questions, which with no trees is the served ranker exactly.
    """
    start_time = time.perf_counter()
    booster, values = _fit_from([train], [validation], served_start(base), rounds, seed)
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


def served_start(base: RankerModel) -> Start:
    """``base``'s scores as it serves each question's user: its root's trees where its gate admits them."""

    def start(found: FeatureSet) -> np.ndarray:
        adapted = np.repeat(base.adapts(found.profiles), found.groups)
        with_trees = base.score(found.features, trees=True, adapted=adapted)
        without = base.score(found.features, trees=False, adapted=adapted)
        return np.where(np.repeat(base.serves(found.profiles), found.groups), with_trees, without)

    return start


def _fit_from(
    train: list[FeatureSet],
    validation: list[FeatureSet],
    start: Start,
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
        init_score=np.concatenate([start(s) for s in used]),
        categorical_feature=list(CATEGORICAL),
        free_raw_data=False,
    )
    booster = lightgbm.train(_params(seed), dataset, num_boost_round=rounds)
    scored = [(s, start(s)) for s in validation if len(s)]
    values = [
        float(np.mean([s.ndcg10(_score(booster, trees, s.features, begin)) for s, begin in scored]))
        for trees in range(0, rounds + 1, STEP)
    ]
    return booster, values


def _fused_start(alpha: float) -> Start:
    """The default's order as a score: ``alpha · fused_default``."""
    column = FEATURES.index("fused_default")
    return lambda found: alpha * found.features[:, column]


def _score(
    booster: lightgbm.Booster | None, trees: int, features: np.ndarray, start: np.ndarray
) -> np.ndarray:
    """What :meth:`RankerModel.score` gives with ``trees`` trees of ``booster`` over ``start``."""
    if not trees or booster is None:
        return start
    return start + np.asarray(booster.predict(features, num_iteration=trees, num_threads=1))


def _params(seed: int) -> dict[str, Any]:
    return {
        **PARAMS,
        "seed": seed,
        "monotone_constraints": [1 if name in MONOTONE else 0 for name in FEATURES],
    }
