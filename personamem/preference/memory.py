"""A user's preference memory and its written form: tagged sections of short statements.

MemRerank's memory has a within-category part (what the user wants in the category being asked
about) and a cross-category part (habits that hold across categories). The extractor writes::

    WITHIN skincare:
    - prefers fragrance-free moisturizers [2, 5]
    CROSS:
    - buys travel sizes [1]

Bracketed numbers are evidence: the 1-based labels of the history lines the extractor was shown,
mapped back to this user's record ids for audit and stripped before the memory reaches an LLM
(:meth:`PreferenceMemory.text`). A label that names no shown line is dropped, so evidence can never
name another user's record. Our own format, chosen so a 135M model's near misses can be repaired:
a bulleted answer without headers becomes the within section, with a note saying so.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CROSS", "ParsedMemory", "PreferenceMemory", "Statement", "parse_memory", "render_sections"]

CROSS = "CROSS"
_HEADER = re.compile(
    r"^\s*(?:#+\s*|\*\*)?(within|cross)\b[\s\-_]*(?:category)?[\s:]*([^:*]*?)\s*:?\s*\**\s*$", re.I
)
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*)$")
_EVIDENCE = re.compile(r"\s*[\[(]\s*(\d+(?:\s*,\s*\d+)*)\s*[\])]\s*\.?\s*$")


@dataclass(frozen=True)
class Statement:
    """One preference statement and the records it was drawn from (this user's ids)."""

    text: str
    evidence: tuple[str, ...] = ()


@dataclass(frozen=True)
class ParsedMemory:
    """What :func:`parse_memory` read from an extractor's answer.

    Attributes:
        within: statements per category (``""`` when the answer named none).
        cross: cross-category statements.
        notes: repairs made (missing headers, unknown evidence labels, cut statements); empty when the
            answer was in the format as asked.
        rejected: why nothing usable was found, or None.
        over_budget: statements dropped because the memory ran past its word budget.
    """

    within: dict[str, list[Statement]]
    cross: list[Statement]
    notes: list[str]
    rejected: str | None = None
    over_budget: int = 0

    @property
    def repaired(self) -> bool:
        """Whether the answer needed repair to be read."""
        return bool(self.notes)


def parse_memory(
    answer: str,
    shown_ids: Sequence[str],
    *,
    default_category: str = "",
    max_words: int | None = None,
    expect_headers: bool = True,
) -> ParsedMemory:
    """Sections and statements from an extractor's answer.

    Args:
        answer: the generated text.
        shown_ids: record ids in the order their lines were shown (label ``i`` is ``shown_ids[i-1]``).
        default_category: the section for statements under a ``WITHIN`` header without a category,
            or under no header at all.
        max_words: the memory's word budget; statements past it are dropped (noted).
        expect_headers: False for one-fact-per-line answers, whose lines are the within section.
    """
    within: dict[str, list[Statement]] = {}
    cross: list[Statement] = []
    notes: list[str] = []
    section: list[Statement] | None = None
    seen: set[str] = set()
    headerless = 0
    unknown_labels = 0
    for line in answer.splitlines():
        header = _HEADER.match(line)
        if header:
            if header.group(1).lower() == "cross":
                section = cross
            else:
                section = within.setdefault(header.group(2).strip().lower() or default_category, [])
            continue
        bullet = _BULLET.match(line)
        if not bullet:
            continue
        text, evidence, unknown = _split_evidence(bullet.group(1), shown_ids)
        unknown_labels += unknown
        key = " ".join(text.lower().split())
        if not key or key in seen:
            continue
        seen.add(key)
        if section is None:
            headerless += 1
            section = within.setdefault(default_category, [])
        section.append(Statement(text, evidence))
    if headerless and expect_headers:
        notes.append("no section header: bulleted lines read as the within-category section")
    if unknown_labels:
        notes.append(f"{unknown_labels} evidence label(s) named no history line and were dropped")
    within = {category: items for category, items in within.items() if items}
    cut = 0
    if max_words is not None:
        within, cross, cut = _fit_words(within, cross, max_words)
        if cut:
            notes.append(f"{cut} statement(s) past the {max_words}-word budget were dropped")
    if not within and not cross:
        reason = "no bulleted statements found" if answer.strip() else "empty answer"
        return ParsedMemory({}, [], notes, rejected=reason)
    return ParsedMemory(within, cross, notes, over_budget=cut)


def _split_evidence(text: str, shown_ids: Sequence[str]) -> tuple[str, tuple[str, ...], int]:
    """The statement without its trailing ``[2, 5]``, the record ids named, and unknown labels."""
    match = _EVIDENCE.search(text)
    if not match:
        return text.strip(), (), 0
    labels = [int(n) for n in match.group(1).split(",")]
    ids = tuple(dict.fromkeys(shown_ids[n - 1] for n in labels if 1 <= n <= len(shown_ids)))
    unknown = sum(1 for n in labels if not 1 <= n <= len(shown_ids))
    return text[: match.start()].strip(), ids, unknown


def _fit_words(
    within: dict[str, list[Statement]], cross: list[Statement], max_words: int
) -> tuple[dict[str, list[Statement]], list[Statement], int]:
    """Keep statements in order (within first) while the total stays within ``max_words``."""
    used = 0
    cut = 0

    def keep(items: list[Statement]) -> list[Statement]:
        nonlocal used, cut
        kept = []
        for statement in items:
            words = len(statement.text.split())
            if used + words <= max_words:
                kept.append(statement)
                used += words
            else:
                cut += 1
        return kept

    fitted = {category: kept for category, items in within.items() if (kept := keep(items))}
    return fitted, keep(cross), cut


def render_sections(within: dict[str, list[Statement]], cross: list[Statement], *, evidence: bool) -> str:
    """The memory as tagged sections; ``evidence=False`` is the form an LLM is shown."""
    lines: list[str] = []

    def line(statement: Statement) -> str:
        if evidence and statement.evidence:
            return f"- {statement.text} (evidence: {', '.join(statement.evidence)})"
        return f"- {statement.text}"

    for category, items in within.items():
        lines.append(f"WITHIN {category}:" if category else "WITHIN:")
        lines.extend(line(s) for s in items)
    if cross:
        lines.append(f"{CROSS}:")
        lines.extend(line(s) for s in cross)
    return "\n".join(lines)


@dataclass(frozen=True)
class PreferenceMemory:
    """A user's distilled preferences, built once per history revision and reused for every query.

    Attributes:
        user_id: whose memory.
        within: within-category statements, by category (``""``: the user's records have none).
        cross: cross-category statements.
        revision: the user's history revision it was built from (None: an unknown user).
        extractor: the extractor's name (model and prompt, or checkpoint).
        notes: repairs made when reading the extractor's answer, or why it was rejected.
        stale: True when the history changed since and the rebuild failed or did not finish in time.
        seconds: extraction time (0 for an empty history, which needs no LLM call).
    """

    user_id: str
    within: dict[str, list[Statement]] = field(default_factory=dict)
    cross: list[Statement] = field(default_factory=list)
    revision: str | None = None
    extractor: str = ""
    notes: list[str] = field(default_factory=list)
    stale: bool = False
    seconds: float = 0.0

    @property
    def empty(self) -> bool:
        """Whether there is no statement."""
        return not self.cross and not any(self.within.values())

    @property
    def evidence_ids(self) -> list[str]:
        """Record ids cited by any statement (this user's only), in first-cited order."""
        found = [i for items in [*self.within.values(), self.cross] for s in items for i in s.evidence]
        return list(dict.fromkeys(found))

    @property
    def words(self) -> int:
        """Words in the statements (the memory's length as the budget counts it)."""
        return sum(len(s.text.split()) for items in [*self.within.values(), self.cross] for s in items)

    def text(self, category: str | None = None, *, cross: bool = True) -> str:
        """What an LLM is shown: evidence stripped; only ``category``'s within section when given.

        An empty ``category`` (an item of no known category, as PersonaBench's are) shows every
        section. ``cross=False`` is the paper's within-only memory (M_W); the default is M_WC.
        """
        within = self.within
        if category:
            within = {c: s for c, s in within.items() if c == category.lower() or c == ""}
        return render_sections(within, self.cross if cross else [], evidence=False)

    def audit_text(self) -> str:
        """Every section with its evidence record ids, for people reviewing what was inferred."""
        return render_sections(self.within, self.cross, evidence=True)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (cached as is, returned by the REST server)."""
        return {
            "user_id": self.user_id,
            "within": {c: [_statement_json(s) for s in items] for c, items in self.within.items()},
            "cross": [_statement_json(s) for s in self.cross],
            "revision": self.revision,
            "extractor": self.extractor,
            "notes": self.notes,
            "stale": self.stale,
            "seconds": self.seconds,
            "text": self.text(),
            "words": self.words,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PreferenceMemory:
        """The memory :meth:`to_json` wrote (derived fields are recomputed)."""
        return cls(
            user_id=data["user_id"],
            within={c: [_statement(s) for s in items] for c, items in data["within"].items()},
            cross=[_statement(s) for s in data["cross"]],
            revision=data["revision"],
            extractor=data["extractor"],
            notes=list(data["notes"]),
            stale=bool(data.get("stale", False)),
            seconds=float(data.get("seconds", 0.0)),
        )


def _statement_json(statement: Statement) -> dict[str, Any]:
    return {"text": statement.text, "evidence": list(statement.evidence)}


def _statement(data: dict[str, Any]) -> Statement:
    return Statement(data["text"], tuple(data["evidence"]))
