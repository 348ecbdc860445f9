"""``personamem train purple`` as a function: examples, their user split, training, the summary."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import TYPE_CHECKING, Any

from personamem.trainers.purple.config import PurpleDataConfig, PurpleRunConfig, PurpleTrainConfig
from personamem.trainers.run import TrainSummary

if TYPE_CHECKING:
    from pathlib import Path

    from rich.progress import Progress

    from personamem.encoder import SentenceEncoder
    from personamem.trainers.purple.data import ProfileExample
    from personamem.trainers.purple.reward_model import Agreement

__all__ = ["examples", "run"]


def run(config: PurpleRunConfig, *, progress: Progress | None = None) -> TrainSummary | None:
    """PURPLE: learn which K records (and in which order) make the LLM likeliest to give the true answer.

    Data-parallel under 'accelerate launch --multi_gpu --num_processes N -m personamem train purple ...'
    (GPUs, or CPU processes where there are none); the checkpoint is the same.

    Returns:
        The summary in the main process, None in the others.

    Raises:
        ValueError: too few users or examples for the split (InsufficientDataError for traffic).
    """
    from accelerate import PartialState

    from personamem.datasets import write_split
    from personamem.encoder import default_encoder
    from personamem.llm.load import load_llm
    from personamem.trainers.engine import on_cpu
    from personamem.trainers.purple.distil import distil_reward
    from personamem.trainers.purple.reward import LLMReward, UsedReward
    from personamem.trainers.purple.trainer import RewardFn, train_purple

    data, train_config, out_dir = config.data, config.train, config.out_dir
    state = PartialState(cpu=on_cpu(train_config.device))
    main = state.is_main_process
    progress = progress if main else None
    encoder = default_encoder()
    train, validation, test, split = examples(data, train_config, encoder, progress)
    if main:
        write_split(out_dir, split)
    info: dict[str, Any] = {
        "data_source": split["source"],
        "validation_users": split["validation_users"],
        "train_users": len(split["train_users"]),
    }
    if data.reward == "distilled" and state.num_processes > 1:
        raise ValueError("--reward distilled trains in one process (its reward is cheap); drop the launcher")
    rows: list[tuple[str, str]] = []
    reward: RewardFn
    if data.reward == "used":  # no LLM: the records the answers used are the reward
        reward = UsedReward()
    else:
        # the reward's LLM sits on this process's device: on a GPU it is most of a step
        # (bench/gpu_reward.py); one process keeps its scores in rewards.jsonl, so a resumed run does
        # not pay for them again
        llm = load_llm(data.llm, runtime=data.llm_runtime, device=str(state.device))
        reward = LLMReward(llm, path=out_dir / "rewards.jsonl" if state.num_processes == 1 else None)
    trained_on: RewardFn = reward
    if data.reward == "distilled":
        assert isinstance(reward, LLMReward)
        trained_on, agreed = distil_reward(
            reward,
            train,
            validation,
            encoder,
            k=train_config.k,
            questions=data.reward_questions,
            profiles=data.reward_profiles,
            seed=0,  # one sample for every training seed: seeds can share rewards.jsonl and reward_model/
            out_dir=out_dir,
            progress=progress,
        )
        info["reward_agreement"] = dataclasses.asdict(agreed)
        rows.append(("reward model vs LLM, held out (Spearman, pairwise, gold AUC)", _agreement(agreed)))
    result = train_purple(
        train,
        validation,
        encoder,
        trained_on,
        train_config,
        out_dir,
        resume=config.resume,
        progress=progress,
        info=info,
        validation_reward=reward,
    )
    if not main:
        return None
    size = sum(f.stat().st_size for f in result.best.iterdir() if f.is_file())
    unit = "nDCG of the used records" if data.reward == "used" else "nats"
    scored = f" ({reward.scored}, {reward.hits})" if isinstance(reward, LLMReward) else ""
    if config.trial:
        rows.append(("on trial in the store", _put_on_trial(data, result.best)))
    return TrainSummary(
        "PURPLE training",
        [
            ("examples train / validation / test", f"{len(train)} / {len(validation)} / {len(test)}"),
            (f"best step, validation reward ({unit})", f"{result.best_step}, {result.best_validation:.3f}"),
            (
                "profiles rewarded by this process" + (" (LLM-scored, cache hits)" if scored else ""),
                f"{result.profiles_rewarded}{scored}",
            ),
            ("processes", str(result.processes)),
            ("wall-clock seconds (median step)", f"{result.seconds:.0f} ({_median_step(result.history)})"),
            ("best checkpoint", f"{result.best} ({size / 2**20:.1f} MiB)"),
            *rows,
        ],
        f'selector = "purple:{result.best}"',
    )


def examples(
    data: PurpleDataConfig, config: PurpleTrainConfig, encoder: SentenceEncoder, progress: Progress | None
) -> tuple[list[ProfileExample], list[ProfileExample], list[ProfileExample], dict[str, Any]]:
    """(train, validation, test, split.json) from the data source, split by user.

    ``max_train`` takes a sample seeded by the training seed, ``max_validation`` one seeded by the split
    seed; split.json names the users sampled.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.trainers.purple.data import examples_from_benchmark, examples_from_traffic

    found, origin = data.read(
        lambda bench: examples_from_benchmark(
            bench,
            encoder,
            first_stage=data.first_stage,
            candidates=data.candidates,
            cache_dir=default_vector_cache(),
            progress=progress,
        ),
        lambda traffic: examples_from_traffic(
            traffic,
            first_stage=data.first_stage,
            candidates=data.candidates,
            min_rating=data.min_rating,
            used=data.reward == "used",
            progress=progress,
        ),
    )
    split = data.split(
        Counter(e.user_id for e in found),
        what="PURPLE",
        need_train=config.batch_size,
        hint="Log context() calls (log_interactions = true) and report each accepted answer with "
        "PersonaMem.feedback(interaction_id, answer=...).",
    )
    picker = random.Random(config.seed)
    train = [e for e in found if e.user_id in split.train]
    validation = [e for e in found if e.user_id in split.validation]
    test = [e for e in found if e.user_id in split.test]
    if data.max_train and data.max_train < len(train):
        train = picker.sample(train, data.max_train)
    # the same validation questions for every training seed: seeds compare, and share the LLM's scores
    validation = random.Random(data.split_seed).sample(validation, min(data.max_validation, len(validation)))
    sampled = dataclasses.replace(
        split, train=sorted({e.user_id for e in train}), validation=sorted({e.user_id for e in validation})
    )
    payload = data.split_json(
        sampled,
        origin,
        first_stage=data.first_stage,
        candidates=data.candidates,
        test_examples=[e.id for e in test],
    )
    return train, validation, test, payload


