"""The prompted extractor: an LLM reads a user's history once and writes their preference memory.

Two styles share the history rendering and the parser. ``sections`` is MemRerank's memory
(within-category and cross-category statements with evidence); ``atomic`` is one fact per line in
the manner of Mem0's fact extraction, the baseline the issue asks for. Both prompts are our own.
The history is shown newest-last and cut from the oldest end to ``history_tokens``, so one call's
cost is bounded however long the history grows; the memory is cached per user, so no query pays it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from personamem.llm.base import FrozenLLM, Message
from personamem.llm.budget import fit_to_budget
from personamem.llm.parsing import note_output
from personamem.preference.memory import ParsedMemory, PreferenceMemory, parse_memory
from personamem.records import Record

__all__ = ["PROMPT_VERSION", "ExtractionPrompt", "ExtractorStyle", "PromptedExtractor", "history_lines"]

PROMPT_VERSION = "1"
"""Part of every extractor's name, so a changed prompt never reuses memories cached under the old one."""

ExtractorStyle = Literal["sections", "atomic"]
_RECORD_WORDS = 60  # a long review is cut: the memory wants preferences, not every sentence

_SYSTEM = "You read a person's history and write down their lasting preferences, briefly and exactly."
_SECTIONS_TASK = (
    'Write this person\'s preference memory from the history above. Format: a line "WITHIN {category}:", '
    'then one line "- statement [line numbers]" for each thing they like, dislike, need or avoid in '
    '{categories}; then a line "CROSS:", then one line "- statement [line numbers]" for each habit '
    "that holds in every category. At most {statements} statements in all, each under 15 words, in "
    "your own words, each followed by the numbers of the history lines that show it. Nothing else."
)
_ATOMIC_TASK = (
    "List the facts about this person's preferences that the history above shows: one fact per "
    'line, each line "- fact [line numbers]". At most {statements} facts, each under 15 words, in '
    "your own words, each followed by the numbers of the history lines that show it. Nothing else."
)


@dataclass(frozen=True)
class ExtractionPrompt:
    """One user's extraction prompt and the record ids its numbered lines stand for."""

    messages: list[Message]
    shown_ids: list[str]
    shown_texts: list[str]
    default_category: str


def history_lines(
    records: Sequence[Record], count_tokens: Callable[[str], int], budget: int
) -> tuple[list[Record], str]:
    """The newest records that fit ``budget`` tokens, oldest first, as numbered lines.

    Each record is cut to 60 words and shows its category.
    """
    lines = [_line(r) for r in records]
    newest_first = list(reversed(range(len(records))))
    fitted = fit_to_budget(newest_first, budget, count_tokens, render=lambda i: lines[i])
    kept = sorted(fitted.kept)
    shown = [records[i] for i in kept]
    return shown, "\n".join(f"[{n}] {lines[i]}" for n, i in enumerate(kept, start=1))


def _line(record: Record) -> str:
    words = record.text.split()
    text = " ".join(words[:_RECORD_WORDS]) + (" ..." if len(words) > _RECORD_WORDS else "")
    return f"({record.category}) {text}" if record.category else text


class PromptedExtractor:
    """Writes a :class:`PreferenceMemory` from a history with a frozen (or trained) LLM.

    Args:
        llm: the model that writes the memory (greedy decoding).
        style: ``sections`` (MemRerank's within/cross memory) or ``atomic`` (one fact per line).
        max_words: the memory's word budget; statements past it are dropped.
        statements: how many statements the prompt asks for at most.
        history_tokens: most tokens of history shown (the newest records are kept).
        max_tokens: tokens generated.
        label: the extractor's name in caches and reports (default: style, model and prompt version).
    """

    def __init__(
        self,
        llm: FrozenLLM,
        *,
        style: ExtractorStyle = "sections",
        max_words: int = 120,
        statements: int = 8,
        history_tokens: int = 1024,
        max_tokens: int = 192,
        label: str | None = None,
    ) -> None:
        if style not in ("sections", "atomic"):
            raise ValueError(f"unknown extractor style {style!r}; choose sections or atomic")
        self.llm = llm
        self.style: ExtractorStyle = style
        self.max_words = max_words
        self.statements = statements
        self.history_tokens = history_tokens
        self.max_tokens = max_tokens
        self.name = label or f"{style}:{llm.name}:v{PROMPT_VERSION}:w{max_words}"

    def prompt(self, records: Sequence[Record]) -> ExtractionPrompt:
        """The extraction prompt for a history (records of one user)."""
        shown, history = history_lines(records, self.llm.count_tokens, self.history_tokens)
        categories = list(dict.fromkeys(r.category.lower() for r in shown if r.category))
        default = categories[0] if len(categories) == 1 else ""
        if self.style == "atomic":
            task = _ATOMIC_TASK.format(statements=self.statements)
        else:
            task = _SECTIONS_TASK.format(
                category=default or "<category>",
                categories=", ".join(categories) if categories else "what they buy or do",
                statements=self.statements,
            )
        user = f"History, oldest first:\n{history}\n\n{task}"
        return ExtractionPrompt(
            messages=[{"role": "system", "content": _SYSTEM}, {"role": "user", "content": user}],
            shown_ids=[r.id for r in shown],
            shown_texts=[r.text for r in shown],
            default_category=default,
        )

    def parse(self, answer: str, prompt: ExtractionPrompt) -> ParsedMemory:
        """Read an answer to ``prompt`` (repairs noted; the outcome counted as stage ``memory``)."""
        parsed = parse_memory(
            answer,
            prompt.shown_ids,
            default_category=prompt.default_category,
            max_words=self.max_words,
            expect_headers=self.style == "sections",
        )
        note_output("memory", "failed" if parsed.rejected else "repaired" if parsed.repaired else "clean")
        return parsed

    def extract_many(
        self, histories: Sequence[tuple[str, str | None, Sequence[Record]]]
    ) -> list[PreferenceMemory]:
        """Memories for (user id, revision, records) triples, with one batched generation.

        An empty history gives an empty memory without an LLM call; a rejected answer gives an empty
        memory whose notes say why.

        Raises:
            LLMError: the backend failed (the caller keeps the previous memory).
        """
        prompts = {i: self.prompt(records) for i, (_, _, records) in enumerate(histories) if records}
        start = time.perf_counter()
        answers: dict[int, str] = {}
        if prompts:
            order = list(prompts)
            out = self.llm.generate(
                [prompts[i].messages for i in order], max_tokens=self.max_tokens, temperature=0.0
            )
            answers = {i: texts[0] for i, texts in zip(order, out, strict=True)}
        seconds = (time.perf_counter() - start) / max(len(prompts), 1)
        memories = []
        for i, (user_id, revision, _) in enumerate(histories):
            if i not in prompts:
                memories.append(PreferenceMemory(user_id, revision=revision, extractor=self.name))
                continue
            parsed = self.parse(answers[i], prompts[i])
            notes = [f"rejected: {parsed.rejected}", *parsed.notes] if parsed.rejected else parsed.notes
            memories.append(
                PreferenceMemory(
                    user_id,
                    within=parsed.within,
                    cross=parsed.cross,
                    revision=revision,
                    extractor=self.name,
                    notes=notes,
                    seconds=seconds,
                )
            )
        return memories

    def extract(self, user_id: str, revision: str | None, records: Sequence[Record]) -> PreferenceMemory:
        """One user's memory (see :meth:`extract_many`)."""
        return self.extract_many([(user_id, revision, records)])[0]
