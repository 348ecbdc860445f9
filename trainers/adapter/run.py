"""``personamem train adapter`` as a function: read the sources, split users, fit, save the folder.

One run reads every named benchmark (or one store), splits each one's users, trains on all training
users together and writes the adapter with its recipe, data counts and split, plus a
``split-<benchmark>.json`` per benchmark for ``personamem eval --held-out``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import Progress

from personamem.datasets import UserSplit
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.errors import InsufficientDataError
from personamem.llm.base import FrozenLLM
from personamem.retrieval.query_adapter import QueryAdapter, save_query_adapter
from personamem.store import Store
from personamem.trainers.adapter.config import AdapterDataConfig, AdapterRunConfig, AdapterTrainConfig
from personamem.trainers.adapter.data import QuerySet, query_set_from_benchmark
from personamem.trainers.adapter.synthetic import synthetic_queries
from personamem.trainers.run import TrainSummary

if TYPE_CHECKING:
    from personamem.trainers.adapter.trainer import AdapterFit

__all__ = ["AdapterRun", "run", "store_query_sets", "train_adapter"]

MIN_TRAIN_QUERIES = 32
"""Fewer training questions than this fit noise: the run refuses with the counts."""


@dataclass
class AdapterRun:
    """What a run wrote: the folder, the fit, and the per-source counts."""

    folder: Path
    fit: AdapterFit
    sources: list[dict[str, Any]]
    sha256: str


def run(config: AdapterRunConfig, *, progress: Progress | None = None) -> TrainSummary:
    """Query adapter: a small map on the query vector, fitted on benchmarks' training users or a store.

    From benchmarks it learns from gold labels (or, with --labels synthetic, from questions the LLM
    writes); from --from-store it learns label-free from the store's own records. Records keep their
    vectors: nothing is re-indexed.

    Raises:
        InsufficientDataError: too few training questions.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.llm.load import load_llm

    data, train = config.data, config.train
    needs_llm = data.from_store is not None or data.labels == "synthetic"
    result = train_adapter(
        data,
        train,
        config.out_dir,
        encoder=default_encoder(),
        llm=load_llm(data.llm) if needs_llm else None,
        cache_dir=default_vector_cache(),
        resume=config.resume,
        progress=progress,
    )
    rows = [
        (
            f"{source['source']}: questions (users) train / validation",
            f"{source['queries']} ({source['users']}) / "
            f"{source['validation_queries']} ({source['validation_users']})",
        )
        for source in result.sources
    ]
    fit = result.fit
    if fit.best_validation is not None and fit.start_validation is not None:
        rows.append(
            (
                f"validation recall@{train.k}: start → best (step)",
                f"{fit.start_validation:.3f} → {fit.best_validation:.3f} ({fit.best_step})",
            )
        )
    rows += [
        ("wall-clock seconds", f"{fit.seconds:.0f}"),
        ("adapter (sha256)", f"{result.folder} ({result.sha256[:16]})"),
    ]
    return TrainSummary("Query adapter training", rows, f'query_encoder = "adapter:{result.folder}"')