def _put_on_trial(data: PurpleDataConfig, best: Path) -> str:
    """Put the live pipeline with this selector on trial in the traffic's store; the trial's id.

    Raises:
        ValueError: the run did not train from a store (--trial needs --from-store).
    """
    import json

    from personamem.memory import open_memory

    if data.from_store is None:
        raise ValueError("--trial puts the selector on trial in the store it learned from: give --from-store")
    with open_memory(data.from_store) as mem:
        table = {**json.loads(mem.store.live_pipeline or "{}"), "selector": f"purple:{best.resolve()}"}
        return mem.trials.start(table).id


def _agreement(agreed: Agreement) -> str:
    gold = "-" if agreed.gold_auc_model is None else f"{agreed.gold_auc_model:.3f}"
    llm = "-" if agreed.gold_auc_llm is None else f"{agreed.gold_auc_llm:.3f}"
    where = f"the LLM's own: {llm}; {agreed.questions} questions"
    return f"{agreed.spearman:.3f}, {agreed.pairwise:.3f}, {gold} ({where})"


def _median_step(history: list[dict[str, Any]]) -> str:
    """The median step's wall-clock seconds, validations excluded ("-" for a run resumed at its end)."""
    seconds = sorted(row["seconds"] for row in history if "seconds" in row)
    return f"{seconds[len(seconds) // 2]:.1f} s" if seconds else "-"
