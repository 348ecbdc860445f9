"""PURPLE training: the REINFORCE step, a bandit with a known best profile, checkpoints, the LLM reward.

The bandit's reward is a plain function of the profile (no LLM), so what is tested is the learning
rule; the LLM reward is tested on its own with the real SmolLM2.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from personamem import Record, SentenceEncoder
from personamem.cli import main
from personamem.errors import CheckpointError
from personamem.llm import TransformersLLM
from personamem.profile.purple import PurpleConfig
from personamem.profile.purple.checkpoint import load_checkpoint
from personamem.profile.purple.selector import PurpleSelector
from personamem.trainers.purple import PurpleDataConfig, PurpleTrainConfig, advantages, train_purple
from personamem.trainers.purple.data import ProfileExample
from personamem.trainers.purple.reward import LLMReward
from personamem.trainers.purple.utility import UtilityPoint, gold_auc, gold_auc_gap, pearson, record_utility
from tests.conftest import DATA, need_data

FOOD = ["I'm vegan and cook lentils most nights.", "My favourite dish is a spicy tofu curry."]
OTHER = [
    "I take the 8:15 train to work.",
    "My sister Ana lives in Porto.",
    "I play the cello on Sundays.",
    "Our flat has a small balcony.",
    "I was born in 1990.",
    "I'm reading a novel about sailors.",
]


def _examples(n: int, user: str = "u") -> list[ProfileExample]:
    records = [
        Record(user_id=user, id=f"r{i}", text=t) for i, t in enumerate([*OTHER[:3], *FOOD, *OTHER[3:]])
    ]
    queries = ["what should I cook tonight?", "plan my dinner", "a recipe for me?", "what do I like to eat?"]
    return [
        ProfileExample(
            f"{user}-{i}",
            user,
            queries[i % len(queries)],
            "tofu curry",
            tuple(records[i % 3 :] + records[: i % 3]),
        )
        for i in range(n)
    ]


def food_reward(requests: Sequence[tuple[ProfileExample, Sequence[Record]]]) -> list[float]:
    """A bandit whose best profile is known: +1 per food record, more when it comes first."""
    return [
        sum((2.0 if rank == 0 else 1.0) for rank, r in enumerate(p) if r.text in FOOD) for _, p in requests
    ]


def _config(**overrides: object) -> PurpleTrainConfig:
    base = {"model": PurpleConfig(layers=1, dropout=0.0), "k": 2, "batch_size": 4, "samples": 16, "lr": 3e-3}
    return PurpleTrainConfig(**{**base, **overrides})  # type: ignore[arg-type]


def test_advantages_per_example() -> None:
    rewards = torch.tensor([[0.0, 0.0, 0.0, 30.0], [1.0, 2.0, 3.0, 4.0]])
    z = advantages(rewards, "zscore")
    assert torch.allclose(z.mean(dim=1), torch.zeros(2), atol=1e-6) and float(z[0, 3]) == pytest.approx(
        1.5, rel=1e-3
    )
    rank = advantages(rewards, "rank")
    assert torch.equal(rank[1], torch.tensor([-1.0, -1 / 3, 1 / 3, 1.0]))
    clip = advantages(rewards, "clip", clip_nats=5.0)
    assert float(clip[0, 3]) == 1.0 and float(clip[0, 0]) == pytest.approx(-1.0)  # 30 nats counts as 5


def test_one_step_changes_every_trainable_parameter(tmp_path: Path, encoder: SentenceEncoder) -> None:
    train, validation = _examples(4), _examples(2, "v")
    train_purple(train, validation, encoder, food_reward, _config(steps=1, validate_every=1), tmp_path)
    before, _ = load_checkpoint(tmp_path / "last", encoder=encoder.name)
    train_purple(
        train, validation, encoder, food_reward, _config(steps=2, validate_every=1), tmp_path, resume=True
    )
    after, training = load_checkpoint(tmp_path / "last", encoder=encoder.name)
    params = dict(before.named_parameters())
    unchanged = [n for n, p in after.named_parameters() if torch.equal(p, params[n])]
    assert not unchanged and training["step"] == 2


def test_the_policy_learns_a_bandit_with_a_known_best_profile(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    config = _config(steps=60, validate_every=20)
    validation = _examples(4, "v")
    result = train_purple(_examples(8), validation, encoder, food_reward, config, tmp_path)
    selector = PurpleSelector.load(result.best, encoder)
    for example in validation:
        picked = selector.select(example.user_id, example.query, example.candidates, 2)
        assert {h.record.text for h in picked} == set(FOOD)
    assert selector.cache is not None and (selector.cache.hits, selector.cache.misses) == (24, 8)
    assert result.best_validation == pytest.approx(3.0)  # both food records, one of them first


def test_resume_continues_from_the_last_checkpoint(tmp_path: Path, encoder: SentenceEncoder) -> None:
    train, validation = _examples(4), _examples(2, "v")
    train_purple(train, validation, encoder, food_reward, _config(steps=2, validate_every=2), tmp_path)
    result = train_purple(
        train, validation, encoder, food_reward, _config(steps=4, validate_every=2), tmp_path, resume=True
    )
    steps = [row["step"] for row in result.history if "loss" in row]
    assert steps == [1, 2, 3, 4] and result.profiles_rewarded == 2 * 4 * 16  # only the new steps
    assert all(row["seconds"] > 0 for row in result.history if "loss" in row)  # wall time per step, kept


def test_checkpoint_for_another_encoder_is_refused(tmp_path: Path, encoder: SentenceEncoder) -> None:
    train_purple(_examples(2), _examples(1, "v"), encoder, food_reward, _config(steps=1), tmp_path)
    with pytest.raises(CheckpointError, match="trained on token states of encoder"):
        load_checkpoint(tmp_path / "best", encoder="another-encoder")
    with pytest.raises(CheckpointError, match="not a PURPLE checkpoint"):
        load_checkpoint(tmp_path / "nothing")


def test_the_data_source_holds_out_whole_users() -> None:
    examples = [e for user in "abcde" for e in _examples(2, user)]
    source = PurpleDataConfig(
        benchmark="locomo", data=Path("x"), validation_users=1, test_users=2, split_seed=3
    )
    split = source.split(Counter(e.user_id for e in examples), what="PURPLE", need_train=1, hint="")
    users = [set(split.train), set(split.validation), set(split.test)]
    assert [len(u) for u in users] == [2, 1, 2] and not (users[0] & users[1]) and not (users[0] & users[2])
    with pytest.raises(ValueError, match="2 users cannot give"):
        source.model_copy(update={"test_users": 1}).split({"a": 2, "b": 2}, what="", need_train=1, hint="")


def test_llm_reward_prefers_the_profile_with_the_answer_and_caches(llm: TransformersLLM) -> None:
    example = _examples(1)[0]
    food = [r for r in example.candidates if r.text in FOOD]
    other = [r for r in example.candidates if r.text not in FOOD][:2]
    reward = LLMReward(llm)
    with_answer, without = reward([(example, food), (example, other)])
    assert with_answer > without
    assert reward([(example, food), (example, food)]) == [with_answer, with_answer]
    assert (reward.scored, reward.hits) == (2, 2)
    uncached = LLMReward(llm, cache=False)
    again = uncached([(example, food), (example, food)])
    assert again == pytest.approx([with_answer, with_answer], abs=1e-3) and (
        uncached.scored,
        uncached.hits,
    ) == (2, 0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # most sessions exceed 256 tokens
def test_train_command_holds_out_users_and_writes_a_checkpoint(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "purple"
    argv = ["train", "purple", "--benchmark", "personabench", "--data", str(need_data(DATA / "personabench"))]
    argv += ["--out", str(out), "--steps", "2", "--batch-size", "2", "--samples", "2", "--candidates", "4"]
    argv += [
        "--k",
        "1",  # one session per profile: the reward's prompts are what the test's time goes to
        "--layers",
        "1",
        "--max-train",
        "4",
        "--max-validation",
        "2",
        "--validate-every",
        "1",
        "--llm-runtime",  # the command's wiring is under test here, not the reference reward
        "ctranslate2",
    ]
    assert main(argv) == 0
    split = json.loads((out / "split.json").read_text(encoding="utf-8"))
    assert split["test_users"] and not set(split["test_users"]) & set(split["train_users"])
    assert not set(split["validation_users"]) & set(split["train_users"])
    assert (out / "best" / "model.safetensors").is_file() and (out / "last" / "engine").is_dir()
    assert "best step, validation reward" in capsys.readouterr().out
    assert main([*argv, "--advantage", "median"]) == 2  # a bad option names itself, nothing is trained
    other = tmp_path / "purple-seed-1"
    smaller = ["--steps", "1", "--max-train", "2", "--max-validation", "1"]  # only the split is compared
    assert main([*argv, "--out", str(other), "--seed", "1", *smaller]) == 0
    resplit = json.loads((other / "split.json").read_text(encoding="utf-8"))
    assert resplit["split_seed"] == 0 and resplit["test_users"] == split["test_users"]  # seeds compare


def test_profile_methods_run_through_the_harness(tmp_path: Path, encoder: SentenceEncoder) -> None:
    from personamem.datasets.benchmark import Benchmark, Question
    from personamem.eval.runner import evaluate_method
    from personamem.methods import method_named
    from personamem.store import Store

    examples = _examples(1)
    train_purple(examples, _examples(1, "v"), encoder, food_reward, _config(steps=1), tmp_path / "ckpt")
    records = list(examples[0].candidates)
    bench = Benchmark(
        "toy", records, [Question(id="q", user_id="u", text="what should I cook?", relevant={"r3": 1})]
    )
    store = Store.open(tmp_path / "store", encoder=encoder)
    store.add_many(records)
    try:
        for name in ("random5", "earliest5", f"purple:{tmp_path / 'ckpt' / 'best'}"):
            run = evaluate_method(method_named(name, None), bench, store, seeds=[0, 1], depth=10)
            ranking = run.rankings[run.seeds[0]]["q"]
            assert sorted(ranking) == sorted(r.id for r in records)  # the profile first, then the rest
            assert run.stochastic == (name == "random5")
    finally:
        store.close()
    with pytest.raises(ValueError, match="needs a frozen LLM"):
        method_named("listwise", None)


def test_utility_of_the_record_holding_the_answer_is_highest(
    llm: TransformersLLM, encoder: SentenceEncoder
) -> None:
    records = tuple(
        Record(user_id="u", id=str(i), text=t)
        for i, t in enumerate(
            ["I play the cello.", "I'm vegan, no animal products.", "My sister lives in Porto."]
        )
    )
    example = ProfileExample("q", "u", "What diet do I follow?", "Vegan.", records)
    points = record_utility(llm, encoder, [example])
    best = max(points, key=lambda p: p.utility)
    assert best.record_id == "1" and best.utility > 1.0
    assert all(-1.0 <= p.relevance <= 1.0 for p in points)
    r, p = pearson(points)
    assert -1.0 <= r <= 1.0 and 0.0 <= p <= 1.0
    with pytest.raises(ValueError, match="at least 3 points"):
        pearson(points[:2])
    vegan = gold_auc(points, {("q", "1")})  # the record with the answer has the most utility
    assert vegan is not None and vegan[0] == 1.0 and 0.0 <= vegan[1] <= 1.0
    porto = gold_auc(points, {("q", "2")})  # the sister in Porto holds no answer
    assert porto is not None and porto[0] < 1.0
    assert gold_auc(points, set()) is None and gold_auc(points, {("q", r.id) for r in records}) is None
    gap = gold_auc_gap(points, {("q", "1")})
    assert gap is not None and gap[0] == pytest.approx(vegan[0] - vegan[1])
    assert gap[1] == pytest.approx(gap[0]) == pytest.approx(gap[2])  # one question: every draw is it
    assert gold_auc_gap(points, set()) is None


def test_gold_auc_gap_resamples_questions() -> None:
    """Utility that always puts the gold record first, relevance that mostly does not: CI above 0."""
    points, gold = [], set()
    for q in range(12):
        for r in range(5):
            relevance = 0.9 - 0.1 * r if q % 3 == 0 else 0.5 + 0.1 * r  # gold (r = 0) first for 1/3 only
            points.append(UtilityPoint(f"q{q}", f"r{r}", relevance, 3.0 if r == 0 else -0.1 * r))
        gold.add((f"q{q}", "r0"))
    gap = gold_auc_gap(points, gold, resamples=500)
    assert gap is not None and gap[1] > 0 and gap[1] <= gap[0] <= gap[2]
    swapped = [UtilityPoint(p.question_id, p.record_id, p.utility, p.relevance) for p in points]
    reverse = gold_auc_gap(swapped, gold, resamples=500)
    assert reverse is not None and reverse[2] < 0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")
def test_analyze_utility_command(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    data = need_data(DATA / "personabench")
    argv = ["analyze", "utility", "--benchmark", "personabench", "--data", str(data), "--out", str(tmp_path)]
    argv += ["--llm-runtime", "ctranslate2"]  # the command's wiring is under test, not the reference scores
    assert main([*argv, "--user", "nobody"]) == 2
    assert "has no answered questions" in capsys.readouterr().err
    from personamem.datasets.personabench import load_personabench_benchmark

    first = next(q.user_id for q in load_personabench_benchmark(data).questions if q.answer)
    assert main([*argv, "--user", first, "--questions", "2", "--candidates", "3"]) == 0
    written = json.loads((tmp_path / "utility.json").read_text(encoding="utf-8"))
    assert len(written["points"]) == 6 and (tmp_path / "utility.png").stat().st_size > 0
    assert "Pearson r" in capsys.readouterr().out
    assert {"gold_auc_utility", "gold_auc_relevance", "gold_auc_gap_ci95"} <= set(written)


def test_a_selector_on_vectors_learns_the_bandit_and_serves_context_with_the_first_stage_vector(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    from personamem import PersonaMem

    config = _config(steps=40, validate_every=20, model=PurpleConfig(layers=1, dropout=0.0, inputs="vectors"))
    result = train_purple(_examples(8), _examples(4, "v"), encoder, food_reward, config, tmp_path / "ckpt")
    assert result.best_validation == pytest.approx(3.0)  # both food records, one of them first
    selector = PurpleSelector.load(result.best, encoder)
    example = _examples(1, "v")[0]
    query, candidates = example.query, list(example.candidates)
    alone = selector.select("v", query, candidates, 2)
    given = selector.select_with_vector("v", query, encoder.encode([query])[0], candidates, 2)
    assert [h.record.text for h in alone] == [h.record.text for h in given] and {
        h.record.text for h in alone
    } == set(FOOD)
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:  # the pipeline hands over its vector
        mem.add_many([Record(user_id="ana", id=r.id, text=r.text) for r in candidates])
        context = mem.context("ana", query, method=f"purple:{result.best}")
        assert {h.record.text for h in context.hits[:2]} == set(FOOD) and "select" in context.timings_ms
