"""The distilled reward of ``personamem train purple --reward distilled``: score a sample, fit, report.

The LLM scores ``reward_profiles`` profiles of ``reward_questions`` training questions and of every
validation question, once; scores land in ``rewards.jsonl`` as they come, so a stopped run resumes
without paying twice. R̂ is fitted on the training questions only and its agreement with the LLM is
measured on the validation users' questions, which it never saw (``reward_model/agreement.json``).
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from personamem.trainers.purple.reward_model import (
    Agreement,
    DistilledReward,
    agreement,
    fit_reward_model,
    load_reward_model,
    sample_profiles,
    save_reward_model,
)

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.encoder import Encoder
    from personamem.trainers.purple.data import ProfileExample
    from personamem.trainers.purple.reward import LLMReward

__all__ = ["REWARD_MODEL", "distil_reward"]

REWARD_MODEL = "reward_model"
"""The folder under the run's output that keeps the fitted R̂ and its agreement report."""

_CHUNK = 16  # profiles scored per LLM call: small enough that a stop loses little


def distil_reward(
    llm_reward: LLMReward,
    train: Sequence[ProfileExample],
    validation: Sequence[ProfileExample],
    encoder: Encoder,
    *,
    k: int,
    questions: int,
    profiles: int,
    seed: int,
    out_dir: Path,
    progress: Progress | None = None,
) -> tuple[DistilledReward, Agreement]:
    """R̂ fitted to the LLM's scores of sampled training profiles, and its held-out agreement.

    A fitted R̂ already in ``out_dir`` is loaded instead of refitted (a resumed run).
    """
    picked = random.Random(seed).sample(list(train), min(questions, len(train)))
    todo = sample_profiles(picked, k, profiles, seed) + sample_profiles(validation, k, profiles, seed + 1)
    task = (
        progress.add_task("LLM-scoring profiles for the reward model", total=len(todo)) if progress else None
    )
    for start in range(0, len(todo), _CHUNK):
        llm_reward(todo[start : start + _CHUNK])
        if progress is not None and task is not None:
            progress.advance(task, len(todo[start : start + _CHUNK]))
    folder = out_dir / REWARD_MODEL
    if (folder / "model.safetensors").is_file():
        model = load_reward_model(folder)
    else:
        model = fit_reward_model(picked, llm_reward.scores, encoder, seed=seed)
        save_reward_model(model, folder)
    reward = DistilledReward(model, encoder)
    agreed = agreement(reward, validation, llm_reward.scores)
    report = {**dataclasses.asdict(agreed), "train_questions": len(picked), "profiles_per_question": profiles}
    (folder / "agreement.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return reward, agreed
