"""Train MemRerank's extractor: GRPO (TRL's ``GRPOTrainer``) on LoRA adapters, rewarded by a reranker.

Each step samples ``num_generations`` memories for each of ``prompts_per_step`` training users,
rewards each with the frozen setwise reranker's probability of the user's true item plus λ times the
quality score (:mod:`.reward`), and takes one AdamW step on the adapters from the group-relative
advantages. The base model never changes, so the trained extractor is the base plus a few MB.

The output folder holds:

* ``extractor.json`` and ``adapter/``: the latest checkpoint in the format
  :func:`personamem.preference.checkpoint.load_extractor` reads (``memrerank:<folder>``), replaced
  whole at every save, so it can be evaluated while training goes on;
* ``rewards.jsonl``: one row per step (mean utility, mean quality, total reward, ...), the reward curve;
* ``split.json``: the training users (all on the training side of the fixed split);
* ``trainer/checkpoint-N``: TRL's state (adapter, optimizer, scheduler, RNG, data position), which
  ``resume`` continues from.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import Progress, TaskID
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback
from transformers.trainer_utils import get_last_checkpoint

from personamem.datasets.choice import ChoiceInstance
from personamem.errors import MissingExtraError
from personamem.llm.load import load_llm
from personamem.preference.checkpoint import ADAPTER, CONFIG, write_extractor_config
from personamem.preference.extractor import PromptedExtractor
from personamem.preference.setwise import SetwiseReranker
from personamem.trainers.memrerank.config import MemRerankConfig
from personamem.trainers.memrerank.data import choice_examples, to_dataset, training_instances
from personamem.trainers.memrerank.reward import QualityReward, UtilityReward

if TYPE_CHECKING:
    from trl import GRPOConfig

__all__ = ["REWARDS", "MemRerankResult", "RewardFunc", "grpo_config", "rewards_for", "train_memrerank"]

RewardFunc = Callable[..., list[float]]
"""TRL's reward callable: ``f(prompts, completions, **dataset_columns)``, logged under its ``__name__``."""

REWARDS = "rewards.jsonl"
_TRAINER = "trainer"
_RESUMABLE = frozenset({"max_steps", "save_every"})  # what a resumed run may change
_LOGGED = {  # rewards.jsonl column <- TRL's log key, besides each reward's mean (rewards/<name>/mean)
    "reward": "reward",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "completion_tokens": "completions/mean_length",
    "clipped_ratio": "completions/clipped_ratio",
    "loss": "loss",
    "step_seconds": "step_time",
}


@dataclass
class MemRerankResult:
    """What a run produced.

    Attributes:
        checkpoint: the folder ``load_extractor`` reads (the output folder itself).
        step: the last step trained (and saved).
        history: the ``rewards.jsonl`` rows, resumed steps included.
        users: training users.
        utilities_scored: reranker choices computed in this process (cache hits excluded).
        seconds: wall-clock time of this process's part of the run.
    """

    checkpoint: Path
    step: int
    history: list[dict[str, float]] = field(default_factory=list)
    users: int = 0
    utilities_scored: int = 0
    seconds: float = 0.0


def grpo_config(config: MemRerankConfig, output_dir: Path, extra_weights: Sequence[float] = ()) -> GRPOConfig:
    """TRL's settings for ``config``; ``extra_weights`` weigh rewards after utility and quality.

    ``per_device_train_batch_size`` counts completions in TRL, so one step is one generation batch
    of ``prompts_per_step × num_generations``. The rest is fixed: the CPU in float32 (TRL defaults
    to bf16, slow and lossy on a CPU), no gradient checkpointing (a small model; it costs ~20% time),
    a constant learning rate (a resumed run that raises ``max_steps`` keeps its rate), a log per step
    for ``rewards.jsonl``, and no reporting service.
    """
    try:
        from trl import GRPOConfig
    except ImportError:
        raise MissingExtraError(["trl", "peft", "datasets"], "train") from None
    return GRPOConfig(
        output_dir=str(output_dir),
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        beta=config.beta,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        reward_weights=[1.0, config.lambda_quality, *extra_weights],
        max_steps=config.max_steps,
        save_strategy="steps",
        save_steps=config.save_every,
        save_total_limit=1,
        logging_steps=1,
        seed=config.seed,
        use_cpu=True,
        bf16=False,
        activation_checkpointing=False,
        report_to="none",
        disable_tqdm=True,
    )


