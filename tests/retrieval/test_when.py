"""A question that names a month raises the records written in it: real store, encoder and shipped default."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from personamem import PersonaMem
from personamem.retrieval.when import NO_MONTH, month_index, named_months

AS_OF = datetime(2026, 11, 30, tzinfo=UTC)
HELD = np.array([month_index(datetime(y, m, 1)) for y, m in ((2023, 6), (2023, 7), (2024, 3))] + [NO_MONTH])


@pytest.mark.parametrize(
    ("question", "months"),
    [
        ("When did I go camping in June?", [(2023, 6)]),  # the latest June the user holds
        ("What did I bake in early March?", [(2024, 3)]),
        ("What happened during July 2025?", [(2025, 7)]),  # named with its year: as named
        ("How many times did I swim in 2023?", [(2023, m) for m in range(1, 13)]),
        ("What did I do in October?", None),  # the user holds no October
        ("What should I cook tonight?", None),
        ("Did I mention June to you?", None),  # a month, but no window ("in June")
    ],
)
def test_the_window_is_the_month_or_year_the_question_names(
    question: str, months: list[tuple[int, int]] | None
) -> None:
    found = named_months(question, AS_OF, HELD)
    expected = None if months is None else [y * 12 + m - 1 for y, m in months]
    assert (found if found is None else found.tolist()) == expected


def test_a_month_without_its_year_is_never_after_the_calls_time() -> None:
    before_2024 = datetime(2023, 12, 31, tzinfo=UTC)
    assert named_months("What did I bake in March?", before_2024, HELD) is None  # March 2024 is later
    assert named_months("When did I go camping in June?", before_2024, HELD).tolist() == [2023 * 12 + 5]  # type: ignore[union-attr]


def test_the_record_written_in_the_named_month_leads_and_none_is_dropped(mem: PersonaMem) -> None:
    texts = {
        "june": (datetime(2023, 6, 18, tzinfo=UTC), "We went camping by the lake with the kids."),
        "july": (datetime(2023, 7, 9, tzinfo=UTC), "We went camping by the lake with the kids again."),
        "none": (None, "We went camping by the lake once, years ago."),
    }
    for rid, (when, text) in texts.items():
        mem.add("mel", text, id=rid, timestamp=when)
    mem.add(
        "mel", "I paint sunrises on Sunday mornings.", id="paint", timestamp=datetime(2023, 6, 2, tzinfo=UTC)
    )

    def order(question: str, **read: object) -> list[str]:
        return [h.record.id for h in mem.search("mel", question, k=4, **read)]  # type: ignore[arg-type]

    plain = order("When did we go camping by the lake with the kids again?")
    assert plain[0] == "july" and set(plain) == {"june", "july", "none", "paint"}
    named = order("When did we go camping by the lake with the kids again in June?")
    assert named[0] == "june" and set(named) == set(plain)  # raised, nothing filtered
    assert named.index("paint") > named.index("july")  # June's other record stays below the matches
    assert (
        order("When did we go camping by the lake with the kids again in June?", as_of="2023-06-30")[0]
        == "june"
    )
    assert (
        order("When did we go camping by the lake in June?", as_of="2023-05-01")[0] != "june"
    )  # no June yet


def test_leave_one_out_reads_the_window_the_search_raises(mem: PersonaMem) -> None:
    from personamem.datasets.benchmark import Question
    from personamem.retrieval.query_adapter import QueryAdapter
    from personamem.trainers.ranker.data import store_features

    for rid, month in (("june", 6), ("july", 7)):
        mem.add(
            "mel",
            f"We went camping by the lake ({rid}).",
            id=rid,
            timestamp=datetime(2023, month, 9, tzinfo=UTC),
        )
    question = Question(id="q", user_id="mel", text="Where did we camp in June?", relevant={"june": 1})
    found = store_features(mem.store, [question], "toy", QueryAdapter.load("mixed", mem.store.encoder))
    assert sorted(found.inside.tolist()) == [0.0, 1.0] and found.inside[found.labels == 1].tolist() == [1.0]
