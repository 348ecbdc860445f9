"""Lenient reading of structured LLM output: small models wrap JSON in prose, fences and bad quoting.

Callers ask for JSON; these helpers recover what was meant from what came back, or say that nothing
usable did (None / empty), so the caller can fall back instead of failing.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["extract_json", "extract_string_list", "json_values", "load_lenient"]

_TRAILING_COMMA = re.compile(r",\s*([\]}])")
_JSON_WORDS = re.compile(r"\b(true|false|null)\b")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\(\d+\))\s*")
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


def extract_string_list(text: str, limit: int | None = None) -> list[str]:
    """Strings from a JSON list in ``text``, else from its bulleted or numbered lines; de-duplicated.

    Non-string JSON items are kept as their text (numbers) or their string values joined (objects).
    """
    parsed = extract_json(text)
    if isinstance(parsed, dict):
        parsed = next((v for v in parsed.values() if isinstance(v, list)), None)
    if isinstance(parsed, list):
        items = [_as_text(item) for item in parsed]
    else:
        lines = (_BULLET.sub("", line).strip().strip("\"'") for line in text.splitlines())
        items = [line for line in lines if not line.endswith(":")]  # "Here are five messages:"
    found = list(dict.fromkeys(item.strip() for item in items if item and item.strip()))
    return found[:limit] if limit is not None else found


def _as_text(item: Any) -> str:
    if isinstance(item, dict):
        return " ".join(str(v) for v in item.values() if isinstance(v, str | int | float))
    return "" if item is None else str(item)