def train_memrerank(
    instances: Sequence[ChoiceInstance],
    config: MemRerankConfig,
    out_dir: Path,
    *,
    resume: bool = False,
    extra_rewards: Sequence[tuple[RewardFunc, float]] = (),
    progress: Progress | None = None,
    info: dict[str, Any] | None = None,
) -> MemRerankResult:
    """Train on the training side of ``instances``, checkpointing into ``out_dir``.

    Only instances whose group is on the training side of
    :func:`~personamem.datasets.choice.split_users` are used, whatever is passed. ``extra_rewards``
    are (callable, weight) pairs added to utility + λ · quality (say, a length penalty); each is
    called as TRL calls rewards, with the ``instance_id`` column, and logged under its name.
    ``info`` (the data source...) is recorded in the checkpoint's ``extractor.json``.

    Raises:
        ValueError: no training instance with a history; a finished or foreign run in ``out_dir``
            without ``resume``; a resumed run whose settings differ beyond ``max_steps`` and
            ``save_every``.
        MissingExtraError: trl, peft or datasets is not installed.
    """
    started = time.perf_counter()
    try:
        from peft import LoraConfig
        from trl import GRPOTrainer
    except ImportError:
        raise MissingExtraError(["trl", "peft", "datasets"], "train") from None

    last = _last_checkpoint(out_dir, config, resume=resume)
    utility, quality = rewards_for(instances, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    users = sorted({e.instance.user_id for e in utility.examples.values()})
    (out_dir / "split.json").write_text(json.dumps({"train_users": users}, indent=2) + "\n", encoding="utf-8")
    history = _keep_history(out_dir / REWARDS, _step_of(last))
    training = {
        "reranker": utility.reranker.llm.name,
        "users": len(users),
        **(info or {}),
        "config": config.model_dump(mode="json"),
    }
    model, tokenizer = _policy(config.base_model)
    funcs: list[Any] = [utility, quality, *(f for f, _ in extra_rewards)]  # TRL types their results loosely
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=grpo_config(config, out_dir / _TRAINER, [w for _, w in extra_rewards]),
        train_dataset=to_dataset(list(utility.examples.values())),
        processing_class=tokenizer,
        peft_config=LoraConfig(
            r=config.lora_rank,
            lora_alpha=config.lora_alpha,
            lora_dropout=config.lora_dropout,
            target_modules=list(config.lora_targets),
            task_type="CAUSAL_LM",
        ),
        callbacks=[_Recorder(out_dir, config, training, history, progress, started)],
    )
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; rewards.jsonl and the bar say it
    trainer.train(resume_from_checkpoint=last)
    return MemRerankResult(
        out_dir, trainer.state.global_step, history, len(users), utility.scored, time.perf_counter() - started
    )


def rewards_for(
    instances: Sequence[ChoiceInstance], config: MemRerankConfig
) -> tuple[UtilityReward, QualityReward]:
    """The two rewards over the training side of ``instances``, with their frozen LLMs loaded.

    The base model's frozen copy counts the extraction prompt's tokens and, unless another is named,
    is the reranker (the trainable copy is loaded separately, so the reward never sees the adapters).

    Raises:
        ValueError: no training-side instance has a history.
    """
    frozen = load_llm(config.base_model, runtime="transformers")
    extractor = PromptedExtractor(
        frozen,
        style=config.style,
        max_words=config.max_words,
        statements=config.statements,
        history_tokens=config.history_tokens,
        max_tokens=config.max_completion_length,
    )
    train = training_instances(instances, users=config.users, seed=config.seed)
    examples = {e.id: e for e in choice_examples(train, extractor, seed=config.seed)}
    if not examples:
        raise ValueError("no training-side choice instance with a history to train on")
    judge = frozen
    if config.reranker not in (None, config.base_model):
        judge = load_llm(config.reranker, runtime=config.reranker_runtime)
    reranker = SetwiseReranker(judge, shifts=config.reranker_shifts, calibrate=config.reranker_calibrate)
    return UtilityReward(examples, extractor, reranker), QualityReward(examples, extractor)


