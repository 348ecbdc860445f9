"""MemRerank's rewards: the frozen reranker's probability of the user's item, and a quality score.

R = utility + λ · quality. ``utility`` is the probability :class:`SetwiseReranker` gives the positive
candidate when shown the memory exactly as an application shows it
(:meth:`PreferenceMemory.text` for the instance's category), with the candidates in the example's
seeded order; it is what ``personamem eval-memory`` reports as P(positive). ``quality`` is
:func:`~personamem.preference.quality.memory_quality`'s score in [0, 1]; λ is applied by TRL
(``reward_weights``), so the logged quality stays a pass rate.

An answer the parser rejects (no bulleted statement) is an empty memory, which is what an
application would then show the reranker: its utility is the no-memory baseline P(positive | nothing
known), and every quality check fails. No special case, and a rejected answer is never rewarded above
a usable one on quality.

:func:`utility` and :func:`quality` are pure functions of (answer, example); :class:`UtilityReward`
and :class:`QualityReward` are TRL's reward callables around them. Utilities are cached by (example,
memory text): a rejected answer's empty memory, and any memory sampled twice, is scored once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from personamem.preference.extractor import PromptedExtractor
from personamem.preference.memory import PreferenceMemory
from personamem.preference.quality import memory_quality
from personamem.preference.setwise import SetwiseReranker, shuffled
from personamem.trainers.memrerank.data import ChoiceExample

__all__ = ["QualityReward", "UtilityReward", "memory_text", "quality", "utility"]

Completion = Sequence[Mapping[str, Any]]
"""A conversational completion as TRL passes it: ``[{"role": "assistant", "content": text}]``."""


def memory_text(answer: str, example: ChoiceExample, extractor: PromptedExtractor) -> str:
    """What the reranker is shown for this answer: the parsed memory's text for the instance's category."""
    parsed = extractor.parse(answer, example.prompt)
    memory = PreferenceMemory(example.instance.user_id, within=parsed.within, cross=parsed.cross)
    return memory.text(example.instance.category)


def utility(
    answer: str, example: ChoiceExample, extractor: PromptedExtractor, reranker: SetwiseReranker
) -> float:
    """The reranker's probability of the positive candidate given the memory ``answer`` parses to."""
    return _positive_probability(memory_text(answer, example, extractor), example, reranker)


def quality(answer: str, example: ChoiceExample, extractor: PromptedExtractor) -> float:
    """The memory's quality score in [0, 1] (0 for a rejected answer), against the history it was shown."""
    parsed = extractor.parse(answer, example.prompt)
    return memory_quality(parsed, example.prompt.shown_texts).score


def _positive_probability(text: str, example: ChoiceExample, reranker: SetwiseReranker) -> float:
    instance = example.instance
    shown, order = shuffled(list(instance.candidates), example.order_seed)
    probabilities = reranker.choice_probabilities(instance.query, text, shown)
    return probabilities[order.index(0)]  # order[pos] is the original index; the positive is index 0


class UtilityReward:
    """TRL reward callable: :func:`utility` of each completion, cached by (example, memory text).

    Args:
        examples: the training examples by id (the dataset's ``instance_id`` column).
        extractor: parses answers (its style and word budget are the checkpoint's).
        reranker: the frozen reranker.

    Attributes:
        scored: utilities the reranker computed.
        hits: utilities served from the cache.
    """

    __name__ = "utility"  # TRL logs rewards/<__name__>/mean

    def __init__(
        self,
        examples: Mapping[str, ChoiceExample],
        extractor: PromptedExtractor,
        reranker: SetwiseReranker,
    ) -> None:
        self.examples = examples
        self.extractor = extractor
        self.reranker = reranker
        self._cache: dict[tuple[str, str], float] = {}
        self.scored = 0
        self.hits = 0

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Completion], instance_id: Sequence[str], **_: Any
    ) -> list[float]:
        """One utility per completion; ``instance_id`` is the dataset column, repeated per completion."""
        rewards = []
        for completion, key in zip(completions, instance_id, strict=True):
            example = self.examples[key]
            text = memory_text(_answer(completion), example, self.extractor)
            if (key, text) in self._cache:
                self.hits += 1
            else:
                self._cache[key, text] = _positive_probability(text, example, self.reranker)
                self.scored += 1
            rewards.append(self._cache[key, text])
        return rewards


class QualityReward:
    """TRL reward callable: :func:`quality` of each completion (weighted by λ through TRL)."""

    __name__ = "quality"

    def __init__(self, examples: Mapping[str, ChoiceExample], extractor: PromptedExtractor) -> None:
        self.examples = examples
        self.extractor = extractor

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Completion], instance_id: Sequence[str], **_: Any
    ) -> list[float]:
        """One quality score per completion."""
        return [
            quality(_answer(completion), self.examples[key], self.extractor)
            for completion, key in zip(completions, instance_id, strict=True)
        ]


def _answer(completion: Completion) -> str:
    """The generated text of a conversational completion (the assistant message TRL decoded)."""
    return str(completion[-1]["content"])
