"""When a question says when: the days it names, a signal for the default's ranking.

"When did Melanie go camping in June?" names June, and a record written in June is likelier to be
what it asks about; "what did I tell you yesterday?" names yesterday. A record's timestamp is when it
was written, not when what it tells happened ("we went camping last month", said in July), so a
record inside the window is raised by :data:`WINDOW_BOOST`, never kept or dropped for it. On the 73
LoCoMo questions that name a month or a year, the default's recall@5 went from 0.651 to 0.815 and its
MRR from 0.490 to 0.586 (on the 28 asked by users never trained on: MRR 0.350 to 0.451, recall@10 one
question lower; docs/RESULTS.md, "When a question names a month"); PersonaBench, iKAT and PrefEval
ask none.

Two kinds of window are read, by a small grammar rather than a date parser (a parser resolves "last
week" to one instant; a window is what a record is inside of):

- **named**: "in June", "during May 2023", "in 2023". A month without a year is the latest such
  month, at or before the call's time, in which the user holds records: asked in 2026 of a history
  from 2023, "in June" is June 2023.
- **relative to the call's time** (the read's ``as_of``, else now; days are UTC dates):
  "yesterday", "last night", "the day before yesterday", "earlier today"; "three days ago", "two
  weeks ago" (that week), "a month ago" (that calendar month), "a year ago"; "last week" (the
  calendar week before this one, from Monday), "last weekend", "last month", "last year"; "in the
  past 10 days", "over the last two weeks", "the past month" (up to today; "the last day of the
  trip" is not one). Expressions that also speak of the present or the future ("today", "tonight",
  "this week") are not read, nor vague ones ("recently": a recency boost for "recently", "latest"
  or "current" moved no LoCoMo metric, 47 questions). Asked again as "last month" on the 15th of
  the next month, LoCoMo's 73 month-naming questions gain as the named form does (recall@5 0.623
  to 0.795 against the boost off; docs/RESULTS.md).

Where a question holds several, the first in its text is the window.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, date, datetime, timedelta

import numpy as np

from personamem.retrieval.cues import YEAR

__all__ = ["NO_DAY", "WINDOW_BOOST", "Window", "day_number", "named_window"]

WINDOW_BOOST = 2.0
"""Added to the score (standard scores, :func:`~personamem.retrieval.ranker.score_fusion`) of a
candidate written inside the named window: the best of 0.25, 0.5, 1 and 2 on LoCoMo's training users."""
NO_DAY = int(np.iinfo(np.int32).min)
"""The day number of a record without a timestamp: inside no window."""

Window = tuple[int, int]
"""Day numbers (:func:`day_number`) from ``start`` to ``end``, the end excluded."""

