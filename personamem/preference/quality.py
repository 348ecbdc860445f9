"""Deterministic quality checks of an extracted memory: MemRerank's small regularizer.

The reranker's choice is the reward; these checks only keep GRPO from drifting into outputs the
reranker happens to tolerate (no structure, copied reviews, filler). Each check is 0 or 1 and the
score is their mean, so a hand-computed case is easy to state in a test.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from personamem.preference.memory import ParsedMemory, Statement

__all__ = ["COPY_WORDS", "MAX_STATEMENT_WORDS", "QualityReport", "memory_quality"]

MAX_STATEMENT_WORDS = 25
"""A preference statement longer than this is a summary of a record, not a preference."""
COPY_WORDS = 8
"""A statement sharing this many consecutive words with a history record copies it."""
_NEAR_DUPLICATE = 0.8  # Jaccard overlap of word sets
# filler, and the prompt's own slot names ("- statement [line numbers]") echoed back
_PLACEHOLDER = re.compile(
    r"\.\.\.|…|<[^>]*>|\b(?:todo|tbd|n/?a|lorem|ipsum|placeholder|statement \d|preference \d|fact \d|"
    r"category name|insert|line numbers?)\b|\[(?:category|preference|statement)[^\]]*\]|^(?:statement|fact)$",
    re.I,
)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class QualityReport:
    """Each check's pass (1) or fail (0), and their mean."""

    checks: dict[str, int]

    @property
    def score(self) -> float:
        """Mean of the checks, in [0, 1]."""
        return sum(self.checks.values()) / len(self.checks)


def memory_quality(parsed: ParsedMemory, history: Sequence[str]) -> QualityReport:
    """Score a parsed extractor answer against the history it was drawn from.

    Checks: ``structure`` (read without repair), ``within`` (a non-empty within-category section),
    ``concise`` (every statement at most :data:`MAX_STATEMENT_WORDS` words, and none dropped for
    running past the word budget), ``no_repetition`` (no two statements with word-set Jaccard >= 0.8),
    ``no_placeholder`` (no ``...``, ``<...>``, "TODO", "preference 1", the prompt's slot names
    echoed back...), ``no_copying`` (no
    statement shares :data:`COPY_WORDS` consecutive words with a history record). A rejected answer
    fails every check.
    """
    if parsed.rejected is not None:
        return QualityReport(dict.fromkeys(_CHECKS, 0))
    statements = [s for items in [*parsed.within.values(), parsed.cross] for s in items]
    words = [len(s.text.split()) for s in statements]
    checks = {
        "structure": int(not parsed.repaired),
        "within": int(any(parsed.within.values())),
        "concise": int(all(w <= MAX_STATEMENT_WORDS for w in words) and not parsed.over_budget),
        "no_repetition": int(not _near_duplicates(statements)),
        "no_placeholder": int(not any(_PLACEHOLDER.search(s.text) for s in statements)),
        "no_copying": int(not _copies(statements, history)),
    }
    return QualityReport(checks)


_CHECKS = ("structure", "within", "concise", "no_repetition", "no_placeholder", "no_copying")


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _near_duplicates(statements: Sequence[Statement]) -> bool:
    sets = [set(_tokens(s.text)) for s in statements]
    return any(
        a and b and len(a & b) / len(a | b) >= _NEAR_DUPLICATE
        for i, a in enumerate(sets)
        for b in sets[i + 1 :]
    )


def _copies(statements: Sequence[Statement], history: Sequence[str]) -> bool:
    spans = {
        tuple(tokens[i : i + COPY_WORDS])
        for text in history
        for tokens in [_tokens(text)]
        for i in range(len(tokens) - COPY_WORDS + 1)
    }
    for statement in statements:
        tokens = _tokens(statement.text)
        if any(tuple(tokens[i : i + COPY_WORDS]) in spans for i in range(len(tokens) - COPY_WORDS + 1)):
            return True
    return False
