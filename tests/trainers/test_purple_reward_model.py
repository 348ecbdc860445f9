"""PURPLE's cheap reward: the LLM's scores kept in a file, R̂ fitted to them, the warm start, patience.

The bandit reward (a plain function of the profile) tests the fitting and the loop; the file-backed
cache is tested with the real SmolLM2.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import SentenceEncoder
from personamem.errors import CheckpointError
from personamem.llm import TransformersLLM
from personamem.profile.purple.selector import PurpleSelector
from personamem.trainers.purple import train_purple
from personamem.trainers.purple.reward import LLMReward
from personamem.trainers.purple.reward_model import (
    DistilledReward,
    agreement,
    fit_reward_model,
    load_reward_model,
    sample_profiles,
    save_reward_model,
)
from tests.trainers.test_purple_train import FOOD, _config, _examples, food_reward


def _with_gold(examples: list) -> list:
    from dataclasses import replace

    return [replace(e, gold=frozenset(r.id for r in e.candidates if r.text in FOOD)) for e in examples]


def test_sampled_profiles_start_with_the_first_stage_top_k_and_are_distinct() -> None:
    example = _examples(1)[0]
    drawn = sample_profiles([example], k=3, per_example=6, seed=0)
    orders = [tuple(r.id for r in p) for _, p in drawn]
    assert orders[0] == tuple(r.id for r in example.candidates[:3]) and len(set(orders)) == 6


def test_reward_model_learns_the_bandit_and_agrees_on_held_out_questions(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    train = _examples(12)
    held_out = _with_gold(_examples(4, "v"))
    scored = sample_profiles(train, 2, 8, seed=0) + sample_profiles(held_out, 2, 8, seed=1)
    scores = {
        (e.id, tuple(r.id for r in p)): value
        for (e, p), value in zip(scored, food_reward(scored), strict=True)
    }
    model = fit_reward_model(train, scores, encoder, epochs=200)
    agreed = agreement(DistilledReward(model, encoder), held_out, scores)
    assert agreed.questions == 4 and agreed.pairwise > 0.85 and agreed.spearman > 0.7
    assert agreed.gold_auc_llm == 1.0 and agreed.gold_auc_model is not None and agreed.gold_auc_model > 0.9
    save_reward_model(model, tmp_path / "rm")
    again = DistilledReward(load_reward_model(tmp_path / "rm"), encoder)
    request = [(held_out[0], list(held_out[0].candidates[:2]))]
    assert again(request) == pytest.approx(DistilledReward(model, encoder)(request), abs=1e-6)
    with pytest.raises(ValueError, match="at least 2 examples"):
        fit_reward_model(train, {}, encoder)
    (tmp_path / "rm" / "config.json").write_text('{"dim": 384, "hidden": 128, "slots": 5}', encoding="utf-8")
    with pytest.raises(CheckpointError, match="delete the folder to refit"):  # the first version's shape
        load_reward_model(tmp_path / "rm")


def test_llm_reward_keeps_its_scores_in_a_file(tmp_path: Path, llm: TransformersLLM) -> None:
    example = _examples(1)[0]
    profiles = [(example, list(example.candidates[:2])), (example, list(example.candidates[2:4]))]
    path = tmp_path / "rewards.jsonl"
    first = LLMReward(llm, path=path)
    scores = first(profiles)
    assert len(path.read_text(encoding="utf-8").splitlines()) == 2
    resumed = LLMReward(llm, path=path)  # a later sitting: nothing is scored again
    assert resumed(profiles) == scores and (resumed.scored, resumed.hits) == (0, 2)
    row = json.loads(path.read_text(encoding="utf-8").splitlines()[0])
    path.write_text(path.read_text(encoding="utf-8") + json.dumps({**row, "llm": "another-llm"}) + "\n")
    with pytest.raises(ValueError, match=r"rewards.jsonl:3: scored by 'another-llm'"):
        LLMReward(llm, path=path)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"rewards.jsonl:1: not a cached reward"):
        LLMReward(llm, path=path)


def test_training_starts_at_the_first_stage_and_stops_when_patience_runs_out(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    train, validation = _examples(4), _examples(3, "v")

    def flat(requests: object) -> list[float]:  # nothing to learn: no validation beats step 0
        return [0.0] * len(requests)  # type: ignore[arg-type]

    config = _config(steps=50, validate_every=2, patience=3)
    result = train_purple(train, validation, encoder, flat, config, tmp_path, validation_reward=food_reward)
    validations = [row for row in result.history if "validation" in row]
    assert validations[0] == {"step": 0, "validation": pytest.approx(1 / 3)}  # the first stage's top 2
    assert result.best_step == 0 and [row["step"] for row in validations] == [0, 2, 4, 6]
    selector = PurpleSelector.load(result.best, encoder)  # best/ is the warm start: the first stage's order
    for example in validation:
        picked = selector.select(example.user_id, example.query, example.candidates, 2)
        assert [h.record.id for h in picked] == [r.id for r in example.candidates[:2]]