_EPOCH = date(1970, 1, 1)
_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_YEAR = YEAR.pattern  # a year as the ranker's date cues read one
_NAMED = re.compile(
    rf"\b(?:in|during)\s+(?:(?:early|late|mid)[- ])?({'|'.join(_MONTHS)})(?:,?\s+({_YEAR}))?\b"
    rf"|\b(?:in|during)\s+({_YEAR})\b",
    re.IGNORECASE,
)
_COUNTS = {"a": 1, "an": 1, "one": 1, "a couple of": 2, "two": 2, "three": 3, "four": 4, "five": 5}
_COUNTS |= {"six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_COUNT = r"(\d{1,3}|" + "|".join(sorted(_COUNTS, key=len, reverse=True)) + ")"
_UNIT = r"(day|week|month|year)s?"
_RELATIVE = re.compile(
    r"\b(the day before yesterday|yesterday|last night|earlier today)\b"
    rf"|\b{_COUNT}\s+{_UNIT}\s+ago\b"
    rf"|\b(?:(?:in|over|during|within)\s+the\s+(?:last|past)|the\s+past)\s+(?:{_COUNT}\s+)?{_UNIT}\b"
    r"|\blast\s+(week|weekend|month|year)\b",
    re.IGNORECASE,
)


def day_number(when: datetime | date) -> int:
    """Days from 1970-01-01 to ``when``'s date (UTC; a naive time is taken as UTC): a window is a range."""
    return (_date(when) - _EPOCH).days


def _date(when: datetime | date) -> date:
    if isinstance(when, datetime):
        return (when.astimezone(UTC) if when.tzinfo is not None else when).date()
    return when


def named_window(query: str, as_of: datetime, held: np.ndarray) -> Window | None:
    """The days the question's first time expression names; None where it names none.

    ``held`` is the day number of each of the user's records (:data:`NO_DAY` without a time): a
    month named without a year is the latest one at or before ``as_of`` among them (None when the
    user wrote in no such month).
    """
    named, relative = _NAMED.search(query), _RELATIVE.search(query)
    if relative is not None and (named is None or relative.start() < named.start()):
        return _relative(relative, _date(as_of))
    if named is None:
        return None
    month, year, whole_year = named.groups()
    if whole_year is not None:
        return _span(date(int(whole_year), 1, 1), date(int(whole_year) + 1, 1, 1))
    number = _MONTHS[month.lower()]
    if year is not None:
        return _month(int(year), number)
    return _latest_month(number, as_of, held)


def _relative(found: re.Match[str], today: date) -> Window:
    """The window of one :data:`_RELATIVE` match, counted back from ``today``."""
    day, ago_count, ago_unit, past_count, past_unit, last = found.groups()
    if day is not None:
        back = {"earlier today": 0, "yesterday": 1, "last night": 1}.get(day.lower(), 2)
        return _unit_back("day", back, today)
    if ago_unit is not None:
        return _unit_back(ago_unit.lower(), _count(ago_count), today)
    if past_unit is not None:  # from that far back up to today
        count, unit = _count(past_count or "1"), past_unit.lower()
        if unit in ("day", "week"):
            start = today - timedelta(days=count * (7 if unit == "week" else 1))
        elif unit == "month":
            start = _month_start(today, count).replace(day=min(today.day, 28))
        else:
            start = date(today.year - count, today.month, min(today.day, 28))
        return _span(start, today + timedelta(days=1))
    monday = today - timedelta(days=today.weekday())
    if last.lower() == "weekend":
        return _span(monday - timedelta(days=2), monday)
    return _unit_back(last.lower(), 1, today)


def _unit_back(unit: str, count: int, today: date) -> Window:
    """The calendar day, week (from Monday), month or year ``count`` of them before today's."""
    if unit == "day":
        return _span(today - timedelta(days=count), today - timedelta(days=count - 1))
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7 * count)
        return _span(monday, monday + timedelta(days=7))
    if unit == "month":
        start = _month_start(today, count)
        return _month(start.year, start.month)
    return _span(date(today.year - count, 1, 1), date(today.year - count + 1, 1, 1))


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _COUNTS[word.lower()]


def _month_start(today: date, back: int) -> date:
    """The first day of the calendar month ``back`` months before today's."""
    index = today.year * 12 + today.month - 1 - back
    return date(index // 12, index % 12 + 1, 1)


def _month(year: int, month: int) -> Window:
    return _span(date(year, month, 1), date(year + month // 12, month % 12 + 1, 1))


def _span(start: date, end: date) -> Window:
    return day_number(start), day_number(end)


def _latest_month(month: int, as_of: datetime, held: np.ndarray) -> Window | None:
    """The latest ``month`` (1-12) at or before ``as_of`` in which the user wrote a record."""
    days = held[(held != NO_DAY) & (held <= day_number(as_of))]
    months = days.astype("datetime64[D]").astype("datetime64[M]").astype(np.int64)  # months since 1970-01
    candidates = months[months % 12 == month - 1]
    if not len(candidates):
        return None
    latest = int(candidates.max())
    return _month(1970 + latest // 12, latest % 12 + 1)
