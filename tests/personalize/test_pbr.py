"""PBR's P-PRF and fusion, the derived-value cache behind it, and lenient parsing of LLM output."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import PBRFallbackWarning
from personamem.llm import FrozenLLM
from personamem.llm.parsing import extract_json, extract_string_list, tally_outputs
from personamem.personalize import QueryPersonalizer
from personamem.personalize.pbr import PBR, fuse
from personamem.pipeline import Pipeline, PipelineConfig
from personamem.testing import FakeLLM

GOOD = json.dumps(["I want something without meat", "Vegan places please", "No dairy for me"])


def test_extract_json_and_lists_from_messy_output() -> None:
    assert extract_json('Sure!\n```json\n["a", "b",]\n```') == ["a", "b"]
    assert extract_json("Here: {'x': 1}") == {"x": 1}
    assert extract_json("no json here") is None
    assert extract_string_list('["a", "b", "a", ""]') == ["a", "b"]
    assert extract_string_list('{"messages": ["x", 2]}') == ["x", "2"]
    assert extract_string_list("Here are three:\n1. first one\n- second\n* 'third'", limit=2) == [
        "first one",
        "second",
    ]
    assert extract_string_list("") == []


def test_every_parsed_answer_is_counted_and_prose_is_never_an_answer() -> None:
    with tally_outputs() as counts:
        assert extract_string_list('["a", "b"]', stage="s") == ["a", "b"]
        assert extract_string_list('```json\n["a"]\n```', stage="s") == ["a"]
        assert extract_string_list('Sure! Here you go: ["a", "b",]', stage="s") == ["a", "b"]
        assert extract_string_list("Ideas:\n1. hiking boots\n2. a tent", stage="s") == [
            "hiking boots",
            "a tent",
        ]
        assert extract_string_list("I think you would enjoy a quiet evening.\nHave fun!", stage="s") == []
        assert extract_string_list("-5 degrees is cold", stage="s") == []  # a minus sign is no bullet
    assert counts == {"s clean": 2, "s repaired": 2, "s failed": 2}
    extract_string_list('["outside any tally"]')  # counted nowhere, and no error


def test_fuse_follows_the_paper_rule() -> None:
    q = np.array([1.0, 0.0, 0.0])
    c = np.array([0.0, 1.0, 0.0])
    f = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    r = np.array([1.0, 1.0, 0.0]) / np.sqrt(2)
    mid = (q + c) / 2
    w1 = 1 + (mid @ f[0]) / (np.linalg.norm(mid) * 1.0)
    w2 = 1 + (mid @ r) / np.linalg.norm(mid)
    assert np.allclose(fuse(q, c, f, r), q + c + w1 * f[0] + w2 * r)
    assert np.allclose(fuse(q, None, None, None), q)  # Base: no personalization
    assert np.allclose(fuse(q, c, None, None), q + c)  # without P-PRF


def _fake(utterances: str = GOOD, reasoning: str = "Ana is vegan, so she wants plant-based food.") -> FakeLLM:
    return FakeLLM(lambda prompt: utterances if "JSON list" in prompt else reasoning)


def test_pbr_uses_feedback_and_caches_it_per_user(ana_memory: PersonaMem) -> None:
    llm = _fake()
    pbr = PBR(ana_memory.store, llm, None, k1=2, m=3)
    assert isinstance(pbr, QueryPersonalizer)
    [feedback] = pbr.feedback(
        [("ana", "where should we eat?")], ana_memory.store.encoder.encode(["where should we eat?"])
    )
    assert feedback is not None and len(feedback.utterances) == 3 and "vegan" in feedback.reasoning
    calls = llm.calls
    first = pbr.personalize("ana", "where should we eat?")
    assert llm.calls == calls  # the feedback came from the cache
    again = PBR(ana_memory.store, llm, None, k1=2, m=3).personalize("ana", "where should we eat?")
    assert llm.calls == calls and np.allclose(first, again)
    PBR(ana_memory.store, llm, None, k1=2, m=3, seed=1).personalize("ana", "where should we eat?")
    assert llm.calls == calls + 1  # another seed is another sample
    q = ana_memory.store.encoder.encode(["where should we eat?"])[0]
    assert not np.allclose(first, q)


def test_pbr_falls_back_to_the_query_with_a_warning(ana_memory: PersonaMem) -> None:
    q = ana_memory.store.encoder.encode(["where should we eat?"])[0]
    with pytest.warns(PBRFallbackWarning, match="LLM failed"):
        vector = PBR(ana_memory.store, FakeLLM(fail_times=1), None, temperature=0.0).personalize(
            "ana", "where should we eat?"
        )
    assert np.allclose(vector, q)
    with pytest.warns(PBRFallbackWarning, match="no usable pseudo feedback"):
        vector = PBR(
            ana_memory.store, _fake(utterances="", reasoning=" "), None, temperature=0.0
        ).personalize("ana", "where should we eat?")
    assert np.allclose(vector, q)


def test_derived_values_survive_reopening_and_are_forgotten(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path / "s", encoder=encoder) as mem:
        mem.add("ana", "I'm vegan.")
        assert mem.store.derived("ana", "ns", "k", lambda: {"v": 1}) == {"v": 1}
        assert mem.store.derived("nobody", "ns", "k", lambda: {"v": 2}) == {"v": 2}
    with PersonaMem.open(tmp_path / "s", encoder=encoder) as mem:
        assert mem.store.derived("ana", "ns", "k", lambda: {"v": 3}) == {"v": 1}
        assert mem.store.derived("nobody", "ns", "k", lambda: {"v": 4}) == {"v": 4}  # never kept
        mem.forget("ana")
        assert mem.store.catalog.get_derived("ana", "ns", "k") is None


def test_derived_many_computes_only_the_missing_values_together(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path / "s", encoder=encoder) as mem:
        mem.add("ana", "I'm vegan.")
        mem.store.derived("ana", "ns", "b", lambda: {"v": "kept"})
        asked: list[list[int]] = []

        def compute(missing: list[int]) -> list[dict[str, int]]:
            asked.append(missing)
            return [{"v": i} for i in missing]

        values = mem.store.derived_many("ns", [("ana", "a"), ("ana", "b"), ("ana", "c")], compute)
        assert values == [{"v": 0}, {"v": "kept"}, {"v": 2}] and asked == [[0, 2]]
        assert mem.store.derived_many("ns", [("ana", "c")], compute) == [{"v": 2}] and len(asked) == 1


def test_prepare_batches_the_llm_calls_that_search_then_reuses(ana_memory: PersonaMem) -> None:
    llm = _fake()
    pbr = PBR(ana_memory.store, llm, None, k1=2, m=3)
    requests = [
        ("ana", q) for q in ("where should we eat?", "plans for the weekend?", "a gift for my sister?")
    ]
    pbr.prepare(requests)
    assert llm.calls == 1  # both prompts of all three queries in one call
    retriever = Pipeline(ana_memory.store, PipelineConfig(first_stage="dense"), personalizer=pbr)
    retriever.prepare(requests)
    for _, query in requests:
        retriever.search("ana", query, 2)
    assert llm.calls == 1


@pytest.mark.slow
def test_pbr_with_the_real_llm_ranks_through_the_store(ana_memory: PersonaMem, ct2_llm: FrozenLLM) -> None:
    pbr = PBR(ana_memory.store, ct2_llm, None, k1=2, m=3)
    retriever = Pipeline(ana_memory.store, PipelineConfig(first_stage="dense"), personalizer=pbr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PBRFallbackWarning)  # a 135M model may produce nothing usable
        hits = retriever.search("ana", "what should I eat tonight?", k=3)
    assert len(hits) == 3 and {h.record.user_id for h in hits} == {"ana"}
