"""Fit a query adapter by in-user softmax InfoNCE, with validation, best/last checkpoints and resume.

Each query is scored against every record of its own user, so the negatives are exactly the records
retrieval must rank below the gold ones (the hardest there are, and no other user's). Batches draw
the same number of queries from every source, so a benchmark with ten times the questions does not
decide alone what the adapter learns. The weights start at the identity (or at a given adapter) and
a penalty on their distance from the start keeps a small store from pulling them far.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from rich.progress import Progress

from personamem.trainers.adapter.config import AdapterTrainConfig
from personamem.trainers.adapter.data import QuerySet

__all__ = ["AdapterFit", "fit_adapter", "recall_at"]

_STATE_FILE = "last.pt"


@dataclass
class AdapterFit:
    """What training produced.

    Attributes:
        weight: the best weights on the validation queries (the last ones without validation).
        best_step: the step they come from; best_validation: their validation recall@k.
        start_validation: the starting weights' validation recall@k (the bar a fit must clear).
        curve: (step, validation recall@k) at every validation.
    """

    weight: np.ndarray
    best_step: int
    best_validation: float | None
    start_validation: float | None
    curve: list[tuple[int, float]]
    seconds: float


def recall_at(weight: np.ndarray | None, sets: Sequence[QuerySet], k: int) -> float:
    """Mean over sources of mean recall@k (gold rows in a query's top k over its user's records)."""
    per_source = []
    for queries in sets:
        if not len(queries):
            continue
        mapped = queries.queries if weight is None else queries.queries @ weight
        mapped = mapped / np.maximum(np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12)
        scores = []
        for vector, user, gold in zip(mapped, queries.users, queries.gold, strict=True):
            cosines = queries.corpora[user] @ vector
            top = np.argsort(-cosines, kind="stable")[:k]
            scores.append(len(set(top.tolist()) & set(gold.tolist())) / len(gold))
        per_source.append(float(np.mean(scores)))
    return float(np.mean(per_source)) if per_source else float("nan")


def fit_adapter(
    train: Sequence[QuerySet],
    validation: Sequence[QuerySet],
    config: AdapterTrainConfig,
    *,
    init: np.ndarray | None = None,
    out_dir: Path | None = None,
    resume: bool = False,
    progress: Progress | None = None,
) -> AdapterFit:
    """Train the adapter's weights on ``train``, choosing the step by recall@k on ``validation``.

    With ``out_dir``, the state is saved at every validation (and removed when the run finishes), and
    ``resume`` continues an interrupted run from it.

    Raises:
        ValueError: no training query.
    """
    sources = [s for s in train if len(s)]
    if not sources:
        raise ValueError("no training query: every source is empty")
    started = time.perf_counter()
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    dim = sources[0].queries.shape[1]
    start = torch.tensor(np.eye(dim, dtype=np.float32) if init is None else init, dtype=torch.float32)
    weight = torch.nn.Parameter(start.clone())
    optimizer = torch.optim.Adam([weight], lr=config.lr)
    corpora = [{u: torch.from_numpy(c) for u, c in s.corpora.items()} for s in sources]
    step, curve = 0, []
    validating = any(len(s) for s in validation)
    best_weight = start.numpy().copy()
    first = recall_at(best_weight, validation, config.k) if validating else None
    best_validation = first
    best_step = 0
    state_path = out_dir / _STATE_FILE if out_dir is not None else None
    if resume and state_path is not None and state_path.is_file():
        state = torch.load(state_path, weights_only=False)
        weight.data.copy_(state["weight"])
        optimizer.load_state_dict(state["optimizer"])
        step, curve = state["step"], state["curve"]
        best_weight, best_step, best_validation = state["best_weight"], state["best_step"], state["best"]
        rng = state["rng"]
    per_source = max(1, config.batch_size // len(sources))
    task = progress.add_task("adapter", total=config.steps, completed=step) if progress else None
    while step < config.steps:
        optimizer.zero_grad()
        loss = torch.zeros(())
        for source, vectors in zip(sources, corpora, strict=True):
            rows = rng.choice(len(source), size=min(per_source, len(source)), replace=False)
            loss = loss + _batch_loss(source, vectors, rows, weight, config.temperature) / len(sources)
        loss = loss + config.anchor * ((weight - start) ** 2).sum()
        loss.backward()
        optimizer.step()
        step += 1
        if validating and (step % config.validate_every == 0 or step == config.steps):
            current = weight.detach().numpy().copy()
            score = recall_at(current, validation, config.k)
            curve.append((step, score))
            if best_validation is None or score > best_validation:
                best_weight, best_step, best_validation = current, step, score
        if state_path is not None and (step % config.validate_every == 0 or step == config.steps):
            state_path.parent.mkdir(parents=True, exist_ok=True)
            staged = state_path.with_suffix(".partial")
            torch.save(
                {
                    "weight": weight.detach().clone(),
                    "optimizer": optimizer.state_dict(),
                    "step": step,
                    "curve": curve,
                    "best_weight": best_weight,
                    "best_step": best_step,
                    "best": best_validation,
                    "rng": rng,
                },
                staged,
            )
            staged.replace(state_path)
        if progress is not None and task is not None:
            progress.update(task, completed=step)
    if not validating:
        best_weight, best_step = weight.detach().numpy().copy(), step
    if state_path is not None:
        state_path.unlink(missing_ok=True)  # finished: the folder is the adapter, not a run in progress
    return AdapterFit(best_weight, best_step, best_validation, first, curve, time.perf_counter() - started)


def _batch_loss(
    source: QuerySet, corpora: dict[str, torch.Tensor], rows: np.ndarray, weight: torch.Tensor, tau: float
) -> torch.Tensor:
    """Mean over the rows' queries of −log (softmax mass on the gold records among the user's records)."""
    queries = torch.from_numpy(source.queries[rows]) @ weight
    queries = torch.nn.functional.normalize(queries, dim=1)
    losses = []
    for query, row in zip(queries, rows, strict=True):
        logits = corpora[source.users[row]] @ query / tau
        gold = torch.from_numpy(source.gold[row])
        losses.append(torch.logsumexp(logits, 0) - torch.logsumexp(logits[gold], 0))
    return torch.stack(losses).mean()
