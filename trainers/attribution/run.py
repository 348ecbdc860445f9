"""``personamem train attribution`` as a function: serve each question, label what its answer used, fit.

Every named benchmark goes into a real store (as the harness builds it); each question with a
reference answer and gold records is served by the package default's first stage (its top
``--served``), and each served record is one example: its :func:`~personamem.attribution.answer_signals`
against the reference answer, labelled by whether it is gold. A logistic regression (Newton steps,
L2 on the weights) is fitted on the training users, the threshold is the lowest at which the
validation users' precision reaches ``--precision``, and the held-out users report precision and
recall (of the gold among the served).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.attribution import SIGNALS, Attribution, answer_signals
from personamem.datasets.benchmark import Benchmark
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.errors import InsufficientDataError
from personamem.methods import method_named
from personamem.trainers.attribution.config import (
    AttributionDataConfig,
    AttributionRunConfig,
    AttributionTrainConfig,
)
from personamem.trainers.run import TrainSummary

__all__ = ["Pairs", "fit_attribution", "run", "served_pairs"]

FILE = "attribution.json"


@dataclass
class Pairs:
    """(answer, served record) examples: signals, whether the record is gold, and the asking user."""

    signals: np.ndarray
    gold: np.ndarray
    users: np.ndarray

    def only(self, users: set[str]) -> Pairs:
        """The pairs of ``users``' questions."""
        keep = np.isin(self.users, list(users))
        return Pairs(self.signals[keep], self.gold[keep], self.users[keep])


def run(config: AttributionRunConfig, *, progress: Progress | None = None) -> TrainSummary:
    """Answer attribution: which served records an answer used, from reference answers and gold evidence.

    Raises:
        InsufficientDataError: too few answered questions on the training and validation users.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder

    model, report = fit_attribution(
        config.data,
        config.train,
        encoder=default_encoder(),
        cache_dir=default_vector_cache(),
        progress=progress,
    )
    config.out_dir.mkdir(parents=True, exist_ok=True)
    (config.out_dir / FILE).write_text(json.dumps(model.to_json(), indent=1) + "\n", encoding="utf-8")
    rows = [
        (f"{part}: {k}", f"{v:.3f}" if isinstance(v, float) else str(v))
        for part, r in report.items()
        for k, v in r.items()
    ]
    return TrainSummary("Answer attribution", rows, f"copy {config.out_dir / FILE} to personamem/data/{FILE}")


def served_pairs(
    benchmark: Benchmark, encoder: Encoder, served: int, *, cache_dir: Path | None, progress: Progress | None
) -> Pairs:
    """Every answered, gold-labelled question's served records as examples, over a real store."""
    questions = [q for q in benchmark.questions if q.answer and q.answer.strip() and q.relevant]
    signals, gold, users = [], [], []
    with tempfile.TemporaryDirectory(prefix="personamem-attribution-") as folder:
        store = build_store(benchmark, Path(folder), encoder, cache_dir=cache_dir, progress=progress)
        try:
            retriever = method_named("default", None).build(store, 0)
            task = progress.add_task("attribution: serve", total=len(questions)) if progress else None
            for question in questions:
                hits = retriever.search(question.user_id, question.text, served)
                records = [hit.record for hit in hits]
                vectors = store.record_vectors(question.user_id, [r.id for r in records])
                assert question.answer is not None
                signals.append(answer_signals(question.text, question.answer, records, vectors, encoder))
                gold += [question.relevant.get(r.id, 0) > 0 for r in records]
                users += [question.user_id] * len(records)
                if progress is not None and task is not None:
                    progress.advance(task)
        finally:
            store.close()
    return Pairs(
        np.concatenate(signals) if signals else np.zeros((0, len(SIGNALS)), np.float32),
        np.array(gold, bool),
        np.array(users, str),
    )


