"""Every frozen-LLM backend available here passes the same contract."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

import pytest

from personamem.llm import LLMError, Sampling, SamplingOptions, TransformersLLM
from personamem.testing import FakeLLM, FrozenLLMContract


class TestTransformersLLM(FrozenLLMContract):
    pass  # the session-scoped ``llm`` fixture from conftest: the real default model


class TestFakeLLM(FrozenLLMContract):
    @pytest.fixture
    def llm(self) -> FakeLLM:
        return FakeLLM()


def test_fake_llm_fails_as_scripted() -> None:
    fake = FakeLLM(responses=lambda prompt: '["a", "b"]', fail_times=2)
    for _ in range(2):
        with pytest.raises(LLMError, match="fake failure"):
            fake.generate(["x"])
    assert fake.generate(["x"])[0] == ['["a", "b"]']
    assert fake.calls == 3


def test_sampling_keywords_are_the_sampling_fields() -> None:
    """``generate``'s keywords (a TypedDict, for mypy) and :class:`Sampling` are one declaration."""
    assert get_type_hints(SamplingOptions) == get_type_hints(Sampling)
    assert list(SamplingOptions.__annotations__) == [f.name for f in dataclasses.fields(Sampling)]


def test_fixture_is_the_real_model(llm: TransformersLLM) -> None:
    assert llm.name.startswith("SmolLM2-135M-Instruct")
