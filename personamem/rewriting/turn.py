"""The rewriter's input: one conversational turn, independent of any benchmark.

The evaluation harness converts its questions into turns (:func:`personamem.rewriting.evaluate.as_turn`);
the run-time personalizer makes them from a bare (user, query) pair. Either way the rewriter only ever
sees these four fields.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Turn"]


@dataclass(frozen=True)
class Turn:
    """One utterance to rewrite and the conversation before it.

    Attributes:
        id: names the turn in results and warnings.
        user_id: whose personal statements apply (and whose topic few-shot demonstrations avoid).
        text: the utterance as the user said it.
        context: the user's earlier utterances in the conversation, oldest first (empty for a query
            on its own).
    """

    id: str
    user_id: str
    text: str
    context: tuple[str, ...] = ()