def fit_attribution(
    data: AttributionDataConfig,
    config: AttributionTrainConfig,
    *,
    encoder: Encoder,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> tuple[Attribution, dict[str, dict[str, Any]]]:
    """The fitted model and, per part (train, validation, test, out of fold), its precision, recall, counts.

    The model is fitted on the training and validation users together; the threshold is the lowest
    at which their out-of-fold precision (each user scored by a model fitted without them) reaches
    the target, so the held-out users judge both.

    Raises:
        InsufficientDataError: the training and validation users' served records are all gold or
            none is, or they are fewer than two users (the threshold is chosen across users).
    """
    parts: dict[str, list[Pairs]] = {"train": [], "validation": [], "test": []}
    by_benchmark: dict[str, Pairs] = {}
    for benchmark in data.benchmark:
        loaded, split = data.split(benchmark)
        pairs = served_pairs(loaded, encoder, data.served, cache_dir=cache_dir, progress=progress)
        for part, users in (("train", split.train), ("validation", split.validation), ("test", split.test)):
            parts[part].append(pairs.only(set(users)))
        by_benchmark[benchmark.value] = pairs.only(set(split.test))
    joined = {
        p: Pairs(*(np.concatenate([getattr(s, f) for s in v]) for f in ("signals", "gold", "users")))
        for p, v in parts.items()
    }
    fitting = Pairs(
        *(
            np.concatenate([getattr(joined[p], f) for p in ("train", "validation")])
            for f in ("signals", "gold", "users")
        )
    )
    if not fitting.gold.any() or fitting.gold.all() or len(set(fitting.users.tolist())) < 2:
        raise InsufficientDataError(
            "too few answered questions to fit attribution: "
            + ", ".join(f"{p} {len(s.gold)} pairs ({int(s.gold.sum())} gold)" for p, s in joined.items())
            + "; the training and validation users need gold and other served records, two users at least"
        )
    held = _out_of_fold(fitting, config.l2)
    threshold = _threshold(held, fitting.gold, config.precision)
    weights, bias = _logistic(fitting.signals, fitting.gold, config.l2)
    probe = Attribution(tuple(map(float, weights)), float(bias), threshold, {})
    report = {part: _quality(probe.probability(s.signals) >= threshold, s.gold) for part, s in joined.items()}
    report["out of fold"] = _quality(held >= threshold, fitting.gold)
    for name, pairs in by_benchmark.items():
        report[f"test, {name}"] = _quality(probe.probability(pairs.signals) >= threshold, pairs.gold)
    info = {
        "recipe": {
            "data": data.model_dump(mode="json"),
            "train": config.model_dump(mode="json"),
            "model": "logistic regression (Newton steps) on training and validation users; threshold: "
            "the lowest whose out-of-fold precision (users in folds) reaches the target",
        },
        "quality": report,
    }
    return Attribution(probe.weights, probe.bias, threshold, info), report


def _out_of_fold(pairs: Pairs, l2: float, folds: int = 5) -> np.ndarray:
    """Each pair's probability from a model fitted without its user's fold (users dealt round-robin)."""
    users = sorted(set(pairs.users.tolist()))
    fold_of = {u: i % folds for i, u in enumerate(users)}
    which = np.array([fold_of[u] for u in pairs.users])
    held = np.zeros(len(pairs.gold))
    for fold in range(min(folds, len(users))):
        out = which == fold
        weights, bias = _logistic(pairs.signals[~out], pairs.gold[~out], l2)
        held[out] = 1.0 / (1.0 + np.exp(-(pairs.signals[out] @ weights + bias)))
    return held


def _logistic(x: np.ndarray, y: np.ndarray, l2: float, steps: int = 50) -> tuple[np.ndarray, float]:
    """Weights and bias minimizing the log loss plus ``l2``·|w|², by Newton's method."""
    design = np.hstack([x.astype(np.float64), np.ones((len(x), 1))])
    theta = np.zeros(design.shape[1])
    penalty = np.diag([l2] * x.shape[1] + [0.0])
    target = y.astype(np.float64)
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-(design @ theta)))
        gradient = design.T @ (p - target) + penalty @ theta
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(len(theta))
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.abs(step).max() < 1e-8:
            break
    return theta[:-1], float(theta[-1])


def _threshold(probability: np.ndarray, gold: np.ndarray, precision: float) -> float:
    """The lowest probability threshold whose precision on these pairs reaches ``precision`` (else 1)."""
    for threshold in np.sort(np.unique(probability)):
        chosen = probability >= threshold
        if chosen.any() and gold[chosen].mean() >= precision:
            return float(threshold)
    return 1.0


def _quality(chosen: np.ndarray, gold: np.ndarray) -> dict[str, Any]:
    """Precision and recall (of the gold among the served) of ``chosen``, with the counts."""
    hit = int((chosen & gold).sum())
    return {
        "precision": hit / int(chosen.sum()) if chosen.any() else float("nan"),
        "recall": hit / int(gold.sum()) if gold.any() else float("nan"),
        "pairs": len(gold),
        "gold": int(gold.sum()),
        "attributed": int(chosen.sum()),
    }
