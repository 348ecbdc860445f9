"""Lenient reading of structured LLM output: small models wrap JSON in prose, fences and bad quoting.

Callers ask for JSON; these helpers recover what was meant from what came back, or say that nothing
usable did (None / empty), so the caller can fall back instead of failing. Every answer a stage reads
is counted as ``clean`` (the answer is the JSON asked for, perhaps in a code fence), ``repaired``
(recovered: JSON amid prose, trailing commas, single quotes, a bulleted list, fields of a cut-off
object) or ``failed`` (nothing usable: the stage falls back), so a report can say how often each
happened (:func:`tally_outputs`). Prose is never taken for an answer.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Literal, TypeAlias

__all__ = [
    "ParseOutcome",
    "extract_json",
    "extract_string_list",
    "is_clean_json",
    "json_values",
    "load_lenient",
    "note_output",
    "tally_outputs",
]

ParseOutcome: TypeAlias = Literal["clean", "repaired", "failed"]
_FENCE = re.compile(r"^\s*```[a-zA-Z]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)
_tally: ContextVar[Counter[str] | None] = ContextVar("personamem_outputs", default=None)


def note_output(stage: str, outcome: ParseOutcome) -> None:
    """Count one parsed answer of ``stage`` in the enclosing :func:`tally_outputs`, if any."""
    if (counts := _tally.get()) is not None:
        counts[f"{stage} {outcome}"] += 1


@contextlib.contextmanager
def tally_outputs() -> Iterator[Counter[str]]:
    """Count ``"<stage> <outcome>"`` for the answers parsed in this thread or task meanwhile."""
    counts: Counter[str] = Counter()
    token = _tally.set(counts)
    try:
        yield counts
    finally:
        _tally.reset(token)


def is_clean_json(text: str) -> bool:
    """Whether ``text`` is one JSON value and nothing else (a code fence around it allowed)."""
    fenced = _FENCE.match(text)
    try:
        json.loads(fenced[1] if fenced else text)
    except ValueError:
        return False
    return True


_TRAILING_COMMA = re.compile(r",\s*([\]}])")
_JSON_WORDS = re.compile(r"\b(true|false|null)\b")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\(\d+\))\s+")
_CLOSERS = {"[": "]", "{": "}"}


def load_lenient(span: str) -> Any | None:
    """``span`` as JSON, as JSON without trailing commas, or as a Python literal; None if none works.

    The Python-literal attempt reads single-quoted strings, which small models often write.
    """
    repaired = _TRAILING_COMMA.sub(r"\1", span)
    for candidate in (span, repaired):
        try:
            return json.loads(candidate)
        except ValueError:
            pass
    python = _JSON_WORDS.sub(lambda m: {"true": "True", "false": "False", "null": "None"}[m[1]], repaired)
    try:
        return ast.literal_eval(python)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def json_values(text: str, openers: str = "[{") -> Iterator[Any]:
    """Every balanced span opened by one of ``openers`` that loads leniently, left to right.

    Outermost spans win; prose and code fences around them are skipped.
    """
    start = _next_opener(text, openers, 0)
    while start >= 0:
        end = _matching_close(text, start)
        loaded = None if end is None else load_lenient(text[start : end + 1])
        if end is not None and loaded is not None:
            yield loaded
            start = _next_opener(text, openers, end + 1)
        else:
            start = _next_opener(text, openers, start + 1)


def extract_json(text: str) -> Any | None:
    """The first JSON array or object in ``text``, or None."""
    return next(json_values(text), None)


def _next_opener(text: str, openers: str, start: int) -> int:
    found = [i for i in (text.find(opener, start) for opener in openers) if i >= 0]
    return min(found, default=-1)


def _matching_close(text: str, start: int) -> int | None:
    """Index of the bracket closing the one at ``start``, skipping quoted strings; None if unclosed."""
    opener, closer = text[start], _CLOSERS[text[start]]
    depth, quote, escaped = 0, "", False
    for i in range(start, len(text)):
        char = text[i]
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return i
    return None


def extract_string_list(text: str, limit: int | None = None, *, stage: str = "list") -> list[str]:
    """Strings from a JSON list in ``text``, else from its bulleted or numbered lines; de-duplicated.

    Non-string JSON items are kept as their text (numbers) or their string values joined (objects).
    Lines without a bullet or number are prose, not items: an answer of prose alone gives ``[]``.
    The outcome is counted under ``stage`` (:func:`note_output`).
    """
    parsed = extract_json(text)
    if isinstance(parsed, dict):
        parsed = next((v for v in parsed.values() if isinstance(v, list)), None)
    if isinstance(parsed, list):
        items = [_as_text(item) for item in parsed]
    else:
        bulleted = (_BULLET.sub("", line) for line in text.splitlines() if _BULLET.match(line))
        items = [line.strip().strip("\"'") for line in bulleted]
    found = list(dict.fromkeys(item.strip() for item in items if item and item.strip()))
    clean = isinstance(parsed, list) and is_clean_json(text)
    note_output(stage, "failed" if not found else "clean" if clean else "repaired")
    return found[:limit] if limit is not None else found


def _as_text(item: Any) -> str:
    if isinstance(item, dict):
        return " ".join(str(v) for v in item.values() if isinstance(v, str | int | float))
    return "" if item is None else str(item)
