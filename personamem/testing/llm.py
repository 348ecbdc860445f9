"""Test support for the frozen-LLM layer: a contract every backend passes and a scripted fake.

The fake is for control-flow tests only (retries, parsing, fallbacks): its numbers mean nothing and
must never be reported as results.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Unpack

import pytest

from personamem.llm.base import (
    FrozenLLM,
    Generations,
    LLMError,
    Prompt,
    Sampling,
    SamplingOptions,
    Scores,
    Usage,
    cut_at_stop,
)

__all__ = ["FakeLLM", "FrozenLLMContract"]


def _flat(prompt: Prompt) -> str:
    return prompt if isinstance(prompt, str) else "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


class FakeLLM:
    """A deterministic stand-in: scripted completions, hash-derived scores, injectable failures.

    Args:
        responses: completion for a rendered prompt; defaults to echoing the prompt's last line.
        fail_times: the first ``fail_times`` calls raise :class:`LLMError` (to exercise retries and
            fallbacks).
    """

    name = "fake-llm"
    context_window = 4096

    def __init__(self, responses: Callable[[str], str] | None = None, *, fail_times: int = 0) -> None:
        self._responses = responses or (lambda text: text.splitlines()[-1] if text else "")
        self._fail_times = fail_times
        self.calls = 0

    def _call(self) -> None:
        self.calls += 1
        if self.calls <= self._fail_times:
            raise LLMError(f"fake failure {self.calls} of {self._fail_times}")

    def count_tokens(self, text: str) -> int:
        """Whitespace-separated words."""
        return len(text.split())

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """-1 per target word plus a stable pseudo-random fraction from (prompt, target)."""
        self._call()
        token_logprobs = []
        for prompt, target in requests:
            if not target.split():
                raise ValueError(f"target {target!r} has no tokens to score")
            digest = hashlib.sha256(f"{_flat(prompt)}\x00{target}".encode()).digest()
            jitter = int.from_bytes(digest[:4], "big") / 2**32
            token_logprobs.append([-1.0 - jitter / len(target.split())] * len(target.split()))
        prompt_tokens = sum(self.count_tokens(_flat(p)) + self.count_tokens(t) for p, t in requests)
        return Scores([sum(v) for v in token_logprobs], token_logprobs, Usage(prompt_tokens=prompt_tokens))

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """The scripted response, with a seeded numeric suffix when sampling so samples differ."""
        sampling = Sampling(**options)
        self._call()
        rng = random.Random(sampling.seed)
        texts = []
        for prompt in prompts:
            base = self._responses(_flat(prompt))
            group = [base if sampling.greedy else f"{base} {rng.randrange(10**6)}" for _ in range(sampling.n)]
            texts.append(
                [cut_at_stop(" ".join(t.split()[: sampling.max_tokens]), sampling.stop) for t in group]
            )
        completion = sum(self.count_tokens(t) for group in texts for t in group)
        return Generations(texts, Usage(sum(self.count_tokens(_flat(p)) for p in prompts), completion))


class FrozenLLMContract:
    """Behaviour every :class:`FrozenLLM` backend must show; subclasses provide an ``llm`` fixture."""

    CHAT: Sequence[dict[str, str]] = ({"role": "user", "content": "Name a fruit."},)

    def test_is_a_frozen_llm(self, llm: FrozenLLM) -> None:
        assert isinstance(llm, FrozenLLM)
        assert llm.context_window > 0
        assert llm.count_tokens("three small words") > 0

    def test_scores_line_up_with_requests(self, llm: FrozenLLM) -> None:
        requests: list[tuple[Prompt, str]] = [("The sky is", " blue"), (list(self.CHAT), "An apple, a pear.")]
        scores = llm.loglikelihood(requests)
        assert len(scores) == 2 and scores.token_counts[1] >= scores.token_counts[0] >= 1
        for total, per_token in zip(scores, scores.token_logprobs, strict=True):
            assert total == pytest.approx(sum(per_token)) and total < 0
        assert scores.usage.prompt_tokens > 0

    def test_empty_target_is_refused(self, llm: FrozenLLM) -> None:
        with pytest.raises(ValueError):
            llm.loglikelihood([("prompt", "")])

    def test_generation_shape_and_usage(self, llm: FrozenLLM) -> None:
        out = llm.generate(["The sky is", list(self.CHAT)], n=2, max_tokens=6, temperature=0.8, seed=3)
        assert [len(group) for group in out] == [2, 2]
        assert out.usage.prompt_tokens > 0 and out.usage.completion_tokens > 0

    def test_greedy_and_seeded_generation_repeat(self, llm: FrozenLLM) -> None:
        assert (
            llm.generate(["The sky is"], max_tokens=6).texts
            == llm.generate(["The sky is"], max_tokens=6).texts
        )
        sampled = llm.generate(["The sky is"], n=2, max_tokens=6, temperature=0.8, seed=5)
        assert sampled.texts == llm.generate(["The sky is"], n=2, max_tokens=6, temperature=0.8, seed=5).texts

    def test_bad_sampling_is_refused(self, llm: FrozenLLM) -> None:
        refused: tuple[SamplingOptions, ...] = ({"n": 0}, {"max_tokens": 0})
        for options in refused:
            with pytest.raises(ValueError, match="at least 1"):
                llm.generate(["The sky is"], **options)

    def test_stop_is_honoured(self, llm: FrozenLLM) -> None:
        for text in llm.generate(["Count: 1, 2, 3,"], max_tokens=12, stop=[","])[0]:
            assert "," not in text
