"""How a profile is shown to an LLM: one rendering for the context call, the harness and the rewards.

``personamem eval --answers`` scores, and PURPLE's reward trains on, exactly the prompt an application
gets from :meth:`~personamem.PersonaMem.context`, so a reported answer log-likelihood is the quantity
the learned stages optimize.
"""

from __future__ import annotations

from collections.abc import Sequence

from personamem.llm.base import FrozenLLM, Message
from personamem.llm.budget import fit_to_budget
from personamem.records import Record

__all__ = ["ANSWER_RESERVE", "INSTRUCTION", "profile_prompt", "render_record"]

ANSWER_RESERVE = 64
"""Tokens kept free in the context window for the answer (scored or generated)."""

INSTRUCTION = (
    "You know the user through the records below, taken from their own history. "
    "Answer their question in a few words, using the records."
)
_TEMPLATE_TOKENS = 16  # what a chat template adds around the messages


def render_record(record: Record) -> str:
    """One profile line."""
    return f"- {record.text}"


def profile_prompt(llm: FrozenLLM, profile: Sequence[Record], question: str) -> list[Message]:
    """A chat prompt with as many profile records (in order) as fit the window, then the question."""
    frame = f"{INSTRUCTION}\n\nRecords:\n\n\nQuestion: {question}"
    budget = llm.context_window - ANSWER_RESERVE - llm.count_tokens(frame) - _TEMPLATE_TOKENS
    fitted = fit_to_budget(list(profile), max(0, budget), llm.count_tokens, render=render_record)
    return [
        {"role": "system", "content": INSTRUCTION},
        {"role": "user", "content": f"Records:\n{fitted.text}\n\nQuestion: {question}"},
    ]
