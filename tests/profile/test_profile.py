"""Profile selectors: cosine (real encoder), random, earliest, the listwise LLM; the profile retriever."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from personamem import PersonaMem, ProfileSelector, Record, RelevanceSelector, SentenceEncoder
from personamem.errors import ListwiseFallbackWarning
from personamem.llm import TransformersLLM
from personamem.profile import EarliestSelector, RandomSelector
from personamem.profile.listwise import ListwiseSelector, parse_ranking
from personamem.testing import FakeLLM


def _records(*texts: str) -> list[Record]:
    return [Record(user_id="ana", text=t, id=str(i)) for i, t in enumerate(texts)]


def test_relevance_selector_orders_by_similarity_and_keeps_k(encoder: SentenceEncoder) -> None:
    selector = RelevanceSelector(encoder)
    assert isinstance(selector, ProfileSelector)
    candidates = _records(
        "I repaired my bike's brakes.", "I'm allergic to peanuts.", "Peanut butter makes me ill."
    )
    profile = selector.select("ana", "what food allergies do I have?", candidates, k=2)
    assert [h.record.id for h in profile] in (["1", "2"], ["2", "1"])
    assert [h.rank for h in profile] == [1, 2] and profile[0].score >= profile[1].score


def test_relevance_selector_edge_cases(encoder: SentenceEncoder) -> None:
    selector = RelevanceSelector(encoder)
    assert selector.select("ana", "anything", [], k=3) == []
    assert len(selector.select("ana", "anything", _records("one"), k=3)) == 1
    with pytest.raises(ValueError, match="k must be at least 1"):
        selector.select("ana", "anything", _records("one"), k=0)


def test_random_selector_is_seeded_per_question() -> None:
    candidates = _records(*(f"note {i}" for i in range(10)))
    first = RandomSelector(seed=1).select("ana", "q", candidates, 4)
    assert [h.record.id for h in first] == [
        h.record.id for h in RandomSelector(seed=1).select("ana", "q", candidates, 4)
    ]
    assert len({h.record.id for h in first}) == 4
    others = {
        tuple(h.record.id for h in RandomSelector(seed=s).select("ana", "q", candidates, 4))
        for s in range(2, 6)
    }
    assert len(others) > 1


def test_earliest_selector_orders_by_time_then_given_order() -> None:
    stamps = [datetime(2024, 5, 1), None, datetime(2023, 1, 1), datetime(2024, 5, 1)]
    candidates = [Record(user_id="ana", text=f"t{i}", id=str(i), timestamp=s) for i, s in enumerate(stamps)]
    assert [h.record.id for h in EarliestSelector().select("ana", "q", candidates, 4)] == ["2", "0", "3", "1"]


@pytest.mark.parametrize(
    ("text", "order"),
    [("[3] > [1] > [2]", [2, 0, 1]), ("3, 3, 9, 1", [2, 0]), ("The best is [2].", [1]), ("none", [])],
)
def test_parse_ranking(text: str, order: list[int]) -> None:
    assert parse_ranking(text, 3) == order


def test_listwise_selector_fills_in_and_falls_back() -> None:
    candidates = _records("a", "b", "c", "d")
    picked = ListwiseSelector(FakeLLM(lambda prompt: "[3] > [1]")).select("ana", "q", candidates, 3)
    assert [h.record.id for h in picked] == ["2", "0", "1"]  # unranked ones keep their order after
    with pytest.warns(ListwiseFallbackWarning, match="no ranking"):
        picked = ListwiseSelector(FakeLLM(lambda prompt: "I cannot rank these.")).select(
            "ana", "q", candidates, 2
        )
    assert [h.record.id for h in picked] == ["0", "1"]
    with pytest.warns(ListwiseFallbackWarning, match="LLM failed"):
        ListwiseSelector(FakeLLM(fail_times=1)).select("ana", "q", candidates, 2)


def test_listwise_answers_are_kept_per_user_until_a_delete_and_a_failure_is_not_kept(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path / "store", encoder=encoder) as mem:
        texts = ["I cycle to work.", "I'm allergic to peanuts.", "I sing in a choir.", "I moved to Lisbon."]
        mem.add_many([{"id": f"r{i}", "text": t} for i, t in enumerate(texts)], user_id="ana")
        mem.add("bo", "I'm allergic to peanuts.")
        candidates = [r for r in mem.records("ana") if r.id != "r3"]
        llm = FakeLLM(lambda prompt: "[2] > [1]")
        selector = ListwiseSelector(llm, store=mem.store)
        first = [h.record.id for h in selector.select("ana", "allergies?", candidates, 3)]
        assert first == [candidates[i].id for i in (1, 0, 2)] and llm.calls == 1
        assert [h.record.id for h in selector.select("ana", "allergies?", candidates, 3)] == first
        assert llm.calls == 1  # the same prompt for the same user: the kept answer
        selector.select("ana", "allergies?", candidates[:2], 2)
        assert llm.calls == 2  # other candidates, another prompt
        selector.select("bo", "allergies?", candidates, 3)
        assert llm.calls == 3  # each user's answers are their own
        mem.delete("ana", "r3")  # a delete erases the user's kept answers (they may echo its text)
        selector.select("ana", "allergies?", candidates, 3)
        assert llm.calls == 4

        failing = ListwiseSelector(FakeLLM(fail_times=1), store=mem.store, max_tokens=50)
        with pytest.warns(ListwiseFallbackWarning, match="LLM failed"):
            fallback = failing.select("ana", "allergies?", candidates, 3)
        assert [h.record.id for h in fallback] == [r.id for r in candidates]  # first-stage order
        failing.select("ana", "allergies?", candidates, 3)
        assert failing.llm.calls == 2  # nothing of the failure was kept: asked again


@pytest.mark.filterwarnings(
    "ignore::personamem.profile.listwise.ListwiseFallbackWarning"
)  # a 135M model may not comply
def test_listwise_selector_with_the_real_llm(llm: TransformersLLM) -> None:
    candidates = _records("I repaired my bike.", "I'm allergic to peanuts.", "I sing in a choir.")
    picked = ListwiseSelector(llm).select("ana", "what food allergies do I have?", candidates, 3)
    assert sorted(h.record.id for h in picked) == ["0", "1", "2"]
