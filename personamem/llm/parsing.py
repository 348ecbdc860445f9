"""Lenient reading of structured LLM output: small models wrap JSON in prose, fences and bad quoting.

Callers ask for JSON; these helpers recover what was meant from what came back, or say that nothing
usable did (None / empty), so the caller can fall back instead of failing.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["extract_json", "extract_string_list"]

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([\]}])")
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\(\d+\))\s*")


def extract_json(text: str) -> Any | None:
    """The first JSON array or object in ``text``, or None.

    Fenced or bare; single quotes and trailing commas are tolerated on a second attempt.
    """
    candidates = [*_FENCE.findall(text), text]
    for candidate in candidates:
        for opener, closer in (("[", "]"), ("{", "}")):
            start, end = candidate.find(opener), candidate.rfind(closer)
            if start < 0 or end <= start:
                continue
            snippet = candidate[start : end + 1]
            for attempt in (snippet, _TRAILING_COMMA.sub(r"\1", snippet.replace("'", '"'))):
                try:
                    return json.loads(attempt)
                except json.JSONDecodeError:
                    continue
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
