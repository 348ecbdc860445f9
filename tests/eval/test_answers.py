"""Answer metrics on hand-computed cases, and answer log-likelihood with the real small LLM."""

from __future__ import annotations

import pytest

from personamem.eval.answers import (
    answer_loglikelihood,
    exact_match,
    locomo_answer_f1,
    normalize_answer,
    rouge_l,
    token_f1,
)
from personamem.llm import TransformersLLM


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The  Eiffel-Tower!", "eiffeltower"),  # punctuation is dropped, not turned into spaces
        ("An apple a day,\n the end.", "apple day end"),
        ("theater Anna", "theater anna"),  # articles only as whole words
        ("  ", ""),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_exact_match() -> None:
    assert exact_match("The cat.", "cat") == 1.0
    assert exact_match("a black cat", "cat") == 0.0
    assert exact_match("", "the") == 1.0  # both normalise to nothing


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("the cat sat", "cat sat on mat", 2 / 3),  # p = 2/2, r = 2/4
        ("x x y", "x y y", 2 / 3),  # multiset overlap {x, y}: p = r = 2/3
        ("Paris.", "paris", 1.0),
        ("dog", "cat", 0.0),
        ("", "", 1.0),
        ("the", "an", 1.0),  # both empty once articles go
        ("", "cat", 0.0),
        ("cat", "", 0.0),
    ],
)
def test_token_f1(prediction: str, reference: str, expected: float) -> None:
    assert token_f1(prediction, reference) == pytest.approx(expected)


def test_rouge_l() -> None:
    # LCS "cat on the mat" = 4 tokens of 6 (prediction) and 7 (reference; "sitting" stems to "sit")
    assert rouge_l("the cat sat on the mat", "a cat was sitting on the mat") == pytest.approx(8 / 13)
    assert rouge_l("cats running", "cat runs") == 1.0  # Porter stemming
    assert rouge_l("Same words here", "same words here!") == 1.0
    assert rouge_l("dog", "cat") == 0.0
    assert rouge_l("", "cat") == 0.0
    assert rouge_l("", "") == 0.0  # rouge-score's convention, unlike token_f1


def test_locomo_single_answer_categories_use_token_f1() -> None:
    for category in (2, 3, 4):
        assert locomo_answer_f1("on 7 May 2023", "7 May 2023", category) == pytest.approx(6 / 7)


def test_locomo_multi_hop_averages_best_f1_per_sub_answer() -> None:
    assert locomo_answer_f1("Rome, Paris", "Paris, Rome", 1) == 1.0
    assert locomo_answer_f1("Paris", "Paris, Rome", 1) == 0.5  # (1 + 0) / 2
    assert locomo_answer_f1("rome and paris", "Paris, Rome", 1) == pytest.approx(0.5)  # each 1/3 vs 1
    assert locomo_answer_f1("Paris, Rome, Oslo", "Paris,", 1) == 1.0  # empty sub-answers ignored
    assert locomo_answer_f1("", "Paris, Rome", 1) == 0.0


def test_locomo_adversarial_rewards_abstention() -> None:
    assert locomo_answer_f1("No information available.", None, 5) == 1.0
    assert locomo_answer_f1("That is NOT MENTIONED in the conversation", "a trap", 5) == 1.0
    assert locomo_answer_f1("She went to Paris", "Paris", 5) == 0.0


def test_locomo_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="unknown LoCoMo category 6"):
        locomo_answer_f1("x", "x", 6)
    with pytest.raises(ValueError, match="needs a reference"):
        locomo_answer_f1("x", None, 2)


def test_answer_loglikelihood_prefers_the_stated_answer(llm: TransformersLLM) -> None:
    prompt = "The capital of France is"
    scores = answer_loglikelihood(llm, [prompt, prompt], [" Paris", " banana"])
    assert len(scores) == 2
    assert all(s < 0 for s in scores)
    assert scores[0] > scores[1]


def test_answer_loglikelihood_needs_one_answer_per_prompt(llm: TransformersLLM) -> None:
    with pytest.raises(ValueError):
        answer_loglikelihood(llm, ["a", "b"], [" c"])
