"""Train PURPLE's record scorer with REINFORCE against the frozen LLM, on accelerate.

Each step takes B training examples, samples M profiles of K records per example from the
Plackett–Luce policy, rewards each profile with the frozen LLM's log-likelihood of the true answer
(:class:`~personamem.trainers.purple.reward.LLMReward`, or any function of the same shape), turns rewards into
advantages per example and ascends Σ advantage · log π(profile). Every ``validate_every`` steps the
greedy policy (top K by propensity) is scored on the validation users, and the best checkpoint is kept
(the loop, validation schedule and checkpoints are :func:`~personamem.trainers.loop.train_loop`'s).

The loop is data-parallel through ``accelerate``: launched with N processes (``accelerate launch
--multi_gpu --num_processes N``, GPUs or, on a machine without one, CPU processes over gloo), every
process draws the same B examples, scores and backpropagates its share (examples ``rank::N``) and the
engine averages the gradients, so the replicas stay identical; the replicas' weights are compared at
every checkpoint and a divergence stops the run. Device placement, bf16 on GPUs, gradient
accumulation and the resumable state (``last/engine``: optimizer and RNGs) are the engine's; the
checkpoint format (``best/``, ``last/``) is the same however many processes trained it.

The reward is a sparse tail: on LoCoMo with SmolLM2 a record holding the answer adds +7 to +34 nats
and most add ≈ 0. The paper's per-example z-score lets those few outliers dominate; ``rank`` (centred
ranks) and ``clip`` (differences from the example's mean clipped to ±``clip_nats``) are offered
beside it to compare.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object, set_seed
from rich.progress import Progress

from personamem.encoder import SentenceEncoder
from personamem.profile.purple.checkpoint import load_checkpoint, save_checkpoint
from personamem.profile.purple.model import (
    CandidateStates,
    PurpleConfig,
    RecordScorer,
    collate,
    encode_candidates,
    state_cache,
)
from personamem.profile.purple.policy import plackett_luce_log_prob, plackett_luce_sample
from personamem.records import Record
from personamem.trainers.engine import accelerator_for, process_mean
from personamem.trainers.loop import LoopState, train_loop
from personamem.trainers.purple.config import Advantage, PurpleTrainConfig
from personamem.trainers.purple.data import ProfileExample

__all__ = ["RewardFn", "TrainResult", "advantages", "train_purple"]

RewardFn = Callable[[Sequence[tuple[ProfileExample, Sequence[Record]]]], list[float]]
"""Rewards for (example, ordered profile) pairs; :class:`.reward.LLMReward` is one."""

ENGINE_STATE = "engine"
"""The folder under ``last/`` where accelerate keeps the optimizer and RNG states for ``resume``."""


@dataclass
class TrainResult:
    """What a run produced: the best checkpoint and how training went.

    Attributes:
        best: folder of the checkpoint with the best validation reward.
        best_step: the step it was taken at.
        best_validation: its mean validation reward (the greedy profile's log-likelihood).
        history: one row per step (mean / max reward, loss) and per validation.
        profiles_rewarded: rewards this process requested in training (cache hits included).
        seconds: wall-clock time of the run.
        scorer: the trained scorer as this process ends it (equal in every process).
        processes: how many processes trained it.
    """

    best: Path
    best_step: int
    best_validation: float
    history: list[dict[str, float]] = field(default_factory=list)
    profiles_rewarded: int = 0
    seconds: float = 0.0
    scorer: RecordScorer | None = None
    processes: int = 1


def advantages(rewards: torch.Tensor, method: Advantage, clip_nats: float = 5.0) -> torch.Tensor:
    """``(B, M)`` rewards to advantages, normalized within each example's M profiles."""
    centred = rewards - rewards.mean(dim=1, keepdim=True)
    if method == "zscore":
        return centred / (rewards.std(dim=1, keepdim=True) + 1e-6)
    if method == "rank":
        ranks = rewards.argsort(dim=1).argsort(dim=1).float()  # ties broken by position
        return (ranks - ranks.mean(dim=1, keepdim=True)) / max(1.0, (rewards.shape[1] - 1) / 2)
    return centred.clamp(-clip_nats, clip_nats) / clip_nats


def train_purple(
    train: Sequence[ProfileExample],
    validation: Sequence[ProfileExample],
    encoder: SentenceEncoder,
    reward: RewardFn,
    config: PurpleTrainConfig,
    out_dir: Path,
    *,
    resume: bool = False,
    progress: Progress | None = None,
    info: dict[str, Any] | None = None,
    validation_reward: RewardFn | None = None,
) -> TrainResult:
    """Train, validating and checkpointing into ``out_dir`` (``best/`` and ``last/``).

    ``info`` (the data source, the users validated on...) is recorded in every checkpoint. Under a
    launcher every process calls this with the same arguments; only the main one writes files and
    shows ``progress``. ``validation_reward`` scores the validations when training runs on a
    stand-in (the LLM itself behind a distilled ``reward``); by default ``reward`` does. The initial
    weights are validated as step 0, so with the rank prior ``best/`` starts as the first stage's
    top K and is replaced only by a checkpoint that validates better.

    Raises:
        ValueError: no training or no validation examples.
        RuntimeError: the replicas' weights differ at a checkpoint (they should never).
    """
    if not train or not validation:
        raise ValueError(f"need training and validation examples, got {len(train)} and {len(validation)}")
    started = time.perf_counter()
    accelerator = accelerator_for(config.device)
    main, rank, world = accelerator.is_main_process, accelerator.process_index, accelerator.num_processes
    if min(config.batch_size, len(train)) < world:
        raise ValueError(
            f"a step's {min(config.batch_size, len(train))} example(s) cannot feed {world} processes"
        )
    progress = progress if main else None
    mine = list(validation[rank::world])
    states = _encode(encoder, [*train, *mine], config.model, progress)
    set_seed(config.seed)  # the same initial weights in every process
    scorer = RecordScorer(config.model)
    optimizer = torch.optim.Adam(scorer.parameters(), lr=config.lr)
    model, optimizer = accelerator.prepare(scorer, optimizer)
    state = LoopState()
    if resume and (out_dir / "last" / ENGINE_STATE).is_dir():
        _, done = load_checkpoint(out_dir / "last", encoder=encoder.name)
        state = LoopState.restore(done)
        accelerator.load_state(str(out_dir / "last" / ENGINE_STATE))
    order = random.Random(config.seed)
    for _ in range(state.step):  # the example order continues where the resumed run left it
        order.sample(range(len(train)), min(config.batch_size, len(train)))
    sampler = torch.Generator().manual_seed(config.seed + 7919 * state.step + rank)
    rewarded = 0

    def step() -> dict[str, float]:
        nonlocal rewarded
        batch = [train[i] for i in order.sample(range(len(train)), min(config.batch_size, len(train)))]
        share = batch[rank::world]
        rewarded += len(share) * config.samples
        return _step(accelerator, model, optimizer, share, len(batch), states, reward, config, sampler)

    def checkpoint(state: LoopState, improved: bool) -> None:
        digests = _replica_digests(accelerator, model)
        summary = {**_summary(state, config), "processes": world, **(info or {})}
        if improved and main:
            save_checkpoint(
                out_dir / "best",
                accelerator.unwrap_model(model),
                encoder=encoder.name,
                training={**summary, "replica_digests": digests},
            )
        if main:
            save_checkpoint(
                out_dir / "last",
                accelerator.unwrap_model(model),
                encoder=encoder.name,
                training={**summary, "replica_digests": digests, "history": state.history},
            )
        accelerator.save_state(str(out_dir / "last" / ENGINE_STATE))

    state = train_loop(
        state,
        config,
        step=step,
        validate=lambda: validate(
            accelerator.unwrap_model(model), mine, states, validation_reward or reward, config.k, accelerator
        ),
        checkpoint=checkpoint,
        describe=lambda row, state: (
            f"training PURPLE: reward {row['reward_mean']:.2f} "
            f"(max {row['reward_max']:.2f}), best validation {state.best_value:.2f}"
        ),
        accelerator=accelerator,
        progress=progress,
        title="training PURPLE",
        validate_at_start=True,
    )
    trained = accelerator.unwrap_model(model)
    accelerator.end_training()
    return TrainResult(
        out_dir / "best",
        state.best_step,
        state.best_value,
        state.history,
        rewarded,
        time.perf_counter() - started,
        trained,
        world,
    )


def validate(
    scorer: RecordScorer,
    examples: Sequence[ProfileExample],
    states: dict[str, CandidateStates],
    reward: RewardFn,
    k: int,
    accelerator: Accelerator | None = None,
) -> float:
    """Mean reward of the greedy profile (top ``k`` by propensity) over ``examples``.

    Under a launcher each process passes its share of the validation examples and every process
    gets the mean over all of them.
    """
    scorer.eval()
    device = next(scorer.parameters()).device
    profiles = []
    with torch.inference_mode():
        for start in range(0, len(examples), 32):
            chunk = examples[start : start + 32]
            weights = scorer(**{k_: v.to(device) for k_, v in collate([states[e.id] for e in chunk]).items()})
            for example, row in zip(chunk, weights.float().cpu(), strict=True):
                top = row[: len(example.candidates)].argsort(descending=True)[:k].tolist()
                profiles.append((example, [example.candidates[i] for i in top]))
    return process_mean(float(sum(reward(profiles))) if profiles else 0.0, len(profiles), accelerator)


def _step(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    share: list[ProfileExample],
    batch_size: int,
    states: dict[str, CandidateStates],
    reward: RewardFn,
    config: PurpleTrainConfig,
    sampler: torch.Generator,
) -> dict[str, float]:
    """One optimizer step over this process's ``share`` of a batch of ``batch_size`` examples.

    The share is split into ``gradient_accumulation_steps`` backward passes; gradients are synced
    across processes on the last one only. Each pass's loss is weighted by its share of the whole
    batch, so the engine's average over processes is the batch mean however the batch divides.
    """
    model.train()
    chunks = [
        c
        for c in (
            share[i :: config.gradient_accumulation_steps] for i in range(config.gradient_accumulation_steps)
        )
        if c
    ]
    rewards_seen: list[torch.Tensor] = []
    loss_sum = 0.0
    for i, chunk in enumerate(chunks):
        sync = contextlib.nullcontext() if i == len(chunks) - 1 else accelerator.no_sync(model)
        with sync:
            loss, rewards = _loss(accelerator, model, chunk, states, reward, config, sampler)
            weight = len(chunk) * accelerator.num_processes / batch_size
            accelerator.backward(loss * weight)
        rewards_seen.append(rewards)
        loss_sum += float(loss.detach()) * len(chunk) / len(share)
    accelerator.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    optimizer.zero_grad()
    every = torch.cat(rewards_seen)
    return {"reward_mean": float(every.mean()), "reward_max": float(every.max()), "loss": loss_sum}


def _loss(
    accelerator: Accelerator,
    model: torch.nn.Module,
    chunk: list[ProfileExample],
    states: dict[str, CandidateStates],
    reward: RewardFn,
    config: PurpleTrainConfig,
    sampler: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """−mean(advantage · log π(profile)) over M sampled profiles per example, and their rewards."""
    tensors = {
        name: value.to(accelerator.device) for name, value in collate([states[e.id] for e in chunk]).items()
    }
    weights = model(**tensors).float()
    orders = [
        plackett_luce_sample(
            weights[i].detach().cpu(), min(config.k, len(e.candidates)), config.samples, sampler
        )
        for i, e in enumerate(chunk)
    ]
    requests = [
        (e, [e.candidates[j] for j in order])
        for e, o in zip(chunk, orders, strict=True)
        for order in o.tolist()
    ]
    rewards = torch.tensor(reward(requests), dtype=torch.float32).view(len(chunk), config.samples)
    advantage = advantages(rewards, config.advantage, config.clip_nats).to(accelerator.device)
    log_probs = torch.stack(
        [
            plackett_luce_log_prob(weights[i].expand(config.samples, -1), o.to(accelerator.device))
            for i, o in enumerate(orders)
        ]
    )
    return -(advantage * log_probs).mean(), rewards


def _replica_digests(accelerator: Accelerator, model: torch.nn.Module) -> list[str]:
    """Every process's weight digest; RuntimeError when they differ (data parallelism broke)."""
    state = accelerator.unwrap_model(model).state_dict()
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().float().cpu().numpy().tobytes())
    digests = (
        list(gather_object([digest.hexdigest()])) if accelerator.num_processes > 1 else [digest.hexdigest()]
    )
    if len(set(digests)) > 1:
        raise RuntimeError(f"the {len(digests)} training processes' weights differ: {digests}")
    return digests


def _encode(
    encoder: SentenceEncoder,
    examples: Sequence[ProfileExample],
    config: PurpleConfig,
    progress: Progress | None,
) -> dict[str, CandidateStates]:
    """Frozen token states of every example, computed once; records shared between examples once."""
    task = progress.add_task("encoding candidates", total=len(examples)) if progress else None
    cache = state_cache(encoder, config, capacity=1_000_000)
    states = {}
    for example in examples:
        states[example.id] = encode_candidates(
            encoder, example.query, [r.text for r in example.candidates], config, cache
        )
        if progress is not None and task is not None:
            progress.advance(task)
    return states


def _summary(state: LoopState, config: PurpleTrainConfig) -> dict[str, Any]:
    return {
        "step": state.step,
        "best_step": state.best_step,
        "best_validation": state.best_value,
        "config": config.model_dump(),
    }
