"""MemRerank's rewards and training data, against the real SmolLM2 reranker and hand-made memories.

Utility is checked against :class:`SetwiseReranker` called directly on the memory text written out
by hand and the shuffled candidates; each quality check against an answer that fails it alone.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from personamem.datasets.choice import ChoiceInstance, split_users
from personamem.llm import TransformersLLM
from personamem.preference.extractor import PromptedExtractor
from personamem.preference.quality import memory_quality
from personamem.preference.setwise import SetwiseReranker, shuffled
from personamem.records import Record
from personamem.trainers.memrerank import MemRerankConfig
from personamem.trainers.memrerank.data import (
    ChoiceExample,
    choice_examples,
    to_dataset,
    training_instances,
)
from personamem.trainers.memrerank.reward import QualityReward, UtilityReward, memory_text, quality, utility

HISTORY = (
    "Fragrance-free moisturizer, finally no rash on my sensitive skin.",
    "Unscented sunscreen that does not sting my eyes.",
)
CANDIDATES = (
    "Gentle unscented face cream for sensitive skin.",
    "Neon nail polish set with glitter.",
    "Beard oil with a strong cedar scent.",
    "Heavy vanilla perfume sampler.",
    "Ceramic hair straightener.",
)
pytestmark = pytest.mark.usefixtures("one_torch_thread")  # a loaded 2-core machine scores faster so

GOOD = "WITHIN beauty:\n- avoids fragrance in skincare [1, 2]\nCROSS:\n- picks gentle products [2]"


def _instance(user: str = "user-a", history: tuple[str, ...] = HISTORY) -> ChoiceInstance:
    records = tuple(
        Record(user_id=user, id=f"{user}-{i}", text=t, category="beauty") for i, t in enumerate(history)
    )
    return ChoiceInstance(f"train/{user}", user, records, "", CANDIDATES, "beauty", user)


@pytest.fixture(scope="module")
def extractor(llm: TransformersLLM) -> PromptedExtractor:
    return PromptedExtractor(llm)


@pytest.fixture(scope="module")
def reranker(llm: TransformersLLM) -> SetwiseReranker:
    return SetwiseReranker(llm)


@pytest.fixture(scope="module")
def example(extractor: PromptedExtractor) -> ChoiceExample:
    (found,) = choice_examples([_instance()], extractor, seed=0)
    _, order = shuffled(list(CANDIDATES), found.order_seed)
    assert order.index(0) != 0  # the positive is not shown first: the shuffle is what is checked
    return found


def _completion(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def test_utility_is_the_rerankers_probability_of_the_positive_where_it_is_shown(
    example: ChoiceExample, extractor: PromptedExtractor, reranker: SetwiseReranker
) -> None:
    shown_text = "WITHIN beauty:\n- avoids fragrance in skincare\nCROSS:\n- picks gentle products"
    assert memory_text(GOOD, example, extractor) == shown_text  # evidence stripped, as an LLM sees it
    shown, order = shuffled(list(CANDIDATES), example.order_seed)
    direct = reranker.choice_probabilities("", shown_text, shown)
    assert utility(GOOD, example, extractor, reranker) == pytest.approx(direct[order.index(0)], abs=1e-9)
    assert 0.0 < direct[order.index(0)] < 1.0


def test_another_categorys_section_is_not_shown_and_a_rejected_answer_is_an_empty_memory(
    example: ChoiceExample, extractor: PromptedExtractor, reranker: SetwiseReranker
) -> None:
    other = "WITHIN skincare:\n- likes serums [1]\nCROSS:\n- buys minis [2]"
    assert memory_text(other, example, extractor) == "CROSS:\n- buys minis"  # as PreferenceMemory.text
    prose = "This person loves beauty products and writes long reviews."
    assert memory_text(prose, example, extractor) == ""
    shown, order = shuffled(list(CANDIDATES), example.order_seed)
    nothing = reranker.choice_probabilities("", "", shown)[order.index(0)]
    assert utility(prose, example, extractor, reranker) == pytest.approx(nothing, abs=1e-9)
    assert quality(prose, example, extractor) == 0.0


def test_utility_reward_scores_each_memory_once(
    example: ChoiceExample, extractor: PromptedExtractor, reranker: SetwiseReranker
) -> None:
    reward = UtilityReward({example.id: example}, extractor, reranker)
    answers = [GOOD, GOOD + "\n", "prose only", "more prose"]  # two memories: GOOD's and the empty one
    got = reward([None] * 4, [_completion(a) for a in answers], instance_id=[example.id] * 4)
    assert got[0] == got[1] and got[2] == got[3]
    assert got[0] == pytest.approx(utility(GOOD, example, extractor, reranker), abs=1e-9)
    assert (reward.scored, reward.hits) == (2, 2)
    assert reward.__name__ == "utility"  # TRL logs rewards/<__name__>/mean of instances
    assert QualityReward({example.id: example}, extractor).__name__ == "quality"


@pytest.mark.parametrize(
    ("failing", "answer"),
    [
        (None, GOOD),
        ("structure", "- avoids fragrance in skincare [1, 2]\n- picks gentle products [2]"),
        ("within", "CROSS:\n- avoids fragrance in skincare [1, 2]"),
        (
            "concise",
            "WITHIN beauty:\n- wants every single cream, lotion, sunscreen and cleanser she buys to be "
            "completely free of any added fragrance or perfume because strong scents make her face red [1]",
        ),
        (
            "no_repetition",
            "WITHIN beauty:\n- prefers fragrance free skincare products [1]\n"
            "- prefers fragrance free skincare products always [2]",
        ),
        ("no_placeholder", "WITHIN beauty:\n- avoids fragrance in TBD products [1]"),
        ("no_copying", "WITHIN beauty:\n- moisturizer finally no rash on my sensitive skin [1]"),
    ],
)
def test_quality_fails_exactly_the_check_an_answer_breaks(
    failing: str | None, answer: str, example: ChoiceExample, extractor: PromptedExtractor
) -> None:
    report = memory_quality(extractor.parse(answer, example.prompt), HISTORY)
    assert {name for name, passed in report.checks.items() if not passed} == ({failing} if failing else set())
    expected = 1.0 if failing is None else (len(report.checks) - 1) / len(report.checks)
    assert quality(answer, example, extractor) == pytest.approx(expected)
    reward = QualityReward({example.id: example}, extractor)
    assert reward([None], [_completion(answer)], instance_id=[example.id]) == [pytest.approx(expected)]


def test_the_quality_term_is_weighted_by_lambda_and_capped_below_the_utility(tmp_path: object) -> None:
    from personamem.trainers.memrerank import grpo_config

    args = grpo_config(MemRerankConfig(lambda_quality=0.2), tmp_path / "trl")  # type: ignore[operator]
    assert args.reward_weights == [1.0, 0.2]  # R = utility + 0.2 · quality, quality in [0, 1]
    assert args.per_device_train_batch_size == 16 and args.num_generations == 4  # 4 users × G = 4
    assert args.use_cpu and not args.bf16 and args.report_to == []
    for bad in (0.6, -0.1):
        with pytest.raises(ValidationError, match="lambda_quality"):
            MemRerankConfig(lambda_quality=bad)


def test_training_instances_never_include_the_test_side() -> None:
    users = [f"user-{c}" for c in "abcdefghij"]
    train, test = split_users(users)
    kept = training_instances([_instance(u) for u in users])
    assert {i.group for i in kept} == train and test  # the split is the one eval-memory holds out
    two = training_instances([_instance(u) for u in users], users=2, seed=1)
    assert len(two) == 2 and {i.group for i in two} <= train
    assert two == training_instances([_instance(u) for u in users], users=2, seed=1)


def test_examples_and_dataset(extractor: PromptedExtractor) -> None:
    empty = _instance("user-b", history=())
    examples = choice_examples([_instance(), empty], extractor, seed=0)
    assert [e.id for e in examples] == ["train/user-a"]  # nothing to extract from an empty history
    assert examples[0].order_seed != choice_examples([_instance()], extractor, seed=1)[0].order_seed
    dataset = to_dataset(examples)
    assert dataset.column_names == ["prompt", "instance_id"]
    assert dataset[0]["prompt"] == examples[0].prompt.messages and dataset[0]["instance_id"] == "train/user-a"
    with pytest.raises(ValueError, match="distinct ids"):
        choice_examples([_instance(), _instance()], extractor)
