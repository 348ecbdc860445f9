"""Per-call tallies: a list in a context variable that code deep inside a call appends to.

A call (a search, a context, a server request) opens a block; what its stages report (a fallback's
message, LLM usage, encoder word pieces) lands in that block's list. Context variables keep
concurrent calls (threads, tasks) apart, and code outside any block reports to none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import TypeVar

__all__ = ["tallying"]

T = TypeVar("T")


@contextlib.contextmanager
def tallying(var: ContextVar[list[T] | None]) -> Iterator[list[T]]:
    """A fresh list in ``var`` for the block, yielded; ``var``'s previous list comes back after it."""
    tally: list[T] = []
    token = var.set(tally)
    try:
        yield tally
    finally:
        var.reset(token)
