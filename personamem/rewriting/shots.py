"""Few-shot demonstrations: gold rewrites from other topics, picked reproducibly from a seed.

iKAT's train topics carry everything a demonstration needs: the utterance and its conversation, the
PTKB, the statements the organizers marked relevant (``ptkb_provenance``) and the manual rewrite
(``resolved_utterance``). Picking by seed makes the shots part of what a seed controls, so variability
across seeds covers the choice of demonstrations too. Making demonstrations from benchmark turns is
the harness's side (:func:`personamem.rewriting.evaluate.make_demonstrations`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from personamem.rewriting.turn import Turn

__all__ = ["Demonstration", "pick_shots"]


@dataclass(frozen=True)
class Demonstration:
    """One solved turn shown to the model before the turn it must rewrite.

    Attributes:
        user_id: the topic's user, so a turn is never shown a demonstration from its own topic.
        turn_id: the turn's id, for logs.
        utterance: the turn as the user said it.
        context: earlier utterances of its conversation, oldest first.
        statements: the topic's PTKB, statement id -> text.
        selected: the gold relevant statement ids (possibly none).
        rewrite: the gold self-contained rewrite.
        response: the gold system response, if known.
    """

    user_id: str
    turn_id: str
    utterance: str
    context: tuple[str, ...]
    statements: Mapping[str, str]
    selected: tuple[str, ...]
    rewrite: str
    response: str | None = None


def pick_shots(examples: Sequence[Demonstration], turn: Turn, k: int, seed: int) -> tuple[Demonstration, ...]:
    """``k`` demonstrations for ``turn``, drawn with ``random.Random(seed)`` from other topics' examples.

    The same seed and example list give the same shots for every turn whose topic is not among the
    examples' topics (the usual case: train demonstrations, test turns).

    Raises:
        ValueError: fewer than ``k`` examples come from other topics.
    """
    if k == 0:
        return ()
    pool = [demo for demo in examples if demo.user_id != turn.user_id]
    if len(pool) < k:
        raise ValueError(
            f"{k} shots asked for turn {turn.id} but only {len(pool)} demonstrations come from other topics"
        )
    return tuple(random.Random(seed).sample(pool, k))
