"""When a question says when: the calendar months it names, a signal for the default's ranking.

"When did Melanie go camping in June?" names June, and a record written in June is likelier to be
what it asks about. A record's timestamp is when it was written, not when what it tells happened
("we went camping last month", said in July), so a record inside the window is raised by
:data:`WINDOW_BOOST`, never kept or dropped for it. On the 73 LoCoMo questions that name a month
or a year, the default's recall@5 went from 0.651 to 0.815 and its MRR from 0.490 to 0.586 (on the
28 asked by users never trained on: MRR 0.350 to 0.451, recall@10 one question lower;
docs/RESULTS.md, "When a question names a month"); PersonaBench, iKAT and PrefEval ask none.

Only named months and years are read ("in June", "during May 2023", "in 2023"): they need no
parser. A month without a year is the latest such month, at or before the call's time, in which the
user holds records: asked in 2026 of a history from 2023, "in June" is June 2023. Expressions
relative to the call's time ("last week", "recently") are not read: a recency boost for questions
saying "recently", "latest" or "current" moved no LoCoMo metric (47 questions).
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime

import numpy as np

from personamem.retrieval.cues import YEAR

__all__ = ["NO_MONTH", "WINDOW_BOOST", "month_index", "named_months"]

WINDOW_BOOST = 2.0
"""Added to the score (standard scores, :func:`~personamem.retrieval.ranker.score_fusion`) of a
candidate written inside the named window: the best of 0.25, 0.5, 1 and 2 on LoCoMo's training users."""
NO_MONTH = -1
"""The month index of a record without a timestamp: inside no window."""

_MONTHS = {name.lower(): number for number, name in enumerate(calendar.month_name) if name}
_YEAR = YEAR.pattern  # a year as the ranker's date cues read one
_NAMED = re.compile(
    rf"\b(?:in|during)\s+(?:(?:early|late|mid)[- ])?({'|'.join(_MONTHS)})(?:,?\s+({_YEAR}))?\b"
    rf"|\b(?:in|during)\s+({_YEAR})\b",
    re.IGNORECASE,
)


def month_index(when: datetime) -> int:
    """Months since year 0: one integer per calendar month, so a window is a set of integers."""
    return when.year * 12 + when.month - 1


def named_months(query: str, as_of: datetime, held: np.ndarray) -> np.ndarray | None:
    """The month indexes of the window ``query`` names; None where it names none the user holds.

    ``held`` is the month index of each of the user's records (:data:`NO_MONTH` without a time): a
    month named without a year is the latest one at or before ``as_of`` among them.
    """
    found = _NAMED.search(query)
    if found is None:
        return None
    month, year, whole_year = found.groups()
    if whole_year is not None:
        start = int(whole_year) * 12
        return np.arange(start, start + 12)
    number = _MONTHS[month.lower()] - 1
    if year is not None:
        return np.array([int(year) * 12 + number])
    candidates = held[(held >= 0) & (held <= month_index(as_of)) & (held % 12 == number)]
    return np.array([candidates.max()]) if len(candidates) else None