def _last_checkpoint(out_dir: Path, config: MemRerankConfig, *, resume: bool) -> str | None:
    """TRL's last checkpoint to resume from (None: start afresh), after checking it may be resumed."""
    trainer_dir = out_dir / _TRAINER
    last: str | None = get_last_checkpoint(str(trainer_dir)) if trainer_dir.is_dir() else None
    if last is None:
        return None
    if not resume:
        raise ValueError(f"{out_dir} already holds a MemRerank run; resume it or choose another folder")
    if not (out_dir / CONFIG).is_file():  # stopped between TRL's save and the export: nothing to compare
        return last
    saved = json.loads((out_dir / CONFIG).read_text(encoding="utf-8"))["training"]["config"]
    wanted = config.model_dump(mode="json")
    changed = sorted(k for k in wanted if k not in _RESUMABLE and saved.get(k) != wanted[k])
    if changed:
        raise ValueError(f"cannot resume {out_dir} with other settings: {', '.join(changed)}")
    return last


def _step_of(checkpoint: str | None) -> int:
    return 0 if checkpoint is None else int(Path(checkpoint).name.rsplit("-", 1)[1])


def _keep_history(path: Path, step: int) -> list[dict[str, float]]:
    """The reward rows up to ``step`` (a resumed run redoes the steps after its checkpoint)."""
    rows = []
    if path.is_file():
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    rows = [row for row in rows if row["step"] <= step]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows


def _policy(name: str) -> tuple[Any, Any]:
    """The trainable model (float32) and its tokenizer, from a packaged name or a model folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from personamem.llm.packaged import local_model_path, packaged_model

    folder = local_model_path(name) if packaged_model(name) else Path(name)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, padding_side="left")
    return model, tokenizer


class _Recorder(TrainerCallback):
    """Appends each step's rewards to ``rewards.jsonl`` and exports each save as an extractor checkpoint."""

    def __init__(
        self,
        out_dir: Path,
        config: MemRerankConfig,
        training: dict[str, Any],
        history: list[dict[str, float]],
        progress: Progress | None,
        started: float,
    ) -> None:
        self.out_dir = out_dir
        self.config = config
        self.training = training
        self.history = history
        self.progress = progress
        self.started = started
        self.task: TaskID | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Start the progress bar at the resumed step."""
        if self.progress is not None:
            self.task = self.progress.add_task(
                "training MemRerank", total=self.config.max_steps, completed=state.global_step
            )

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None, **_: Any
    ) -> None:
        """One ``rewards.jsonl`` row per training step's log."""
        if not logs or "reward" not in logs:  # the end-of-training summary is not a step
            return
        row = {"step": state.global_step}
        row.update(
            {k.split("/")[1]: v for k, v in logs.items() if k.startswith("rewards/") and k.endswith("/mean")}
        )
        row.update({k: logs[v] for k, v in _LOGGED.items() if v in logs})
        row["seconds"] = time.perf_counter() - self.started
        self.history.append(row)
        with (self.out_dir / REWARDS).open("a", encoding="utf-8") as file:
            file.write(json.dumps(row) + "\n")
        if self.progress is not None and self.task is not None:
            self.progress.update(
                self.task,
                completed=state.global_step,
                description=f"training MemRerank: utility {row['utility']:.3f}, quality {row['quality']:.2f}",
            )

    def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
        """Replace ``adapter/`` (written beside, then renamed in) and ``extractor.json`` with this step's."""
        partial, old, final = (self.out_dir / f"{ADAPTER}{s}" for s in (".partial", ".old", ""))
        for stale in (partial, old):
            shutil.rmtree(stale, ignore_errors=True)
        model.save_pretrained(str(partial))
        if final.exists():
            final.rename(old)
        partial.rename(final)
        shutil.rmtree(old, ignore_errors=True)
        write_extractor_config(
            self.out_dir,
            base_model=self.config.base_model,
            settings={
                "style": self.config.style,
                "max_words": self.config.max_words,
                "statements": self.config.statements,
                "history_tokens": self.config.history_tokens,
                "max_tokens": self.config.max_completion_length,
            },
            training={**self.training, "step": state.global_step, "max_steps": self.config.max_steps},
        )
