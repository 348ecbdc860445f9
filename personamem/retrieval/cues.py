"""Cues two texts can share beyond their words: names, numbers and dates, read off the surface.

The learned ranker counts them between a query and each record; answer attribution counts them
between an answer and each record it was served with. Capitalised words are names unless they are
question or function words; dates are month and weekday names, relative day words and years.
"""

from __future__ import annotations

import re

__all__ = ["NAME", "NOT_NAMES", "NUMBER", "WORD", "YEAR", "dates", "names", "numbers"]

DATE_WORDS = frozenset(
    re.findall(
        r"\w+",
        "january february march april may june july august september october november december "
        "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
        "saturday sunday yesterday today tomorrow weekend week month year ago last",
    )
)
NAME = re.compile(r"\b[A-Z][a-z]+\b")
NUMBER = re.compile(r"\b\d+\b")
WORD = re.compile(r"[A-Za-z']+")
YEAR = re.compile(r"\b(?:19|20)\d\d\b")
NOT_NAMES = frozenset(
    re.findall(
        r"\w+",
        "i the a an what when where who why how which do does did is are can could would should "
        "my me in on at and but if any",
    )
)
"""Capitalised words that are not names."""


def names(text: str) -> set[str]:
    """The text's capitalised words that are not question or function words, lowercased."""
    return {w.lower() for w in NAME.findall(text)} - NOT_NAMES


def dates(text: str) -> set[str]:
    """Month and weekday names, relative day words and years in the text."""
    return ({w.lower() for w in WORD.findall(text)} & DATE_WORDS) | set(YEAR.findall(text))


def numbers(text: str) -> set[str]:
    """The text's whole numbers, as written."""
    return set(NUMBER.findall(text))
