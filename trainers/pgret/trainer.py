"""Train the query tower by policy gradient, with the frozen LLM judging relevance.

Each step takes B logged queries and samples (query, record) pairs from three sources: the current
policy's top records (α), BM25's (β, exploration) and the logged gold (1 − α − β). A logged gold
record is relevant by its label; every other pair goes to the judge (cached). The item reward then
depends on relevance and on novelty against the base model's top-L, and the binary-action REINFORCE
loss (:mod:`.policy`) moves the query vector towards rewarded records and away from penalized ones.
Record vectors never change. Every ``validate_every`` steps the policy's top-k on validation users is
scored with the same reward, and the best tower is kept.

The loop runs on ``accelerate``, as PURPLE's does: under ``accelerate launch --multi_gpu
--num_processes N`` every process draws the same queries and samples the same pairs (the replicas
are identical, so are their top records and their random streams), then judges and backpropagates
its share of the queries (``rank::N``, the judge being the expensive part) and the engine averages
the gradients. Validation is sharded the same way and reduced. One process behaves exactly as the
single-process loop did.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from rich.progress import Progress
from sentence_transformers import SentenceTransformer

from personamem.encoder import Encoder
from personamem.eval.judge import JudgeCalibration, RelevanceJudge, labelled_pairs
from personamem.retrieval.query_tower import save_query_tower
from personamem.trainers.engine import accelerator_for, process_mean
from personamem.trainers.loop import LoopState, train_loop
from personamem.trainers.pgret.config import VARIANT_REWARDS, PGRetTrainConfig
from personamem.trainers.pgret.data import LoggedQuery, PGRetData
from personamem.trainers.pgret.policy import binary_policy_loss, query_logits
from personamem.trainers.pgret.reward import corrected_relevance

__all__ = ["PGRetResult", "QueryPolicy", "calibration_pairs", "train_pgret"]

_STATE = "trainer_state.pt"


@dataclass
class PGRetResult:
    """What a run produced.

    Attributes:
        best: folder of the tower with the best validation reward.
        best_step: the step it was taken at (0: the base tower was never beaten).
        best_validation: its validation reward per top-k record.
        history: one row per step (reward, loss, pair sources) and per validation.
        pairs_judged: pairs sent to the judge this run (cache hits included).
        seconds: wall-clock time of this run.
    """

    best: Path
    best_step: int
    best_validation: float
    history: list[dict[str, float]] = field(default_factory=list)
    pairs_judged: int = 0
    seconds: float = 0.0


class QueryPolicy(torch.nn.Module):
    """The query tower being trained (a wrapper, so its parameters are one module's)."""

    def __init__(self, model: SentenceTransformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit query vectors, with gradients (``forward``, so a data-parallel wrapper syncs them)."""
        return self.embed(texts)

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Unit query vectors, with gradients."""
        features = self.model.preprocess(list(texts))
        device = self.model.device
        features = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        out = self.model(features)["sentence_embedding"]
        return torch.nn.functional.normalize(out, dim=-1)


def calibration_pairs(
    data: PGRetData, *, queries: int = 100, seed: int = 0
) -> tuple[list[tuple[str, str]], list[bool]]:
    """Labelled (query, record text) pairs to measure the judge.

    Each query's gold records are the positives; two non-gold records of the base top-L (hard) and
    one at random are the negatives.
    """
    rng = random.Random(seed)
    picked = rng.sample(list(data.queries), min(queries, len(data.queries)))
    items = []
    for query in picked:
        corpus = data.corpora[query.user_id]
        row = corpus.index()
        hard = [r for r in query.base_top if r not in query.gold][:2]
        others = [*hard, *(r for r in corpus.ids if r not in query.gold and r not in hard)]
        gold = [corpus.texts[row[g]] for g in query.gold if g in row]
        items.append((query.text, gold, [corpus.texts[row[r]] for r in others]))
    return labelled_pairs(items, rng=rng)


def _check_data(train: PGRetData, validation: PGRetData, config: PGRetTrainConfig) -> None:
    """Refuse a variant without a reward and data with no training or validation query."""
    if config.variant not in VARIANT_REWARDS:
        raise ValueError(f"variant {config.variant!r} has no reward: train it with train_infonce")
    if not train.queries or not validation.queries:
        raise ValueError(
            f"need training and validation queries, got {len(train.queries)} and {len(validation.queries)}"
        )


def _policy(
    start: Path, resumed: dict[str, Any], config: PGRetTrainConfig, device: torch.device
) -> tuple[QueryPolicy, torch.optim.Optimizer]:
    """The tower from ``start`` (the base encoder, or the last checkpoint) and its optimizer, restored."""
    policy = QueryPolicy(SentenceTransformer(str(start), device=str(device))).to(device)
    _freeze_unused(policy)
    optimizer = torch.optim.AdamW([p for p in policy.parameters() if p.requires_grad], lr=config.lr)
    if resumed:
        optimizer.load_state_dict(resumed["optimizer"])
    return policy, optimizer


def train_pgret(
    train: PGRetData,
    validation: PGRetData,
    judge: RelevanceJudge,
    calibration: JudgeCalibration,
    config: PGRetTrainConfig,
    out_dir: Path,
    *,
    base_model_path: Path,
    record_encoder: Encoder,
    info: dict[str, Any] | None = None,
    resume: bool = False,
    progress: Progress | None = None,
) -> PGRetResult:
    """Train, validating and checkpointing into ``out_dir`` (``best/`` and ``last/``).

    Args:
        train: the logged queries trained on.
        validation: the queries whose top-k reward picks the best checkpoint.
        judge: the frozen LLM judging pairs that are not logged gold.
        calibration: the judge's threshold and error rates, measured on training users' gold.
        config: the variant and optimization settings.
        out_dir: where ``best/`` and ``last/`` go.
        base_model_path: the record encoder's sentence-transformers folder: the tower starts as it.
        record_encoder: the encoder that embedded the corpora (named in the checkpoint).
        info: written into each checkpoint's ``pgret.json`` (data source, users, judge).
        resume: continue from ``out_dir/last`` (its step count, optimizer and sampler state).
        progress: shows a training bar.

    Raises:
        ValueError: no training or validation queries, or the infonce variant (which has no reward:
            train it with :func:`~personamem.trainers.pgret.infonce.train_infonce`).
    """
    _check_data(train, validation, config)
    started = time.perf_counter()
    accelerator = accelerator_for(config.device)
    main = accelerator.is_main_process
    if min(config.batch_size, len(train.queries)) < accelerator.num_processes:
        raise ValueError(f"a step's queries cannot feed {accelerator.num_processes} processes")
    progress = progress if main else None
    device = accelerator.device
    torch.manual_seed(config.seed)
    last = out_dir / "last"
    resumed: dict[str, Any] = {}
    if resume and (last / _STATE).is_file():
        resumed = torch.load(last / _STATE, weights_only=False)
    policy, optimizer = _policy(last if resumed else base_model_path, resumed, config, device)
    wrapped, optimizer = accelerator.prepare(policy, optimizer)
    loop = LoopState.restore(resumed) if resumed else LoopState()
    rng = random.Random(config.seed)
    if "rng" in resumed:
        rng.setstate(resumed["rng"])
    sampler = torch.Generator().manual_seed(config.seed + loop.step + 7919 * accelerator.process_index)
    vectors = {
        u: torch.from_numpy(c.vectors).to(device) for u, c in {**train.corpora, **validation.corpora}.items()
    }
    info = {**(info or {}), "judge_calibration": calibration.to_json()}
    judged_before = judge.scored + judge.hits

    def save_tower(folder: Path) -> None:
        if not main:
            return
        save_query_tower(
            folder,
            policy.model,
            record_encoder=record_encoder,
            info={
                **info,
                "variant": config.variant,
                "seed": config.seed,
                "step": loop.step,
                "best_step": loop.best_step,
                "best_validation": loop.best_value,
                "config": config.model_dump(mode="json"),
            },
        )

    def checkpoint(state: LoopState, improved: bool) -> None:
        if improved:
            save_tower(out_dir / "best")
        save_tower(last)
        if main:
            saved = {**state.to_json(), "optimizer": optimizer.state_dict(), "rng": rng.getstate()}
            torch.save(saved, last / _STATE)

    def step() -> dict[str, float]:
        batch = rng.sample(list(train.queries), min(config.batch_size, len(train.queries)))
        return _step(
            accelerator, wrapped, optimizer, batch, train, vectors, judge, calibration, config, rng, sampler
        )

    if loop.best_step < 0:  # the base tower is the bar to beat
        loop.best_value = validate(policy, validation, vectors, judge, calibration, config, accelerator)
        loop.best_step = 0
        loop.history.append({"step": 0, "validation": loop.best_value})
        save_tower(out_dir / "best")
    train_loop(
        loop,
        config,
        step=step,
        validate=lambda: validate(policy, validation, vectors, judge, calibration, config, accelerator),
        checkpoint=checkpoint,
        describe=lambda row, state: (
            f"training PG-Ret ({config.variant}): reward {row['reward']:.2f}, "
            f"best validation {state.best_value:.3f}"
        ),
        accelerator=accelerator,
        progress=progress,
        title="training PG-Ret",
    )
    accelerator.end_training()
    return PGRetResult(
        out_dir / "best",
        loop.best_step,
        loop.best_value,
        loop.history,
        judge.scored + judge.hits - judged_before,
        time.perf_counter() - started,
    )


def validate(
    policy: QueryPolicy,
    data: PGRetData,
    vectors: dict[str, torch.Tensor],
    judge: RelevanceJudge,
    calibration: JudgeCalibration,
    config: PGRetTrainConfig,
    accelerator: Accelerator | None = None,
) -> float:
    """Mean item reward of the policy's top-k records over ``data``'s queries.

    A gold record is relevant by its label, the rest by the judge's verdict. Under a launcher each
    process judges its share of the queries and every process gets the mean over all of them.
    """
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    queries = data.queries[rank::world]
    policy.eval()
    with torch.inference_mode():
        embedded = policy.embed([q.text for q in queries]) if queries else torch.empty(0)
    pairs, novel, gold = [], [], []
    for query, vector in zip(queries, embedded, strict=True):
        corpus = data.corpora[query.user_id]
        top = (vectors[query.user_id] @ vector).topk(min(config.k, len(corpus.ids))).indices.tolist()
        for i in top:
            record_id = corpus.ids[i]
            pairs.append((query.text, corpus.texts[i]))
            novel.append(record_id not in query.base_top)
            gold.append(record_id in query.gold)
    relevance = _relevance(judge.margins(pairs), gold, calibration, corrected=False)
    rewards = config.reward(relevance, torch.tensor(novel, dtype=torch.float32))
    return process_mean(float(rewards.sum()), len(pairs), accelerator)


def _step(
    accelerator: Accelerator,
    policy: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batch: list[LoggedQuery],
    data: PGRetData,
    vectors: dict[str, torch.Tensor],
    judge: RelevanceJudge,
    calibration: JudgeCalibration,
    config: PGRetTrainConfig,
    rng: random.Random,
    sampler: torch.Generator,
) -> dict[str, float]:
    """One update; every process samples the whole batch's pairs, then judges and learns from its share."""
    policy.train()
    embedded = policy([q.text for q in batch])
    rows, sources = [], {"policy": 0, "exploration": 0, "logged": 0}
    for query, vector in zip(batch, embedded.detach(), strict=True):
        corpus = data.corpora[query.user_id]
        depth = min(config.policy_depth, len(corpus.ids))
        top = (vectors[query.user_id] @ vector).topk(depth).indices.tolist()
        picked = _sample_pairs(query, corpus.index(), top, config, rng, sources)
        rows.append(picked)
    pairs, novel, gold, owners, records = [], [], [], [], []
    share = range(accelerator.process_index, len(batch), accelerator.num_processes)
    for i in share:
        query, picked = batch[i], rows[i]
        corpus = data.corpora[query.user_id]
        for record in picked:
            pairs.append((query.text, corpus.texts[record]))
            novel.append(corpus.ids[record] not in query.base_top)
            gold.append(corpus.ids[record] in query.gold)
            owners.append(i)
            records.append(record)
    relevance = _relevance(judge.margins(pairs), gold, calibration, corrected=config.noisy_oracle)
    rewards = config.reward(relevance, torch.tensor(novel, dtype=torch.float32)).to(embedded.device)
    scores = torch.stack(
        [embedded[i] @ vectors[batch[i].user_id][r] for i, r in zip(owners, records, strict=True)]
    )
    logits = query_logits(scores, torch.tensor(owners, device=scores.device), config.temperature)
    with torch.no_grad():
        actions = torch.bernoulli(torch.sigmoid(logits).cpu(), generator=sampler).to(logits.device)
    loss = binary_policy_loss(logits, actions, rewards)
    optimizer.zero_grad()
    # weighted by the share's part of the batch, so the engine's average over processes is the batch's
    accelerator.backward(loss * len(share) * accelerator.num_processes / len(batch))
    accelerator.clip_grad_norm_(list(policy.parameters()), config.grad_clip)
    optimizer.step()
    return {
        "reward": float((actions * rewards).sum() / actions.sum().clamp(min=1)),
        "pair_reward": float(rewards.mean()),
        "selected": float(actions.mean()),
        "loss": float(loss.detach()),
        **{f"pairs_{name}": float(count) for name, count in sources.items()},
    }


def _sample_pairs(
    query: LoggedQuery,
    row: dict[str, int],
    top: list[int],
    config: PGRetTrainConfig,
    rng: random.Random,
    sources: dict[str, int],
) -> list[int]:
    """Record rows for one query, each slot drawn from the policy's top, BM25's or the gold.

    Sources are drawn by the α / β / rest mix; a source with nothing left yields to the policy's top.
    """
    pools = {
        "policy": list(top),
        "exploration": [row[r] for r in query.bm25_top if r in row],
        "logged": [row[r] for r in query.gold if r in row],
    }
    weights = [config.alpha, config.beta, max(0.0, 1 - config.alpha - config.beta)]
    picked: list[int] = []
    for _ in range(config.pairs_per_query):
        source = rng.choices(list(pools), weights=weights)[0]
        choices = [r for r in pools[source] if r not in picked]
        if not choices:
            source, choices = "policy", [r for r in pools["policy"] if r not in picked]
            if not choices:
                break
        picked.append(rng.choice(choices))
        sources[source] += 1
    return picked


def _relevance(
    margins: Sequence[float], gold: Sequence[bool], calibration: JudgeCalibration, *, corrected: bool
) -> torch.Tensor:
    """1 for logged gold; else the judge's verdict at its threshold, or its noise-corrected estimate."""
    label = torch.tensor([p >= calibration.threshold for p in margins], dtype=torch.float32)
    if corrected:
        label = corrected_relevance(label, calibration.tpr, calibration.fpr)
    return torch.where(torch.tensor(gold), torch.ones_like(label), label)


def _freeze_unused(policy: QueryPolicy) -> None:
    """Freeze the tower's parameters that no query vector depends on (BERT's pooler).

    They are found by one backward pass, so every trainable parameter is one the gradient reaches.
    """
    policy.embed(["probe"]).sum().backward()  # type: ignore[no-untyped-call]
    for parameter in policy.model.parameters():
        if parameter.grad is None:
            parameter.requires_grad_(False)
        parameter.grad = None
