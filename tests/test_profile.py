"""The default profile selector: candidates re-ordered by cosine to the query, with the real encoder."""

from __future__ import annotations

import pytest

from personamem import ProfileSelector, Record, RelevanceSelector, SentenceEncoder


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
