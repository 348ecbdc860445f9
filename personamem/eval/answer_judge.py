"""The answer judge: a frozen LLM decides whether a generated answer says what the gold answer says.

Memory layers report LoCoMo as an LLM judge's accuracy, not token overlap: "in March 2023" and
"March 2023" are the same answer, and a long correct answer has a poor F1. The judge here is any
frozen LLM (packaged, vLLM, OpenAI-compatible) reading the project's own prompt, published in
``docs/guides/evaluation.md`` with its version; the version is part of every cached verdict's key,
so a reworded prompt never reuses the old one's verdicts.

The judge writes one word. A reply with neither word is settled by the log-likelihood of each word
after the prompt, where the backend can score (one forward pass each); a backend that cannot, or
fails, counts the answer wrong. Each way is tallied (``answer-judge clean|repaired|failed``), so a
report says how often the judge had to be read that way.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from personamem.errors import PersonaMemError
from personamem.llm.base import FrozenLLM, Message
from personamem.llm.parsing import ParseOutcome, note_output

__all__ = ["ANSWER_JUDGE_VERSION", "AnswerJudge", "Judged", "answer_judge_prompt", "read_verdict"]

ANSWER_JUDGE_VERSION = "answer-judge-v1"
"""Names the prompt below; part of every cached verdict's key."""

_SYSTEM = "You check answers to questions about a person against the reference answer. Reply with one word."
_WORDS = re.compile(r"\b(CORRECT|INCORRECT|WRONG)\b")
_STAGE = "answer-judge"


def answer_judge_prompt(question: str, reference: str, answer: str) -> list[Message]:
    """The judge's chat prompt for one generated answer."""
    user = (
        f"Question: {question}\n"
        f"Reference answer: {reference}\n"
        f"Answer to check: {answer}\n\n"
        "The answer to check is CORRECT when it states what the reference states, in any wording: "
        "shorter or longer, a date or number written another way, extra details that do not "
        "contradict it. It is WRONG when it gives another fact, contradicts the reference, leaves "
        "out what the question asks, or declines to answer while the reference answers.\n"
        "Reply CORRECT or WRONG."
    )
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}]


def read_verdict(text: str) -> bool | None:
    """True for CORRECT, False for WRONG (or INCORRECT), whichever comes first; None for neither."""
    found = _WORDS.search(text.upper())
    return None if found is None else found.group(1) == "CORRECT"


@dataclass(frozen=True)
class Judged:
    """One verdict: whether the answer is correct, and how the judge's reply was read."""

    correct: bool
    read: ParseOutcome


class AnswerJudge:
    """Verdicts of ``llm`` on (question, reference, answer) triples, greedy and deterministic."""

    def __init__(self, llm: FrozenLLM) -> None:
        self.llm = llm

    def key(self, question: str, reference: str, answer: str) -> str:
        """The verdict's cache key: the judge, the prompt's version and the triple."""
        parts = [self.llm.name, ANSWER_JUDGE_VERSION, question, reference, answer]
        return hashlib.sha256(json.dumps(parts).encode()).hexdigest()

    def judge(self, triples: Sequence[tuple[str, str, str]]) -> list[Judged]:
        """One verdict per (question, reference, answer), in one batched generation."""
        prompts = [answer_judge_prompt(*triple) for triple in triples]
        replies = self.llm.generate(prompts, max_tokens=4)
        verdicts = []
        for prompt, (reply,) in zip(prompts, replies, strict=True):
            verdict = read_verdict(reply)
            judged = Judged(verdict, "clean") if verdict is not None else self._by_likelihood(prompt)
            note_output(_STAGE, judged.read)
            verdicts.append(judged)
        return verdicts

    def _by_likelihood(self, prompt: list[Message]) -> Judged:
        """The likelier of the two words after the prompt; wrong when the backend cannot score."""
        try:
            correct, wrong = self.llm.loglikelihood([(prompt, "CORRECT"), (prompt, "WRONG")])
        except (PersonaMemError, NotImplementedError):
            return Judged(False, "failed")
        return Judged(correct > wrong, "repaired")
