"""What PURPLE's and PG-Ret's trainers share: their data and training settings, and their loop.

Both draw batches from held-out-user splits of one :class:`~personamem.datasets.DataSource`, take
optimizer steps, validate every ``validate_every`` steps, keep the best checkpoint and the last one
(with what ``resume`` continues from). :func:`train_loop` is that loop, written once; a trainer gives
it one step, one validation and one checkpoint writer, each in its own format. The settings both
read are declared here, once: :class:`LoopData` (the data side) and :class:`LoopConfig` (the
optimization side); a trainer whose default differs names it with :func:`defaults`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from personamem.datasets import DataSource

if TYPE_CHECKING:
    from accelerate import Accelerator
    from rich.progress import Progress

__all__ = ["LoopConfig", "LoopData", "LoopState", "defaults", "train_loop"]

M = TypeVar("M", bound=BaseModel)


def defaults(**values: Any) -> Callable[[type[M]], type[M]]:
    """Give a config class its own defaults for fields it inherits, keeping their docstring and bounds.

    Redeclaring a field would need its documentation written twice; this changes the default alone.
    """

    def decorate(model: type[M]) -> type[M]:
        for name, value in values.items():
            model.model_fields[name].default = value
        model.model_rebuild(force=True)
        return model

    return decorate


class LoopData(DataSource):
    """The data side of a loop trainer: a data source with its user split, and how much of it to use."""

    max_train: int | None = Field(default=None, ge=1)
    """Train on this many training examples (default: all of them): a seeded sample for PURPLE, evenly
    spaced for PG-Ret (the same for every seed, so judge verdicts cached by one seed serve the next)."""
    max_validation: int = Field(default=64, ge=1)
    """Validation examples scored each time."""


class LoopConfig(BaseModel):
    """The optimization settings of a loop trainer."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    k: int = Field(default=5, ge=1)
    """Records chosen per question: PURPLE's profile length K, the top k PG-Ret's validation scores."""
    batch_size: int = Field(default=16, ge=1)
    """Examples (questions, or logged queries) per step; PURPLE's B (the paper: 16)."""
    lr: float = Field(default=1e-4, gt=0)
    """The optimizer's learning rate (Adam for PURPLE, AdamW for PG-Ret's query tower)."""
    grad_clip: float = Field(default=1.0, gt=0)
    """Maximum gradient norm."""
    steps: int = Field(default=100, ge=1)
    """Optimizer steps in all (a resumed run continues up to this many)."""
    validate_every: int = Field(default=20, ge=1)
    """Steps between validations (and checkpoints)."""
    patience: int | None = Field(default=None, ge=1)
    """Stop after this many validations in a row without a new best (default: take every step)."""
    seed: int = 0
    """Seeds the example order and every sample drawn in training (and PURPLE's initial weights)."""


@dataclass
class LoopState:
    """Where a run stands: what a checkpoint keeps and ``resume`` restores.

    Attributes:
        step: optimizer steps taken.
        best_step: the step of the best validation (-1: none yet).
        best_value: the best validation value.
        history: one row per step and per validation.
    """

    step: int = 0
    best_step: int = -1
    best_value: float = -math.inf
    history: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def restore(cls, saved: Mapping[str, Any]) -> LoopState:
        """The state a checkpoint saved (``step``, ``best_step``, ``best_validation``, ``history``)."""
        return cls(
            saved["step"], saved["best_step"], saved["best_validation"], list(saved.get("history", []))
        )

    def to_json(self) -> dict[str, Any]:
        """The keys :meth:`restore` reads."""
        return {
            "step": self.step,
            "best_step": self.best_step,
            "best_validation": self.best_value,
            "history": self.history,
        }


def train_loop(
    state: LoopState,
    config: LoopConfig,
    *,
    step: Callable[[], dict[str, float]],
    validate: Callable[[], float],
    checkpoint: Callable[[LoopState, bool], None],
    describe: Callable[[dict[str, float], LoopState], str],
    accelerator: Accelerator,
    progress: Progress | None = None,
    title: str = "training",
    validate_at_start: bool = False,
) -> LoopState:
    """Step up to ``config.steps``, validating and checkpointing every ``config.validate_every``.

    Args:
        state: where the run starts (a fresh one, or a resumed checkpoint's).
        config: the steps and the validation interval.
        step: one optimizer step (it draws its own batch); returns the step's history row (the loop
            adds its wall-clock ``seconds``).
        validate: the validation value (higher is better), the same in every process.
        checkpoint: writes the checkpoints after a validation, given the state and whether it was
            the best so far (then ``best/`` too); called in every process.
        describe: the progress bar's text after a step.
        accelerator: the engine (every process waits for the others after a checkpoint).
        progress: shows a bar (None in processes other than the main one).
        title: the bar's first text.
        validate_at_start: a fresh run validates (and checkpoints) its initial weights as step 0, so
            ``best/`` is never worse on validation than where training started.
    """
    task = progress.add_task(title, total=config.steps, completed=state.step) if progress else None
    if validate_at_start and state.step == 0 and not state.history:
        state.best_step, state.best_value = 0, validate()
        state.history.append({"step": 0, "validation": state.best_value})
        checkpoint(state, True)
        accelerator.wait_for_everyone()
    while state.step < config.steps and not _out_of_patience(state, config.patience):
        started = time.perf_counter()
        row = step()
        state.step += 1
        state.history.append({"step": state.step, **row, "seconds": time.perf_counter() - started})
        if state.step % config.validate_every == 0 or state.step == config.steps:
            value = validate()
            state.history.append({"step": state.step, "validation": value})
            improved = value > state.best_value
            if improved:
                state.best_step, state.best_value = state.step, value
            checkpoint(state, improved)
            accelerator.wait_for_everyone()
        if progress is not None and task is not None:
            progress.update(task, advance=1, description=describe(row, state))
    return state


def _out_of_patience(state: LoopState, patience: int | None) -> bool:
    """``patience`` validations since the best one (counted from the history, so it survives resume)."""
    if patience is None:
        return False
    since = [row for row in state.history if "validation" in row and row["step"] > state.best_step]
    return len(since) >= patience
