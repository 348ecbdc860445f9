"""A question that names a time raises the records written in it: real store, encoder and shipped default."""

from __future__ import annotations

from datetime import UTC, date, datetime

import numpy as np
import pytest

from personamem import PersonaMem
from personamem.retrieval.when import NO_DAY, day_number, named_window

AS_OF = datetime(2026, 11, 30, 15, tzinfo=UTC)  # a Monday
HELD = np.array([day_number(date(y, m, 9)) for y, m in ((2023, 6), (2023, 7), (2024, 3))] + [NO_DAY])


def _days(start: tuple[int, int, int], end: tuple[int, int, int]) -> tuple[int, int]:
    return day_number(date(*start)), day_number(date(*end))


@pytest.mark.parametrize(
    ("question", "window"),
    [
        ("When did I go camping in June?", ((2023, 6, 1), (2023, 7, 1))),  # the latest June the user holds
        ("What did I bake in early March?", ((2024, 3, 1), (2024, 4, 1))),
        ("What happened during July 2025?", ((2025, 7, 1), (2025, 8, 1))),  # named with its year: as named
        ("How many times did I swim in 2023?", ((2023, 1, 1), (2024, 1, 1))),
        ("What did I do in October?", None),  # the user holds no October
        ("What should I cook tonight?", None),  # about now, not about what was written
        ("Did I mention June to you?", None),  # a month, but no window ("in June")
        ("What did I tell you yesterday?", ((2026, 11, 29), (2026, 11, 30))),
        ("What did we talk about last night?", ((2026, 11, 29), (2026, 11, 30))),
        ("Which book did I mention the day before yesterday?", ((2026, 11, 28), (2026, 11, 29))),
        ("What did I say earlier today?", ((2026, 11, 30), (2026, 12, 1))),
        ("Where did I eat three days ago?", ((2026, 11, 27), (2026, 11, 28))),
        ("What did I plan 2 weeks ago?", ((2026, 11, 16), (2026, 11, 23))),  # that week, from Monday
        ("What did I buy a month ago?", ((2026, 10, 1), (2026, 11, 1))),  # that calendar month
        ("What did I read last week?", ((2026, 11, 23), (2026, 11, 30))),
        ("Where did I hike last weekend?", ((2026, 11, 28), (2026, 11, 30))),
        ("What did I cook last month?", ((2026, 10, 1), (2026, 11, 1))),
        ("Where did I travel last year?", ((2025, 1, 1), (2026, 1, 1))),
        ("What did I watch in the past 10 days?", ((2026, 11, 20), (2026, 12, 1))),  # up to today
        ("What did I fix over the last two weeks?", ((2026, 11, 16), (2026, 12, 1))),
        ("What did I say on the last day of the trip?", None),  # "the last day" of something
        ("Yesterday I asked about June: what was it?", ((2026, 11, 29), (2026, 11, 30))),  # the first
    ],
)
def test_the_window_is_the_time_the_question_names(
    question: str, window: tuple[tuple[int, int, int], tuple[int, int, int]] | None
) -> None:
    expected = None if window is None else _days(*window)
    assert named_window(question, AS_OF, HELD) == expected


def test_a_month_without_its_year_is_never_after_the_calls_time() -> None:
    before_2024 = datetime(2023, 12, 31, tzinfo=UTC)
    assert named_window("What did I bake in March?", before_2024, HELD) is None  # March 2024 is later
    assert named_window("When did I go camping in June?", before_2024, HELD) == _days(
        (2023, 6, 1), (2023, 7, 1)
    )


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
    again = "When did we go camping by the lake with the kids again in June?"
    assert order(again, as_of="2023-06-30")[0] == "june"
    assert order(again, as_of="2023-05-01")[0] == "july"  # no June yet: the words' order, nothing raised


def test_yesterday_is_the_day_before_the_reads_time(mem: PersonaMem) -> None:
    written = {
        "fri": datetime(2026, 11, 20, 9, tzinfo=UTC),
        "sat": datetime(2026, 11, 28, 20, tzinfo=UTC),
        "sun": datetime(2026, 11, 29, 18, tzinfo=UTC),
    }
    for rid, when in written.items():
        mem.add("ana", f"I told you about the restaurant by the river ({rid}).", id=rid, timestamp=when)
    # the rest of a history: standard scores over three near-copies alone would stretch their noise
    for i, text in enumerate(("I run on Sundays.", "My cat is called Miso.", "I work as a nurse.")):
        mem.add("ana", text, id=f"other{i}", timestamp=datetime(2026, 11, 10, tzinfo=UTC))

    def first(question: str, as_of: str) -> str:
        return mem.search("ana", question, k=3, as_of=as_of)[0].record.id

    plain = [h.record.id for h in mem.search("ana", "Which restaurant did I tell you about?", k=3)]
    assert first("Which restaurant did I tell you about yesterday?", "2026-11-30T08:00:00+00:00") == "sun"
    assert first("Which restaurant did I tell you about yesterday?", "2026-11-29T08:00:00+00:00") == "sat"
    assert first("Which restaurant did I tell you about last week?", "2026-11-25T08:00:00+00:00") == "fri"
    assert sorted(plain) == sorted(written)  # a window raises; it drops nothing (the top 3 of 6)


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
