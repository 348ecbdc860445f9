"""Personal-knowledge query rewriting for conversational search (TREC iKAT's PTKB).

Turn a conversational utterance into a self-contained, personalized query with a frozen LLM, using
the user's personal statements in one of four ways: not at all ("none"), all of them ("all"), select
then reformulate in two calls ("str"), or select and reformulate in one ("sar"); zero- or few-shot.
Then score the selection against the gold statements and the rewrite against the manual one.
"""

from personamem.rewriting.config import RewriteConfig, Strategy
from personamem.rewriting.data import load_ikat_turns, statements_by_user
from personamem.rewriting.metrics import METRICS, score_rewrites, selection_prf
from personamem.rewriting.parse import ParsedAnswer, parse_answer
from personamem.rewriting.rewriter import Rewrite, rewrite_turns
from personamem.rewriting.shots import Demonstration, make_demonstrations, pick_shots

__all__ = [
    "METRICS",
    "Demonstration",
    "ParsedAnswer",
    "Rewrite",
    "RewriteConfig",
    "Strategy",
    "load_ikat_turns",
    "make_demonstrations",
    "parse_answer",
    "pick_shots",
    "rewrite_turns",
    "score_rewrites",
    "selection_prf",
    "statements_by_user",
]
