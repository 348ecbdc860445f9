"""``personamem improve``: fit the first stage to a store, and go live only if better.

A deployment schedules one command. It reads what the store has, feedback naming the records that
answers used where there is enough of it, else questions the packaged LLM writes for sampled
records. On most training users it fits two kinds of candidate: a query adapter (starting from the
shipped one where it fits the store's encoder) at each of hybrid's dense weights, and, from
feedback where the live pipeline runs a learned ranker, trees added to that ranker's scores (a
residual, seconds to fit; with none it is the live ranker). The training users left out of those
fits choose among them; then the live pipeline and the chosen candidate run through the real store
on the validation users' questions.
The candidate becomes the store's live pipeline (kept with the data, so every process and server
worker serves it) only when its nDCG@k is higher, and learning from feedback: synthetic questions
are a proxy that favoured candidates which lost on real questions, so from them improve reports and
keeps the live pipeline unless ``synthetic_live`` is set (then a sign test must also agree); the
one it replaces is kept for ``--rollback``.
nDCG, not recall: feedback names useful records among those a call served, so the live pipeline
that served them has them all in its top k by construction, and only their order can tell a
better candidate.
Synthetic questions are cached in the store and the fit keeps its state, so an interrupted run
resumes.
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

from personamem.attribution import labelled
from personamem.datasets.benchmark import Question
from personamem.datasets.traffic import accepted
from personamem.errors import ConfigError, InsufficientDataError
from personamem.interleaving import sign_test
from personamem.llm.base import FrozenLLM
from personamem.pipeline import Pipeline
from personamem.pipeline.config import (
    ADAPTER_FUSION,
    DEFAULT_ADAPTER,
    PipelineConfig,
    pipeline_config,
)
from personamem.retrieval.query_adapter import QueryAdapter, fits, save_query_adapter
from personamem.retrieval.ranker import SHIPPED_RANKERS, RankerModel
from personamem.served_memory import ServedMemory
from personamem.serving import stored_pipeline
from personamem.trainers.adapter.config import AdapterTrainConfig, ImproveConfig
from personamem.trainers.adapter.data import QuerySet
from personamem.trainers.adapter.run import store_query_sets
from personamem.trainers.adapter.trainer import fit_adapter

__all__ = [
    "SYNTHETIC_LIVE",
    "SYNTHETIC_RANKER",
    "ImproveConfig",
    "ImproveResult",
    "goes_live",
    "improve",
    "rollback",
    "sign_test",
]

SYNTHETIC_LIVE = (
    "kept the live pipeline: candidates learned from synthetic questions go live only with "
    "synthetic_live (--synthetic-live); on LoCoMo's held-out users those that validated better lost "
    "recall@10 on real questions. Log calls with feedback for improve to learn from"
)
SYNTHETIC_RANKER = (
    "no ranker fitted: synthetic questions borrow their record's words, and trees fitted on them learn "
    "to trust that overlap (on LoCoMo such a ranker won on synthetic questions and lost recall@10 on "
    "real ones); the ranker learns from feedback only"
)


@dataclass
class ImproveResult:
    """What improve measured and did.

    Attributes:
        signal: ``feedback`` or ``synthetic``; counts: users and questions on each side.
        before / after: the live and the candidate pipeline's settings and validation scores.
        live: whether the candidate went live (the store's live pipeline).
        trial: the trial it was put on instead (``go_live="trial"``), else None.
        adapter / ranker: the folders fitted (ranker: None when the live pipeline has no ranker).
    """

    signal: str
    counts: dict[str, int]
    before: dict[str, Any]
    after: dict[str, Any]
    live: bool
    adapter: Path | None = None
    ranker: Path | None = None
    notes: list[str] = field(default_factory=list)
    trial: str | None = None


def improve(
    memory: ServedMemory,
    settings: ImproveConfig | None = None,
    *,
    llm: FrozenLLM | None = None,
    progress: Progress | None = None,
) -> ImproveResult:
    """Fit, validate and (when better) put live a new first stage for ``memory``'s store (or tenant).

    The baseline is the store's live pipeline (:attr:`Store.live_pipeline`, else the package
    default), whatever pipeline ``memory`` was opened with; it is also what the candidate replaces.

    Args:
        memory: the memory over the store (a tenant's view improves that tenant's pipeline).
        settings: what it learns from and spends (default: :class:`ImproveConfig`'s defaults).
        llm: writes synthetic questions (default: ``settings.llm``, loaded only if needed).
        progress: shows each step's progress.

    Raises:
        InsufficientDataError: too few users or questions; the message gives the counts.
        ConfigError: a live pipeline with a query personalizer (it builds its own query vector).
    """
    settings = settings or ImproveConfig()
    store = memory.store
    live = stored_pipeline(store.live_pipeline)
    if live.personalizer != "none":
        raise ConfigError(
            f"the store's live pipeline's personalizer {live.personalizer!r} builds its own query "
            "vector; improve fits a query adapter and fusion, for pipelines without a personalizer"
        )
    train_users, validation_users = _split_users(store.users(), settings)
    train, validation, signal = _question_sets(memory, train_users, validation_users, settings, llm, progress)
    counts = _counts(len(train_users) + len(validation_users), train, validation, signal, settings)
    default_dir = store.folder / "adapters" if store.folder else Path("personamem-adapters")
    adapters_dir = (settings.adapters_dir or default_dir).resolve()
    # the dense weight is chosen on training users the adapter did not fit: on its own questions
    # every weight scores alike (the map has learned them), and a tie says nothing
    tune_users = set(train_users[:: max(2, round(1 / settings.tune_share))])
    fitting, tuning = train.only(sorted(set(train.users) - tune_users)), train.only(sorted(tune_users))
    if not len(fitting):  # every question from a left-out user: fit on all, keep the shipped weight
        fitting, tuning = train, train.only([])
    split = {"train_users": len(train_users), "validation_users": len(validation_users)}
    folder = _fitted_adapter(memory, fitting, adapters_dir, settings, split, signal, progress)
    candidates = _adapter_candidates(live, f"adapter:{folder}", settings)
    sample = _subset(tuning, settings.max_weight_questions, settings.seed)
    residual = (
        _residual(memory, live, fitting, sample, adapters_dir / f"{folder.name}-ranker", settings, progress)
        if signal == "feedback"
        else SYNTHETIC_RANKER
    )
    notes: list[str] = []
    if isinstance(residual, str):
        notes.append(residual)
    else:
        candidates["live first stage, ranker fitted to this store"] = residual[0]
        notes.append(residual[1])
    scored = {
        name: _mean(_ndcgs(memory, config, sample, settings.k, progress, name))
        for name, config in candidates.items()
        if len(sample)
    }
    # ties (and no tuning question at all) go to the candidate nearest the live pipeline: the
    # ranker fitted to it, else the adapter at the shipped weight
    nearest = {
        name: (name.startswith("live"), -abs(config.fusion(config.query_encoder)[0] - ADAPTER_FUSION[0]))
        for name, config in candidates.items()
    }
    name = max(candidates, key=lambda n: (scored.get(n, 0.0), nearest[n]))
    chosen = candidates[name]
    before_scores = np.array(_ndcgs(memory, live, validation, settings.k, progress, "live pipeline"))
    after_scores = np.array(_ndcgs(memory, chosen, validation, settings.k, progress, "candidate"))
    before, after = float(before_scores.mean()), float(after_scores.mean())
    wins, losses = int((after_scores > before_scores).sum()), int((after_scores < before_scores).sum())
    metric = f"ndcg@{settings.k}"
    result = ImproveResult(
        signal,
        counts,
        {**_served(memory.pipeline(live)), metric: before},
        {**_served(memory.pipeline(chosen)), metric: after},
        live=goes_live(signal, before, after, wins, losses, settings),
        adapter=folder,
        ranker=None if isinstance(residual, str) else Path(residual[0].ranker),
        notes=[
            *notes,
            f"candidate chosen on {len(sample)} question(s) of {len(tune_users)} training user(s) "
            f"no fit saw, {metric}: " + "; ".join(f"{n}: {score:.3f}" for n, score in scored.items()),
            f"validation questions better / worse with the candidate: {wins} / {losses}"
            + ("" if signal == "feedback" else f" (sign test p {sign_test(wins, losses):.2g})"),
            *_synthetic_notes(signal, counts, len(train) + len(validation), settings),
        ],
    )
    if result.live:
        chosen_by = (
            f"personamem improve {folder.name}: {name}, fitted on {len(train)} "
            f"{signal} question(s) of {counts['train_users']} user(s); validation {metric} "
            f"{before:.3f} -> {after:.3f} on {len(validation)} question(s) of "
            f"{counts['validation_users']} user(s)"
        )
        _put_live(memory, result, chosen, chosen_by, settings)
    return result


def _split_users(users: list[str], settings: ImproveConfig) -> tuple[list[str], list[str]]:
    """The store's users split at random (seeded) into training and validation users.

    Raises:
        InsufficientDataError: fewer users than ``settings.min_users``.
    """
    if len(users) < settings.min_users:
        raise InsufficientDataError(
            f"too few users to improve on: {len(users)} with records; need at least {settings.min_users} "
            f"(some to train on, {settings.validation_share:.0%} to validate on)"
        )
    shuffled = sorted(users)
    random.Random(settings.seed).shuffle(shuffled)
    held = max(1, round(settings.validation_share * len(shuffled)))
    return sorted(shuffled[held:]), sorted(shuffled[:held])


def _question_sets(
    memory: ServedMemory,
    train_users: list[str],
    validation_users: list[str],
    settings: ImproveConfig,
    llm: FrozenLLM | None,
    progress: Progress | None,
) -> tuple[QuerySet, QuerySet, str]:
    """Training and validation questions, and their signal: feedback where there is enough, else synthetic."""
    train, validation, signal = _feedback_sets(memory, train_users, validation_users, settings)
    if signal != "feedback":
        from personamem.llm.load import load_llm

        train, validation = store_query_sets(
            memory.store,
            llm or load_llm(settings.llm),
            train_users,
            validation_users,
            per_user=settings.synthetic_per_user,
            max_total=settings.max_synthetic,
            consistency_k=settings.consistency_k,
            seed=settings.seed,
            progress=progress,
        )
    return train, validation, signal


def _counts(
    users: int, train: QuerySet, validation: QuerySet, signal: str, settings: ImproveConfig
) -> dict[str, int]:
    """Users and questions on each side (with synthetic questions, how many were asked).

    Raises:
        InsufficientDataError: fewer questions than the settings' minimums on either side.
    """
    counts = {
        "users": users,
        "train_users": len(set(train.users)),
        "train_questions": len(train),
        "validation_users": len(set(validation.users)),
        "validation_questions": len(validation),
    }
    if signal == "synthetic":  # the questions' quality: what the filters refused
        counts["synthetic_asked"] = train.asked + validation.asked
    if len(train) < settings.min_train_questions or len(validation) < settings.min_validation_questions:
        raise InsufficientDataError(
            f"too little data to improve on: {len(train)} training and {len(validation)} validation "
            f"question(s) ({signal}) from {users} user(s); need at least "
            f"{settings.min_train_questions} and {settings.min_validation_questions}. Add records or users, "
            "or log calls with feedback (log_interactions = true, then PersonaMem.feedback with "
            "used_record_ids)."
        )
    return counts


def _fitted_adapter(
    memory: ServedMemory,
    fitting: QuerySet,
    adapters_dir: Path,
    settings: ImproveConfig,
    split: dict[str, int],
    signal: str,
    progress: Progress | None,
) -> Path:
    """The query adapter fitted on ``fitting`` (from the shipped one where it fits), saved in a new folder."""
    store = memory.store
    shipped = fits(DEFAULT_ADAPTER, store.encoder)
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
    recipe = {"improve": settings.model_dump(mode="json"), "signal": signal}
    save_query_adapter(
        adapters_dir / created,
        fit.weight,
        record_encoder=store.encoder,
        info={
            "created": created,
            "recipe": {**recipe, "init": DEFAULT_ADAPTER if shipped else "identity"},
            "sources": [fitting.describe()],
            # counts, not ids: this file lives outside the store, where forget would not reach an id
            "split": {"store": split},
        },
    )
    return adapters_dir / created


def _adapter_candidates(
    live: PipelineConfig, encoder: str, settings: ImproveConfig
) -> dict[str, PipelineConfig]:
    """The live pipeline with the fitted adapter at each of hybrid's dense weights (1: dense alone)."""
    fitted = ("query_encoder", "dense_weight", "rrf_k", "ranker", "chosen_by")
    fixed = {k: v for k, v in live.model_dump().items() if k not in fitted}
    return {
        f"adapter, dense weight {w}": pipeline_config(
            {
                **fixed,
                "first_stage": "hybrid" if w < 1 else "dense",
                "query_encoder": encoder,
                "dense_weight": w,
                "rrf_k": ADAPTER_FUSION.k,
                "ranker": "auto",  # the live ranker's features are another adapter's
            }
        )
        for w in settings.weights
    }


def _synthetic_notes(signal: str, counts: dict[str, int], kept: int, settings: ImproveConfig) -> list[str]:
    """What a run on synthetic questions says: that it stays off unless asked, and what the filters kept."""
    notes = [SYNTHETIC_LIVE] if signal == "synthetic" and not settings.synthetic_live else []
    if "synthetic_asked" in counts:
        notes.append(
            f"synthetic questions kept: {kept} of {counts['synthetic_asked']} asked "
            f"({kept / max(counts['synthetic_asked'], 1):.0%}; refused: not a question, a loop, a repeat, "
            "or one the base encoder does not match to its record)"
        )
    return notes


def _put_live(
    memory: ServedMemory,
    result: ImproveResult,
    chosen: PipelineConfig,
    chosen_by: str,
    settings: ImproveConfig,
) -> None:
    """Make ``chosen`` the live pipeline, or put it on trial (``go_live="trial"``); ``result`` says which."""
    store = memory.store
    table = json.loads(store.live_pipeline or "{}")
    table.update(_stage(chosen), chosen_by=chosen_by)
    table = {key: value for key, value in table.items() if value is not None}
    pipeline_config(table, source="the candidate")  # never put live a table that fails to load
    if settings.go_live == "trial":
        result.live, result.trial = False, memory.trials.start(table, share=settings.trial_share).id
        result.notes.append(
            f"on trial: served interleaved with the live pipeline on {settings.trial_share:.0%} of "
            "calls; it goes live when the answers there prefer it (personamem improve --status)"
        )
        return
    store.set_live_pipeline(table)
    if memory.config != stored_pipeline(store.live_pipeline):
        result.notes.append(
            "this memory was opened with a pipeline of its own and keeps serving it; processes that "
            "open the store without one serve the new live pipeline"
        )


def rollback(memory: ServedMemory) -> None:
    """Put back the live pipeline that the last ``improve`` replaced, for every process serving the store.

    Raises:
        ConfigError: nothing to roll back (no improve went live since the last rollback).
    """
    if not memory.store.rollback_live_pipeline():
        raise ConfigError("nothing to roll back: no 'personamem improve' went live since the last rollback")
    memory.store.live.end_trial(memory.store.tenant)  # a trial against the pipeline rolled back is moot


def _stage(config: PipelineConfig) -> dict[str, Any]:
    """The first-stage fields improve fits, as the pipeline file writes them."""
    return {
        "first_stage": config.first_stage,
        "query_encoder": config.query_encoder,
        "dense_weight": config.dense_weight,
        "rrf_k": config.rrf_k,
        "ranker": config.ranker,
    }


def _residual(
    memory: ServedMemory,
    live: PipelineConfig,
    fitting: QuerySet,
    tuning: QuerySet,
    folder: Path,
    settings: ImproveConfig,
    progress: Progress | None,
) -> tuple[PipelineConfig, str] | str:
    """The live pipeline with trees fitted to this store added to its ranker, and what the fit chose.

    The trees are fitted on ``fitting`` over the live ranker's own root (so scheduled runs do not
    stack residuals), and their number, zero included, is chosen on ``tuning``. A string says why no
    such candidate was made.
    """
    served = memory.pipeline(live)
    if served.ranker is None:
        return "no ranker fitted: the live pipeline runs none"
    try:
        import lightgbm  # noqa: F401  (the train extra)
    except ImportError:
        return "no ranker fitted: lightgbm is not installed (pip install 'personamem[train]')"
    from personamem.trainers.ranker.data import store_features
    from personamem.trainers.ranker.export import save_ranker
    from personamem.trainers.ranker.trainer import fit_residual

    base = served.ranker.model.root
    adapter = served.ranker.adapter
    found = [
        store_features(memory.store, _questions(part), part.source, adapter, progress=progress)
        for part in (fitting, tuning)
    ]
    if not len(found[0]) or not len(found[1]):
        return "no ranker fitted: no question to fit the trees on, or none left out to choose their number"
    fit = fit_residual(found[0], found[1], base, rounds=settings.ranker_rounds, seed=settings.seed)
    save_ranker(
        folder,
        fit.booster,
        alpha=base.alpha,
        iterations=fit.iterations,
        info={
            "base": {
                "ranker": _spec(base),
                "sha256": base.info.get("sha256"),
                "gated_start": base.gated_start,
            },
            "recipe": {"improve": settings.model_dump(mode="json"), "signal": fitting.source},
            "query_encoder": served.query_encoder_name,
            # counts, not ids: this folder lives outside the store, where forget would not reach an id
            "sources": {"store": {"train_questions": len(found[0]), "validation_questions": len(found[1])}},
            "validation": {"metric": "nDCG@10 over the candidates", "curve": fit.curve[base.alpha]},
        },
    )
    served_encoder = served.query_encoder_name  # the adapter the trees were fitted with, named
    config = pipeline_config(
        {**live.model_dump(), "query_encoder": served_encoder, "ranker": str(folder), "chosen_by": None}
    )
    return config, (
        f"ranker: {fit.iterations} tree(s) added to {_spec(base)!r} (nDCG@10 on the left-out users' "
        f"questions {fit.start:.3f} -> {fit.best:.3f}; {fit.seconds:.1f} s)"
    )


def _spec(model: RankerModel) -> str:
    """How a ranker folder names ``model``: a shipped ranker by name, another by its folder."""
    folder = Path(model.folder).resolve()
    return folder.name if folder.parent == SHIPPED_RANKERS else str(folder)


def _questions(queries: QuerySet) -> list[Question]:
    """``queries`` as benchmark questions over the store's record ids (each gold record relevance 1)."""
    return [
        Question(
            id=f"{queries.source}-{i}",
            user_id=user,
            text=text,
            relevant={queries.record_ids[user][row]: 1 for row in gold},
        )
        for i, (user, text, gold) in enumerate(zip(queries.users, queries.texts, queries.gold, strict=True))
    ]


def _served(pipeline: Pipeline) -> dict[str, Any]:
    return {k: v for k, v in pipeline.first_stage.items() if k != "chosen_by"}


def _feedback_sets(
    memory: ServedMemory, train_users: list[str], validation_users: list[str], settings: ImproveConfig
) -> tuple[QuerySet, QuerySet, str]:
    """Feedback-labelled questions on each side, or two empty sets and ``synthetic`` when too few."""
    usable = labelled(memory.store, [i for i in memory.store.interactions.export(None) if accepted(i, None)])
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


def goes_live(
    signal: str, before: float, after: float, wins: int, losses: int, settings: ImproveConfig
) -> bool:
    """Whether the candidate replaces the live pipeline, given its validation against it.

    From feedback a higher mean suffices; from synthetic questions only with ``synthetic_live`` and
    a sign test over the questions that changed (wins against losses) below ``max_p``.
    """
    if after <= before:
        return False
    return signal == "feedback" or (settings.synthetic_live and sign_test(wins, losses) < settings.max_p)


def _subset(queries: QuerySet, n: int, seed: int) -> QuerySet:
    if len(queries) <= n:
        return queries
    return queries.take(sorted(random.Random(seed).sample(range(len(queries)), n)))


def _ndcgs(
    memory: ServedMemory,
    config: PipelineConfig,
    queries: QuerySet,
    k: int,
    progress: Progress | None,
    label: str,
) -> list[float]:
    """Binary nDCG@k of each question, searched through ``config``'s pipeline on the real store (unlogged).

    Written out rather than through ranx: improve runs in deployments without the ``eval`` extra.
    """
    pipeline = memory.pipeline(config.model_copy(update={"log_interactions": False}))
    task = progress.add_task(f"validate: {label}", total=len(queries)) if progress else None
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    scores = []
    for user, text, gold in zip(queries.users, queries.texts, queries.gold, strict=True):
        wanted = {queries.record_ids[user][row] for row in gold}
        found = np.array([hit.record.id in wanted for hit in pipeline.search(user, text, k)], dtype=bool)
        ideal = discount[: min(len(wanted), k)].sum()
        scores.append(float(discount[: len(found)][found].sum() / ideal))
        if progress is not None and task is not None:
            progress.advance(task)
    return scores


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan
