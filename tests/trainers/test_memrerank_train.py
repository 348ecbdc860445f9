"""MemRerank's GRPO trainer: a smoke run with the real SmolLM2, its checkpoint, resume and command.

SmolLM2-135M almost never writes the bulleted format in 8 tokens, and a group of rejected answers
has equal rewards and no gradient; so the smoke run adds a length reward, which always differs
within a group, beside the real utility and quality. What is checked is the wiring: every adapter
weight moves, the checkpoint loads, the reward curve is written, a resumed run continues.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from personamem.cli import main
from personamem.datasets.choice import ChoiceInstance, split_users
from personamem.preference.checkpoint import load_extractor
from personamem.records import Record
from personamem.trainers.memrerank import REWARDS, MemRerankConfig, train_memrerank
from tests.conftest import DATA, need_data

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),  # a loaded 2-core machine trains ~4x faster so
    # TRL 1.16 calls the deprecated name in transformers 5.24; nothing for us to change
    pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning"),
]

HISTORIES = {
    "user-a": ("Fragrance-free moisturizer, no rash.", "Unscented sunscreen."),
    "user-b": ("Bright red matte lipstick.", "Bold glitter eyeshadow."),
    "user-c": ("Sulfate-free shampoo for curls.",),
    "user-d": ("Travel-size toothpaste.", "Mini dry shampoo."),
}
ITEMS = ("Unscented face cream.", "Neon nail polish.", "Cedar beard oil.", "Vanilla perfume.", "Hair dryer.")
INSTANCES = [
    ChoiceInstance(
        f"train/{user}",
        user,
        tuple(Record(user_id=user, id=f"{user}-{i}", text=t, category="beauty") for i, t in enumerate(texts)),
        "",
        ITEMS[n:] + ITEMS[:n],
        "beauty",
        user,
    )
    for n, (user, texts) in enumerate(HISTORIES.items())
]


def length(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
    """Characters of each answer / 100: a reward that differs within every group."""
    return [len(c[-1]["content"]) / 100 for c in completions]


def _config(**overrides: Any) -> MemRerankConfig:
    small = {
        "max_completion_length": 8,
        "num_generations": 2,
        "prompts_per_step": 2,
        "reranker_shifts": 1,
        "save_every": 1,
        "max_steps": 1,
    }
    return MemRerankConfig(**{**small, **overrides})


@pytest.mark.slow
def test_grpo_moves_every_adapter_weight_and_resumes_from_the_saved_step(tmp_path: Path) -> None:
    assert {i.group for i in INSTANCES} <= split_users([i.group for i in INSTANCES])[0]  # all train-side
    first = train_memrerank(INSTANCES, _config(), tmp_path, extra_rewards=[(length, 1.0)])
    assert first.step == 1 and first.users == 4
    after_one = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    assert len(after_one) == 2 * 7 * 30  # A and B of 7 projections in SmolLM2's 30 layers
    assert all(t.abs().sum() > 0 for k, t in after_one.items() if "lora_B" in k)  # B starts at zero

    with pytest.raises(ValueError, match="already holds a MemRerank run"):
        train_memrerank(INSTANCES, _config(max_steps=2), tmp_path)
    with pytest.raises(ValueError, match="other settings: learning_rate"):
        train_memrerank(INSTANCES, _config(max_steps=2, learning_rate=1e-4), tmp_path, resume=True)
    result = train_memrerank(
        INSTANCES, _config(max_steps=2), tmp_path, resume=True, extra_rewards=[(length, 1.0)]
    )

    rows = [json.loads(line) for line in (tmp_path / REWARDS).read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in rows] == [1, 2] == [r["step"] for r in result.history]  # not 1, 1, 2
    assert {"utility", "quality", "length", "reward", "loss"} <= set(rows[0])
    assert all(0.0 <= r["utility"] <= 1.0 and 0.0 <= r["quality"] <= 1.0 for r in rows)
    state = json.loads(
        (tmp_path / "trainer" / "checkpoint-2" / "trainer_state.json").read_text(encoding="utf-8")
    )
    assert result.step == state["global_step"] == 2
    after_two = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    unchanged = [k for k, t in after_one.items() if torch.equal(t, after_two[k])]
    assert not unchanged  # A moved once B had (A's gradient is zero while B is)

    saved = json.loads((tmp_path / "extractor.json").read_text(encoding="utf-8"))
    assert saved["training"]["step"] == 2 and saved["extractor"]["max_tokens"] == 8
    extractor = load_extractor(tmp_path)
    assert extractor.style == "sections" and extractor.max_tokens == 8
    memory = extractor.extract("user-a", None, INSTANCES[0].history)
    assert memory.extractor.startswith(f"memrerank:{tmp_path.resolve()}")


def test_bad_options_name_themselves_before_anything_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "memrerank", "--data", str(tmp_path), "--out", str(tmp_path / "out")]
    assert main([*argv, "--lambda-quality", "0.9"]) == 2
    assert "--lambda-quality" in capsys.readouterr().err
    assert main([*argv, "--num-generations", "1"]) == 2
    assert main(argv) == 1  # no train.jsonl there
    assert "Amazon Beauty split file not found" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # long reviews
def test_train_command_trains_on_training_side_users_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = (need_data(DATA / "amazon_beauty") / "train.jsonl").read_text().splitlines()[:110]
    data = tmp_path / "amazon"  # the first 110 users: enough for the negatives' last band, ranks 50-100
    data.mkdir()
    (data / "train.jsonl").write_text("\n".join(lines) + "\n")
    argv = ["train", "memrerank", "--data", str(data), "--out", str(tmp_path), "--users", "2"]
    argv += ["--max-steps", "1", "--num-generations", "2", "--prompts-per-step", "1"]
    argv += ["--max-completion-length", "8", "--history-tokens", "128", "--reranker-shifts", "1"]
    assert main(argv) == 0
    users = json.loads((tmp_path / "split.json").read_text(encoding="utf-8"))["train_users"]
    _, test = split_users(users)
    assert len(users) == 2 and not set(users) & test
    assert len((tmp_path / REWARDS).read_text(encoding="utf-8").splitlines()) == 1
    assert "MemRerank training" in capsys.readouterr().out and (tmp_path / "adapter").is_dir()
