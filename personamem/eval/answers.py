"""Scores for generated answers against reference answers, in the conventions benchmarks report.

Exact match and token F1 follow SQuAD (normalised text, bag of tokens) because LoCoMo and most
memory papers report them that way; ROUGE-L comes from the ``rouge-score`` package so numbers match
published ones; LoCoMo's per-category protocol is reproduced from its description. The frozen LLM's
log-likelihood of the gold answer scores a memory method without generating anything.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

from personamem.llm.base import FrozenLLM, Prompt, Scores

__all__ = [
    "LOCOMO_ABSTENTIONS",
    "answer_loglikelihood",
    "exact_match",
    "locomo_answer_f1",
    "normalize_answer",
    "rouge_l",
    "token_f1",
]

LOCOMO_ABSTENTIONS = ("no information available", "not mentioned")
"""Phrases that count as declining to answer LoCoMo's adversarial (category 5) questions."""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD's rule).

    So "The Eiffel Tower." and "eiffel tower" count as the same answer: surface form is not content.
    """
    text = _ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION))
    return " ".join(text.split())


def exact_match(prediction: str, reference: str) -> float:
    """1.0 if the normalised texts are equal, else 0.0 (a float, to average with the other scores)."""
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the normalised texts' token multisets (SQuAD), crediting partially right answers.

    Both empty scores 1.0 (nothing asked, nothing said); exactly one empty scores 0.0.
    """
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    if not predicted or not expected:
        return float(predicted == expected)
    overlap = sum((Counter(predicted) & Counter(expected)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(expected)
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F-measure (longest common subsequence, Porter-stemmed), as ``rouge-score`` computes it.

    The package's conventions hold: its tokenizer keeps ASCII letters and digits only, and an empty
    text on either side scores 0.0.
    """
    return float(_rouge_scorer().score(reference, prediction)["rougeL"].fmeasure)


@cache
def _rouge_scorer() -> Any:
    """Built once: the stemmer setup is not free, and scoring many answers reuses it."""
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)


def locomo_answer_f1(prediction: str, reference: str | None, category_id: int) -> float:
    """Score an answer by LoCoMo's protocol for its question category.

    Categories 2 (temporal), 3 (open-domain) and 4 (single-hop) use token F1. Category 1 (multi-hop)
    answers list several facts, so the reference is split on commas and each sub-answer gets its best
    F1 against the prediction's comma-separated parts; the mean rewards covering every fact in any
    order. Category 5 (adversarial) has no answer: 1.0 if the prediction abstains (contains one of
    :data:`LOCOMO_ABSTENTIONS`, any case), else 0.0; ``reference`` is ignored there.

    Raises:
        ValueError: an unknown category, or no reference for categories 1–4.
    """
    if category_id == 5:
        return float(any(phrase in prediction.lower() for phrase in LOCOMO_ABSTENTIONS))
    if category_id not in (1, 2, 3, 4):
        raise ValueError(f"unknown LoCoMo category {category_id}; expected 1 to 5")
    if reference is None:
        raise ValueError(f"LoCoMo category {category_id} needs a reference answer")
    if category_id == 1:
        return _multi_answer_f1(prediction, reference)
    return token_f1(prediction, reference)


def _multi_answer_f1(prediction: str, reference: str) -> float:
    """Mean over the reference's comma-separated parts of the best F1 against a prediction part."""
    expected = _comma_parts(reference)
    if not expected:
        return token_f1(prediction, reference)
    predicted = _comma_parts(prediction)
    return sum(max((token_f1(p, e) for p in predicted), default=0.0) for e in expected) / len(expected)


def _comma_parts(text: str) -> list[str]:
    """Comma-separated parts with some content (a trailing comma is not an empty sub-answer)."""
    return [part for part in text.split(",") if normalize_answer(part)]


def answer_loglikelihood(llm: FrozenLLM, prompts: Sequence[Prompt], answers: Sequence[str]) -> Scores:
    """The frozen LLM's log p(answer | prompt) per pair: how much a prompt (with retrieved memory) helps.

    Each answer is scored exactly as given, so include the separator the prompt expects (usually a
    leading space: ``"The capital of France is"`` with ``" Paris"``). Values are sums over the answer's
    tokens in nats, comparable across prompts for the same answer; ``Scores.token_counts`` allows
    per-token normalisation when answers differ in length.

    Raises:
        ValueError: ``prompts`` and ``answers`` differ in length.
    """
    return llm.loglikelihood(list(zip(prompts, answers, strict=True)))
