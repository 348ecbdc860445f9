"""Fit a profile (a list of records) into a token budget without ever overflowing it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["Fitted", "fit_to_budget"]


@dataclass(frozen=True)
class Fitted(Generic[T]):
    """The items kept (in their order), those dropped from the end, and the kept text's token count."""

    kept: list[T]
    dropped: list[T]
    text: str
    tokens: int


def fit_to_budget(
    items: Sequence[T],
    budget: int,
    count_tokens: Callable[[str], int],
    *,
    render: Callable[[T], str] = str,
    separator: str = "\n",
) -> Fitted[T]:
    """Keep the longest prefix of ``items`` whose rendered texts, joined, take at most ``budget`` tokens.

    Whole items are dropped from the end, since the caller ordered them by importance (a PURPLE
    profile, a ranked list). Items are counted one by one first, then the joined text is counted
    again, because tokens can merge or split across the separator: the result never exceeds the
    budget, and one more item would.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    texts = [render(item) for item in items]
    sep_tokens = count_tokens(separator) if separator else 0
    kept, used = 0, 0
    for text in texts:
        cost = count_tokens(text) + (sep_tokens if kept else 0)
        if used + cost > budget:
            break
        kept, used = kept + 1, used + cost
    # the per-item sum is an estimate: settle it on the joined text, both ways
    while kept and count_tokens(separator.join(texts[:kept])) > budget:
        kept -= 1
    while kept < len(texts) and count_tokens(separator.join(texts[: kept + 1])) <= budget:
        kept += 1
    joined = separator.join(texts[:kept])
    return Fitted(list(items[:kept]), list(items[kept:]), joined, count_tokens(joined) if kept else 0)
