"""``personamem improve``: fit the query adapter and fusion weight to a store, and go live only if better.

A deployment schedules one command. It reads what the store has, feedback naming the records that
answers used where there is enough of it, else questions the packaged LLM writes for sampled
records; fits an adapter (starting from the shipped one where it fits the store's encoder) on most
training users; picks hybrid's dense weight on the training users left out of that fit; then runs
the live pipeline and the candidate through the real store on the validation users' questions.
The candidate replaces the pipeline file only when its recall@k is higher; the previous file is
kept for ``--rollback``. Synthetic questions are cached in the store and the fit keeps its state,
so an interrupted run resumes.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.datasets.traffic import accepted
from personamem.errors import ConfigError, InsufficientDataError
from personamem.llm.base import FrozenLLM
from personamem.memory import PersonaMem
from personamem.pipeline import Pipeline
from personamem.pipeline.config import (
    ADAPTER_FUSION,
    DEFAULT_ADAPTER,
    PipelineConfig,
    pipeline_config,
    read_pipeline_table,
)
from personamem.retrieval.query_adapter import QueryAdapter, fits, save_query_adapter
from personamem.trainers.adapter.config import AdapterTrainConfig, ImproveConfig
from personamem.trainers.adapter.data import QuerySet
from personamem.trainers.adapter.run import store_query_sets
from personamem.trainers.adapter.trainer import fit_adapter

__all__ = ["ImproveConfig", "ImproveResult", "improve", "rollback"]

_NO_FILE = "# personamem improve: no pipeline file existed before; rolling back removes it\n"


@dataclass
class ImproveResult:
    """What improve measured and did.

    Attributes:
        signal: ``feedback`` or ``synthetic``; counts: users and questions on each side.
        before / after: the live and the candidate pipeline's settings and validation scores.
        live: whether the candidate went live; config_file: the pipeline file; previous: its saved copy.
    """

    signal: str
    counts: dict[str, int]
    before: dict[str, Any]
    after: dict[str, Any]
    live: bool
    config_file: Path
    adapter: Path | None = None
    previous: Path | None = None
    notes: list[str] = field(default_factory=list)


def improve(
    memory: PersonaMem,
    config_file: Path,
    settings: ImproveConfig | None = None,
    *,
    adapters_dir: Path | None = None,
    llm: FrozenLLM | None = None,
    progress: Progress | None = None,
) -> ImproveResult:
    """Fit, validate and (when better) write a new pipeline file for ``memory``'s store.

    Args:
        memory: the live memory; its ``config`` is the live pipeline (read from ``config_file``).
        config_file: the pipeline TOML file that serving reads (created if missing).
        adapters_dir: where fitted adapters are kept (default: ``personamem-adapters`` beside the file).
        settings: what it learns from and spends (default: :class:`ImproveConfig`'s defaults).
        llm: writes synthetic questions (default: ``settings.llm``, loaded only if needed).
        progress: shows each step's progress.

    Raises:
        InsufficientDataError: too few users or questions; the message gives the counts.
        ConfigError: a live pipeline with a query personalizer (it builds its own query vector).
    """
    settings = settings or ImproveConfig()
    live = memory.config
    if live.personalizer != "none":
        raise ConfigError(
            f"{config_file}: the live pipeline's personalizer {live.personalizer!r} builds its own query "
            "vector; improve fits a query adapter and fusion, for pipelines without a personalizer"
        )
    store = memory.store
    users = store.users()
    if len(users) < settings.min_users:
        raise InsufficientDataError(
            f"too few users to improve on: {len(users)} with records; need at least {settings.min_users} "
            f"(some to train on, {settings.validation_share:.0%} to validate on)"
        )
    picker = random.Random(settings.seed)
    shuffled = sorted(users)
    picker.shuffle(shuffled)
    held = max(1, round(settings.validation_share * len(shuffled)))
    validation_users, train_users = sorted(shuffled[:held]), sorted(shuffled[held:])
    train, validation, signal = _feedback_sets(memory, train_users, validation_users, settings)
    if signal != "feedback":
        from personamem.llm.load import load_llm

        llm = llm or load_llm(settings.llm)
        train, validation = store_query_sets(
            store,
            llm,
            train_users,
            validation_users,
            per_user=settings.synthetic_per_user,
            max_total=settings.max_synthetic,
            consistency_k=settings.consistency_k,
            seed=settings.seed,
            progress=progress,
        )
    counts = {
        "users": len(users),
        "train_users": len(set(train.users)),
        "train_questions": len(train),
        "validation_users": len(set(validation.users)),
        "validation_questions": len(validation),
    }
    if len(train) < settings.min_train_questions or len(validation) < settings.min_validation_questions:
        raise InsufficientDataError(
            f"too little data to improve on: {len(train)} training and {len(validation)} validation "
            f"question(s) ({signal}) from {len(users)} user(s); need at least "
            f"{settings.min_train_questions} and {settings.min_validation_questions}. Add records or users, "
            "or log calls with feedback (log_interactions = true, then PersonaMem.feedback with "
            "used_record_ids)."
        )
    adapters_dir = (adapters_dir or config_file.resolve().parent / "personamem-adapters").resolve()
    shipped = fits(DEFAULT_ADAPTER, store.encoder)
    # the dense weight is chosen on training users the adapter did not fit: on its own questions
    # every weight scores alike (the map has learned them), and a tie says nothing
    tune_users = set(train_users[:: max(2, round(1 / settings.tune_share))])
    fitting, tuning = train.only(sorted(set(train.users) - tune_users)), train.only(sorted(tune_users))
    if not len(fitting):  # every question from a left-out user: fit on all, keep the shipped weight
        fitting, tuning = train, train.only([])
    fit = fit_adapter(
        [fitting],
        [],
        AdapterTrainConfig(steps=settings.steps, seed=settings.seed),
        init=QueryAdapter.load(DEFAULT_ADAPTER, store.encoder).weight if shipped else None,
        out_dir=adapters_dir / ".work",
        resume=True,
        progress=progress,
    )
    created = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    folder = adapters_dir / created
    recipe = {"improve": settings.model_dump(mode="json"), "signal": signal}
    save_query_adapter(
        folder,
        fit.weight,
        record_encoder=store.encoder,
        info={
            "created": created,
            "recipe": {**recipe, "init": DEFAULT_ADAPTER if shipped else "identity"},
            "sources": [fitting.describe()],
            # counts, not ids: this file lives outside the store, where forget would not reach an id
            "split": {"store": {"train_users": len(train_users), "validation_users": len(validation_users)}},
        },
    )
    encoder = f"adapter:{folder}"
    fitted = ("query_encoder", "dense_weight", "rrf_k", "chosen_by")
    fixed = {k: v for k, v in live.model_dump().items() if k not in fitted}
    rrf_k = ADAPTER_FUSION[1]
    candidates = {
        w: pipeline_config(
            {
                **fixed,
                "first_stage": "hybrid" if w < 1 else "dense",
                "query_encoder": encoder,
                "dense_weight": w,
                "rrf_k": rrf_k,
            }
        )
        for w in settings.weights
    }
    sample = _subset(tuning, settings.max_weight_questions, settings.seed)
    scored = {
        w: _mean(_recalls(memory, config, sample, settings.k, progress, f"dense weight {w}"))
        for w, config in candidates.items()
        if len(sample)
    }
    # ties (and no tuning question at all) go to the weight nearest the shipped one
    nearest = {w: -abs(w - ADAPTER_FUSION[0]) for w in candidates}
    weight = max(candidates, key=lambda w: (scored.get(w, 0.0), nearest[w]))
    chosen = candidates[weight]
    before_scores = np.array(_recalls(memory, live, validation, settings.k, progress, "live pipeline"))
    after_scores = np.array(_recalls(memory, chosen, validation, settings.k, progress, "candidate"))
    before, after = float(before_scores.mean()), float(after_scores.mean())
    metric = f"recall@{settings.k}"
    result = ImproveResult(
        signal,
        counts,
        {**_served(memory.pipeline()), metric: before},
        {**_stage(chosen, encoder), metric: after},
        live=after > before,
        config_file=config_file,
        adapter=folder,
        notes=[
            f"dense weight chosen on {len(sample)} question(s) of {len(tune_users)} training user(s) "
            "the adapter was not fitted on: " + ", ".join(f"{w}: {score:.3f}" for w, score in scored.items()),
            "validation questions better / worse with the candidate: "
            f"{int((after_scores > before_scores).sum())} / {int((after_scores < before_scores).sum())}",
        ],
    )
    if result.live:
        chosen_by = (
            f"personamem improve {created}: adapter and dense weight {weight} fitted on {len(train)} "
            f"{signal} question(s) of {counts['train_users']} user(s); validation {metric} "
            f"{before:.3f} -> {after:.3f} on {len(validation)} question(s) of "
            f"{counts['validation_users']} user(s)"
        )
        table = read_pipeline_table(config_file) if config_file.is_file() else {}
        result.previous = _write_live(
            config_file, {**table, **_stage(chosen, encoder), "chosen_by": chosen_by}
        )
        memory.config = chosen.model_copy(update={"chosen_by": chosen_by})
    return result


def rollback(config_file: Path) -> Path:
    """Put back the pipeline file that the last ``improve`` replaced; returns the file restored.

    Raises:
        ConfigError: nothing to roll back (no saved previous file).
    """
    previous = _previous(config_file)
    if not previous.is_file():
        raise ConfigError(f"{config_file}: nothing to roll back (no {previous.name} beside it)")
    text = previous.read_text(encoding="utf-8")
    if text == _NO_FILE:
        config_file.unlink(missing_ok=True)
    else:
        staged = config_file.with_name(config_file.name + ".partial")
        staged.write_text(text, encoding="utf-8")
        staged.replace(config_file)
    previous.unlink()
    return config_file


def _previous(config_file: Path) -> Path:
    return config_file.with_name(config_file.name + ".prev")


def _write_live(config_file: Path, table: dict[str, Any]) -> Path:
    """Keep the current file as ``<file>.prev`` and write ``table`` as the new ``[pipeline]``."""
    previous = _previous(config_file)
    previous.write_text(
        config_file.read_text(encoding="utf-8") if config_file.is_file() else _NO_FILE, encoding="utf-8"
    )
    lines = [
        "# written by personamem improve; 'personamem improve --rollback' puts back the previous file",
        "[pipeline]",
    ]
    for key, value in table.items():
        if value is not None:
            lines.append(f"{key} = {_toml(value)}")
    staged = config_file.with_name(config_file.name + ".partial")
    staged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    pipeline_config(
        read_pipeline_table(staged), source=str(staged)
    )  # never put a file live that fails to load
    staged.replace(config_file)
    return previous


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    raise ConfigError(f"cannot write {value!r} to the pipeline file")


def _stage(config: PipelineConfig, encoder: str) -> dict[str, Any]:
    """The first-stage fields improve fits, as the pipeline file writes them."""
    return {
        "first_stage": config.first_stage,
        "query_encoder": encoder,
        "dense_weight": config.dense_weight,
        "rrf_k": config.rrf_k,
    }


def _served(pipeline: Pipeline) -> dict[str, Any]:
    return {k: v for k, v in pipeline.first_stage.items() if k != "chosen_by"}


def _feedback_sets(
    memory: PersonaMem, train_users: list[str], validation_users: list[str], settings: ImproveConfig
) -> tuple[QuerySet, QuerySet, str]:
    """Feedback-labelled questions on each side, or two empty sets and ``synthetic`` when too few."""
    usable = [i for i in memory.interactions() if accepted(i, None) and i.used]
    dim = memory.store.encoder.dim
    empty = QuerySet("feedback", [], np.zeros((0, dim), "float32"), [], {})
    if len(usable) < settings.min_feedback:
        return empty, empty, "synthetic"
    sets = []
    for users in (set(train_users), set(validation_users)):
        chosen = [i for i in usable if i.user_id in users]
        corpora: dict[str, np.ndarray] = {}
        record_ids: dict[str, list[str]] = {}
        index: dict[str, dict[str, int]] = {}  # user -> record id -> corpus row
        for user in sorted({i.user_id for i in chosen}):
            records, vectors = memory.store.vectors(user)
            corpora[user] = np.asarray(vectors, dtype=np.float32)
            record_ids[user] = [r.id for r in records]
            index[user] = {r.id: n for n, r in enumerate(records)}
        kept_users, texts, gold = [], [], []
        for interaction in chosen:
            rows = [
                index[interaction.user_id][r] for r in interaction.used if r in index[interaction.user_id]
            ]
            if rows:
                kept_users.append(interaction.user_id)
                texts.append(interaction.query)
                gold.append(np.asarray(sorted(set(rows)), dtype=np.int64))
        queries = memory.store.encoder.encode(texts) if texts else np.zeros((0, dim), "float32")
        sets.append(
            QuerySet("feedback", kept_users, np.asarray(queries, "float32"), gold, corpora, texts, record_ids)
        )
    return sets[0], sets[1], "feedback"


def _subset(queries: QuerySet, n: int, seed: int) -> QuerySet:
    if len(queries) <= n:
        return queries
    return queries.take(sorted(random.Random(seed).sample(range(len(queries)), n)))


def _recalls(
    memory: PersonaMem,
    config: PipelineConfig,
    queries: QuerySet,
    k: int,
    progress: Progress | None,
    label: str,
) -> list[float]:
    """Recall@k of each question, searched through ``config``'s pipeline on the real store (unlogged)."""
    pipeline = memory.pipeline(config.model_copy(update={"log_interactions": False}))
    task = progress.add_task(f"validate: {label}", total=len(queries)) if progress else None
    scores = []
    for user, text, gold in zip(queries.users, queries.texts, queries.gold, strict=True):
        wanted = {queries.record_ids[user][row] for row in gold}
        found = {hit.record.id for hit in pipeline.search(user, text, k)}
        scores.append(len(wanted & found) / len(wanted))
        if progress is not None and task is not None:
            progress.advance(task)
    return scores


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan
