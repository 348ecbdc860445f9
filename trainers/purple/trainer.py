"""Train PURPLE's record scorer with REINFORCE against the frozen LLM.

Each step takes B training examples, samples M profiles of K records per example from the
Plackett–Luce policy, rewards each profile with the frozen LLM's log-likelihood of the true answer
(:class:`~personamem.trainers.purple.reward.LLMReward`, or any function of the same shape), turns rewards into
advantages per example and ascends Σ advantage · log π(profile). Every ``validate_every`` steps the
greedy policy (top K by propensity) is scored on the validation users, and the best checkpoint is kept.

The reward is a sparse tail: on LoCoMo with SmolLM2 a record holding the answer adds +7 to +34 nats
and most add ≈ 0. The paper's per-example z-score lets those few outliers dominate; ``rank`` (centred
ranks) and ``clip`` (differences from the example's mean clipped to ±``clip_nats``) are offered
beside it to compare.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from rich.progress import Progress

from personamem.encoder import SentenceEncoder
from personamem.profile.purple.checkpoint import load_checkpoint, load_optimizer, save_checkpoint
from personamem.profile.purple.model import (
    CandidateStates,
    PurpleConfig,
    RecordScorer,
    collate,
    encode_candidates,
)
from personamem.profile.purple.policy import plackett_luce_log_prob, plackett_luce_sample
from personamem.profile.purple.states import RecordStateCache
from personamem.records import Record
from personamem.trainers.purple.config import Advantage, PurpleTrainConfig
from personamem.trainers.purple.data import ProfileExample

__all__ = ["RewardFn", "TrainResult", "advantages", "train_purple"]

RewardFn = Callable[[Sequence[tuple[ProfileExample, Sequence[Record]]]], list[float]]
"""Rewards for (example, ordered profile) pairs; :class:`.reward.LLMReward` is one."""


@dataclass
class TrainResult:
    """What a run produced: the best checkpoint and how training went.

    Attributes:
        best: folder of the checkpoint with the best validation reward.
        best_step: the step it was taken at.
        best_validation: its mean validation reward (the greedy profile's log-likelihood).
        history: one row per step (mean / max reward, loss) and per validation.
        profiles_rewarded: rewards requested in training (cache hits included).
        seconds: wall-clock time of the run.
    """

    best: Path
    best_step: int
    best_validation: float
    history: list[dict[str, float]] = field(default_factory=list)
    profiles_rewarded: int = 0
    seconds: float = 0.0


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
) -> TrainResult:
    """Train, validating and checkpointing into ``out_dir`` (``best/`` and ``last/``).

    Raises:
        ValueError: no training or no validation examples.
    """
    if not train or not validation:
        raise ValueError(f"need training and validation examples, got {len(train)} and {len(validation)}")
    started = time.perf_counter()
    states = _encode(encoder, [*train, *validation], config.model, progress)
    device = torch.device(config.device)
    torch.manual_seed(config.seed)
    scorer = RecordScorer(config.model)
    step, best_step, best_value, history = 0, -1, -math.inf, []
    if resume and (out_dir / "last").is_dir():
        scorer, done = load_checkpoint(out_dir / "last", encoder=encoder.name)
        step, best_step, best_value = done["step"], done["best_step"], done["best_validation"]
        history = done.get("history", [])
    scorer.to(device)
    optimizer = torch.optim.Adam(scorer.parameters(), lr=config.lr)
    if resume and (out_dir / "last").is_dir():
        load_optimizer(out_dir / "last", optimizer)
    order = random.Random(config.seed)
    for _ in range(step):  # the example order continues where the resumed run left it
        order.sample(range(len(train)), min(config.batch_size, len(train)))
    sampler = torch.Generator().manual_seed(config.seed + step)
    rewarded = 0
    task = progress.add_task("training PURPLE", total=config.steps, completed=step) if progress else None
    while step < config.steps:
        batch = [train[i] for i in order.sample(range(len(train)), min(config.batch_size, len(train)))]
        row = _step(scorer, optimizer, batch, states, reward, config, device, sampler)
        rewarded += len(batch) * config.samples
        step += 1
        history.append({"step": step, **row})
        if step % config.validate_every == 0 or step == config.steps:
            value = validate(scorer, validation, states, reward, config.k, device)
            history.append({"step": step, "validation": value})
            if value > best_value:
                best_step, best_value = step, value
                save_checkpoint(
                    out_dir / "best",
                    scorer,
                    encoder=encoder.name,
                    training=_summary(step, best_step, best_value, config),
                )
            save_checkpoint(
                out_dir / "last",
                scorer,
                encoder=encoder.name,
                training={**_summary(step, best_step, best_value, config), "history": history},
                optimizer=optimizer,
            )
        if progress is not None and task is not None:
            progress.update(
                task,
                advance=1,
                description=f"training PURPLE: reward {row['reward_mean']:.2f} "
                f"(max {row['reward_max']:.2f}), best validation {best_value:.2f}",
            )
    return TrainResult(
        out_dir / "best", best_step, best_value, history, rewarded, time.perf_counter() - started
    )


def validate(
    scorer: RecordScorer,
    examples: Sequence[ProfileExample],
    states: dict[str, CandidateStates],
    reward: RewardFn,
    k: int,
    device: torch.device,
) -> float:
    """Mean reward of the greedy profile (top ``k`` by propensity) over ``examples``."""
    scorer.eval()
    profiles = []
    with torch.inference_mode():
        for start in range(0, len(examples), 32):
            chunk = examples[start : start + 32]
            weights = scorer(**{k_: v.to(device) for k_, v in collate([states[e.id] for e in chunk]).items()})
            for example, row in zip(chunk, weights.float().cpu(), strict=True):
                top = row[: len(example.candidates)].argsort(descending=True)[:k].tolist()
                profiles.append((example, [example.candidates[i] for i in top]))
    return float(sum(reward(profiles)) / len(profiles))


def _step(
    scorer: RecordScorer,
    optimizer: torch.optim.Optimizer,
    batch: list[ProfileExample],
    states: dict[str, CandidateStates],
    reward: RewardFn,
    config: PurpleTrainConfig,
    device: torch.device,
    sampler: torch.Generator,
) -> dict[str, float]:
    scorer.train()
    tensors = {name: value.to(device) for name, value in collate([states[e.id] for e in batch]).items()}
    with _autocast(device):
        weights = scorer(**tensors).float()
    orders = [
        plackett_luce_sample(
            weights[i].detach().cpu(), min(config.k, len(e.candidates)), config.samples, sampler
        )
        for i, e in enumerate(batch)
    ]
    requests = [
        (e, [e.candidates[j] for j in order])
        for e, o in zip(batch, orders, strict=True)
        for order in o.tolist()
    ]
    rewards = torch.tensor(reward(requests), dtype=torch.float32).view(len(batch), config.samples)
    advantage = advantages(rewards, config.advantage, config.clip_nats).to(device)
    log_probs = torch.stack(
        [
            plackett_luce_log_prob(weights[i].expand(config.samples, -1), o.to(device))
            for i, o in enumerate(orders)
        ]
    )
    loss = -(advantage * log_probs).mean()
    optimizer.zero_grad()
    loss.backward()  # type: ignore[no-untyped-call]
    torch.nn.utils.clip_grad_norm_(scorer.parameters(), config.grad_clip)
    optimizer.step()
    return {
        "reward_mean": float(rewards.mean()),
        "reward_max": float(rewards.max()),
        "loss": float(loss.detach()),
    }


def _encode(
    encoder: SentenceEncoder,
    examples: Sequence[ProfileExample],
    config: PurpleConfig,
    progress: Progress | None,
) -> dict[str, CandidateStates]:
    """Frozen token states of every example, computed once; records shared between examples once."""
    task = progress.add_task("encoding candidates", total=len(examples)) if progress else None
    cache = RecordStateCache(encoder, config.max_record_tokens, capacity=1_000_000)
    states = {}
    for example in examples:
        states[example.id] = encode_candidates(
            encoder, example.query, [r.text for r in example.candidates], config, cache
        )
        if progress is not None and task is not None:
            progress.advance(task)
    return states


def _autocast(device: torch.device) -> Any:
    """bf16 autocast on GPUs that support it; full precision elsewhere (CPU bf16 is slow and lossy)."""
    enabled = device.type == "cuda" and torch.cuda.is_bf16_supported()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=enabled)


def _summary(step: int, best_step: int, best_value: float, config: PurpleTrainConfig) -> dict[str, Any]:
    return {
        "step": step,
        "best_step": best_step,
        "best_validation": best_value,
        "config": config.model_dump(),
    }
