"""The LLM expansion baselines' control flow: prompts answered, outputs used and cached, fallbacks.

A scripted fake LLM drives the control flow only; it produces no reported number.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from personamem import PersonaMem
from personamem.errors import PBRFallbackWarning
from personamem.personalize.expansion import EXPANSIONS, LLMExpansion
from personamem.testing import FakeLLM


def _script(prompt: str) -> str:
    if "JSON list" in prompt:
        return json.dumps(["vegan restaurants: plant-based menus", "dairy free dishes: oat milk"])
    return "Plant-based restaurants with vegan menus are a good choice."


@pytest.mark.parametrize("kind", EXPANSIONS)
def test_each_expansion_moves_the_query_and_is_cached(ana_memory: PersonaMem, kind: str) -> None:
    llm = FakeLLM(_script)
    expansion = LLMExpansion(ana_memory.store, llm, kind, temperature=0.0)  # type: ignore[arg-type]
    q = ana_memory.store.encoder.encode(["where should we eat?"])[0]
    vector = expansion.personalize("ana", "where should we eat?")
    assert vector.shape == q.shape and not np.allclose(vector, q)
    calls = llm.calls
    assert np.allclose(expansion.personalize("ana", "where should we eat?"), vector)
    assert llm.calls == calls


@pytest.mark.parametrize("kind", EXPANSIONS)
def test_prepare_asks_for_many_queries_at_once(ana_memory: PersonaMem, kind: str) -> None:
    llm = FakeLLM(_script)
    expansion = LLMExpansion(ana_memory.store, llm, kind, temperature=0.0)  # type: ignore[arg-type]
    queries = ("where should we eat?", "plans for the weekend?", "a gift for my sister?")
    expansion.prepare([("ana", q) for q in queries])
    assert llm.calls == (2 if kind == "thinkqe" else 1)  # one call per round, not per query
    calls = llm.calls
    for query in queries:
        expansion.personalize("ana", query)
    assert llm.calls == calls


def test_expansion_falls_back_to_the_query(ana_memory: PersonaMem) -> None:
    q = ana_memory.store.encoder.encode(["where should we eat?"])[0]
    with pytest.warns(PBRFallbackWarning, match="LLM failed"):
        vector = LLMExpansion(ana_memory.store, FakeLLM(fail_times=1), "hyde").personalize(
            "ana", "where should we eat?"
        )
    assert np.allclose(vector, q)
    with pytest.warns(PBRFallbackWarning, match="no usable expansion"):
        vector = LLMExpansion(ana_memory.store, FakeLLM(lambda p: ""), "q2t", temperature=0.0).personalize(
            "ana", "where should we eat?"
        )
    with pytest.raises(ValueError, match="unknown expansion"):
        LLMExpansion(ana_memory.store, FakeLLM(), "magic")  # type: ignore[arg-type]
