"""Personal-knowledge query rewriting for conversational search (TREC iKAT's PTKB).

Turn a conversational utterance into a self-contained, personalized query with a frozen LLM, using
the user's personal statements in one of four ways: not at all ("none"), all of them ("all"), select
then reformulate in two calls ("str"), or select and reformulate in one ("sar"); zero- or few-shot.

At run time, :class:`RewritePersonalizer` is a query personalizer: it rewrites a user's query with
their ``knowledge`` records and searches with the rewrite's vector. Evaluation on iKAT (loading turns
with their gold, demonstrations from solved turns, scoring) is part of the harness:
:mod:`personamem.eval.rewriting`.
"""

from personamem.rewriting.config import RewriteConfig, Strategy
from personamem.rewriting.data import statements_by_user
from personamem.rewriting.metrics import METRICS, selection_prf
from personamem.rewriting.parse import ParsedAnswer, parse_answer
from personamem.rewriting.personalizer import RewritePersonalizer
from personamem.rewriting.rewriter import Rewrite, rewrite_turns, rewrite_with_statements
from personamem.rewriting.shots import Demonstration, pick_shots
from personamem.rewriting.turn import Turn

__all__ = [
    "METRICS",
    "Demonstration",
    "ParsedAnswer",
    "Rewrite",
    "RewriteConfig",
    "RewritePersonalizer",
    "Strategy",
    "Turn",
    "parse_answer",
    "pick_shots",
    "rewrite_turns",
    "rewrite_with_statements",
    "selection_prf",
    "statements_by_user",
]