def train_adapter(
    data: AdapterDataConfig,
    config: AdapterTrainConfig,
    out_dir: Path,
    *,
    encoder: Encoder,
    llm: FrozenLLM | None = None,
    cache_dir: Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
) -> AdapterRun:
    """Train and save an adapter in ``out_dir`` from ``data``'s sources.

    ``llm`` writes synthetic questions (``--from-store``, or ``labels = synthetic``).

    Raises:
        InsufficientDataError: fewer than :data:`MIN_TRAIN_QUERIES` training questions.
        CheckpointError: ``config.init`` names no adapter for this encoder.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    train: list[QuerySet] = []
    validation: list[QuerySet] = []
    splits: dict[str, dict[str, Any]] = {}
    if data.from_store is not None:
        writer = _require_llm(llm)
        store = Store.open(data.from_store, encoder=encoder)
        try:
            # a store has no test users (its test is the next traffic): the held-out share validates
            split = UserSplit.by_share(
                store.users(),
                test_share=data.validation_share or 0.15,
                validation_share=0,
                seed=data.split_seed,
            )
            fitted, held = store_query_sets(
                store, writer, split.train, split.test, progress=progress, **_synthetic(data)
            )
        finally:
            store.close()
        train.append(fitted)
        validation.append(held)
        # counts, not ids: the adapter folder lives outside the store, where forget would not reach an id
        splits["store"] = {"train_users": len(split.train), "validation_users": len(split.test)}
    for benchmark in data.benchmark:
        loaded, split = data.split(benchmark)
        splits[benchmark.value] = split.to_json()
        (out_dir / f"split-{benchmark.value}.json").write_text(
            json.dumps({"benchmark": benchmark.value, **split.to_json()}, indent=2) + "\n", encoding="utf-8"
        )
        if data.labels == "gold":
            queries = query_set_from_benchmark(loaded, encoder, source=benchmark.value, cache_dir=cache_dir)
            train.append(queries.only(split.train))
            validation.append(queries.only(split.validation))
            continue
        writer = _require_llm(llm)
        # beside the runs, so the questions cached in it serve every seed and a resumed run
        store = build_store(
            loaded, out_dir.parent / ".stores" / benchmark.value, encoder, cache_dir=cache_dir
        )
        try:
            fitted, held = store_query_sets(
                store, writer, split.train, split.validation, progress=progress, **_synthetic(data)
            )
        finally:
            store.close()
        fitted.source = held.source = f"{benchmark.value} (synthetic)"
        train.append(fitted)
        validation.append(held)
    found = sum(len(s) for s in train)
    if found < MIN_TRAIN_QUERIES:
        counts = ", ".join(f"{s.source}: {len(s)}" for s in train)
        raise InsufficientDataError(
            f"too few training questions to fit an adapter: {found} ({counts}); need at least "
            f"{MIN_TRAIN_QUERIES}. Add users or records (or raise --synthetic-per-user)."
        )
    from personamem.trainers.adapter.trainer import fit_adapter  # torch, loaded when training

    init = QueryAdapter.load(config.init, encoder).weight if config.init else None
    fit = fit_adapter(train, validation, config, init=init, out_dir=out_dir, resume=resume, progress=progress)
    sources = [
        {**t.describe(), "validation_queries": len(v), "validation_users": len(set(v.users))}
        for t, v in zip(train, validation, strict=True)
    ]
    info = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "recipe": {"train": config.model_dump(mode="json"), "data": data.model_dump(mode="json")},
        "sources": sources,
        "split": splits,
        "validation": {
            "metric": f"recall@{config.k}",
            "start": fit.start_validation,
            "best": fit.best_validation,
            "best_step": fit.best_step,
            "curve": fit.curve,
        },
        "seconds": round(fit.seconds, 1),
    }
    digest = save_query_adapter(out_dir, fit.weight, record_encoder=encoder, info=info)
    return AdapterRun(out_dir, fit, sources, digest)


def store_query_sets(
    store: Store,
    llm: FrozenLLM,
    train_users: list[str],
    validation_users: list[str],
    *,
    per_user: int,
    max_total: int,
    consistency_k: int | None,
    seed: int,
    progress: Progress | None = None,
) -> tuple[QuerySet, QuerySet]:
    """Synthetic (question, record) pairs for the training and the validation users of ``store``.

    ``max_total`` is shared between the two sides in proportion to their users.
    """
    total = len(train_users) + len(validation_users)
    sets = []
    for users in (train_users, validation_users):
        budget = max(1, round(max_total * len(users) / max(total, 1)))
        sets.append(
            synthetic_queries(
                store,
                llm,
                users,
                per_user=per_user,
                max_total=budget,
                consistency_k=consistency_k,
                seed=seed,
                progress=progress,
            )
        )
    return sets[0], sets[1]


def _synthetic(data: AdapterDataConfig) -> dict[str, Any]:
    return {
        "per_user": data.synthetic_per_user,
        "max_total": data.max_synthetic,
        "consistency_k": data.consistency_k,
        "seed": data.split_seed,
    }


def _require_llm(llm: FrozenLLM | None) -> FrozenLLM:
    if llm is None:
        raise ValueError("synthetic questions need an LLM to write them")
    return llm
