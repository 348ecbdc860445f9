"""Profile selectors: cosine (real encoder), random, earliest, the listwise LLM; the profile retriever."""

from __future__ import annotations

from datetime import datetime

import pytest

from personamem import ProfileSelector, Record, RelevanceSelector, SentenceEncoder
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


@pytest.mark.filterwarnings(
    "ignore::personamem.profile.listwise.ListwiseFallbackWarning"
)  # a 135M model may not comply
def test_listwise_selector_with_the_real_llm(llm: TransformersLLM) -> None:
    candidates = _records("I repaired my bike.", "I'm allergic to peanuts.", "I sing in a choir.")
    picked = ListwiseSelector(llm).select("ana", "what food allergies do I have?", candidates, 3)
    assert sorted(h.record.id for h in picked) == ["0", "1", "2"]
