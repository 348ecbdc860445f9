"""Conflict detection at write: does a new personal statement replace an older one?

"My name is Bob." after "My name is Alice." should supersede it, "I also play the piano." after
"I play the cello." should not, and an embedding cannot tell these apart (a paraphrase and a changed
day of the week score alike). So, behind the pipeline's ``conflicts`` switch, ``add`` of a
``knowledge`` record shows the frozen LLM each of the user's nearest current knowledge records and
the new statement, and scores "Yes" against "No" to "does the new one replace the earlier one?";
the best pair above ``margin`` is superseded. An LLM that fails leaves the record added plainly,
with a warning: no detection, never a lost write.
"""

from __future__ import annotations

from collections.abc import Sequence

from personamem.llm.base import FrozenLLM, Message, Prompt
from personamem.records import Record, RecordKind

__all__ = ["PROMPT_VERSION", "ConflictDetector", "conflict_prompt"]

PROMPT_VERSION = "conflict-v1"
_SYSTEM = "You keep a memory of facts a person has stated about themselves, and keep it up to date."
_CHARS = 400


def conflict_prompt(earlier: str, newer: str) -> list[Message]:
    """The yes/no prompt for one (earlier, newer) pair; only the answer's first token is scored."""
    earlier, newer = (" ".join(text.split())[:_CHARS] for text in (earlier, newer))
    user = (
        f'Earlier the person said: "{earlier}"\n'
        f'Now the person says: "{newer}"\n\n'
        "Does the new statement replace the earlier one, so that the earlier one is no longer true "
        "about them? Answer Yes or No."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


class ConflictDetector:
    """Finds the earlier knowledge record a new one replaces, by the frozen LLM's yes/no margin.

    Args:
        llm: the frozen LLM (the pipeline's).
        min_similarity: cosine below which an earlier record is not asked about (different topic).
        candidates: at most this many nearest earlier records are asked about.
        margin: log P(Yes) − log P(No) above which a pair counts as a replacement.
    """

    def __init__(
        self, llm: FrozenLLM, *, min_similarity: float = 0.5, candidates: int = 3, margin: float = 0.0
    ) -> None:
        self.llm = llm
        self.min_similarity = min_similarity
        self.candidates = candidates
        self.margin = margin

    def margins(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Log P(Yes) − log P(No) for each (earlier, newer) pair of texts."""
        requests: list[tuple[Prompt, str]] = [
            (conflict_prompt(earlier, newer), answer) for earlier, newer in pairs for answer in ("Yes", "No")
        ]
        scores = self.llm.loglikelihood(requests)
        return [scores[2 * i] - scores[2 * i + 1] for i in range(len(pairs))]

    def replaced(self, new: Record, neighbours: Sequence[tuple[Record, float]]) -> Record | None:
        """The earlier record ``new`` replaces among its nearest ``neighbours`` (record, cosine), if any."""
        asked = [
            record
            for record, cosine in neighbours
            if record.kind is RecordKind.KNOWLEDGE and record.id != new.id and cosine >= self.min_similarity
        ][: self.candidates]
        if new.kind is not RecordKind.KNOWLEDGE or not asked:
            return None
        margins = self.margins([(record.text, new.text) for record in asked])
        best = max(range(len(asked)), key=margins.__getitem__)
        return asked[best] if margins[best] > self.margin else None
