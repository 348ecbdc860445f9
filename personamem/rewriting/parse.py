"""Reading the model's JSON answer leniently: small models rarely write clean JSON.

The prompts ask for one JSON object, but answers come wrapped in prose or code fences, with single
quotes, trailing commas, ids as numbers or strings, or cut off by the token limit. This module pulls
out whatever fields are usable and reports the rest as missing (``None``); deciding what to fall back
to is the rewriter's job, since it depends on the strategy.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Any

from personamem.llm.parsing import is_clean_json, json_values, load_lenient, note_output

__all__ = ["ParsedAnswer", "parse_answer"]

# Keys models use for the fields we ask for, after lower-casing and mapping spaces/hyphens to "_". Not
# "facts" or "ids": models echo the listed facts under such keys, which is no selection.
_SELECTED_KEYS = ("selected", "selected_ids", "selected_facts", "selection", "relevant", "relevant_facts")
_REWRITE_KEYS = ("rewrite", "rewritten_query", "rewritten", "query", "rewritten_utterance", "reformulation")
_RESPONSE_KEYS = ("response", "answer")
_ID_TRIM = "[]#.() \t\n"
_ABSENT = object()  # a missing key, unlike an explicit null (which selects nothing)


@dataclass(frozen=True)
class ParsedAnswer:
    """The usable fields of one answer; ``None`` where the field is absent or unusable.

    Attributes:
        selected: statement ids that name a statement of the PTKB, in the model's order without
            repeats (ids naming no statement are dropped: an empty tuple is a usable, empty selection).
        rewrite: the rewritten query, stripped; never empty.
        response: the answer to the query, stripped; never empty.
    """

    selected: tuple[str, ...] | None = None
    rewrite: str | None = None
    response: str | None = None


def parse_answer(text: str, statement_ids: Collection[str]) -> ParsedAnswer:
    """Extract the selection, rewrite and response from a model's answer.

    The first JSON-like object (parsed as JSON, then with trailing commas removed, then as a Python
    literal for single quotes) that has one of the expected keys is used; if none parses, each field
    is looked for on its own with a pattern, which recovers fields before a cut-off. Prose without
    any such field yields all ``None``: an answer in free text might be a reply rather than a rewrite.

    Args:
        text: the raw completion.
        statement_ids: the ids of the turn's PTKB statements; other ids are dropped.
    """
    fields = next((obj for obj in _objects(text) if _known(obj)), None)
    clean = fields is not None and is_clean_json(text)
    if fields is None:
        fields = _loose_fields(text)
    parsed = ParsedAnswer(
        selected=_ids(_get(fields, _SELECTED_KEYS), statement_ids),
        rewrite=_text(_get(fields, _REWRITE_KEYS)),
        response=_text(_get(fields, _RESPONSE_KEYS)),
    )
    usable = parsed != ParsedAnswer()
    note_output("rewrite answer", "failed" if not usable else "clean" if clean else "repaired")
    return parsed


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """Every balanced ``{...}`` span that loads as a dict, outermost first, left to right; keys normalized."""
    for loaded in json_values(text, "{"):
        if isinstance(loaded, dict):
            yield {_norm_key(k): v for k, v in loaded.items() if isinstance(k, str)}


def _loose_fields(text: str) -> dict[str, Any]:
    """Fields found one by one (``"key": "string"`` or ``"key": [list]``), for broken or cut-off JSON."""
    fields: dict[str, Any] = {}
    pattern = r"""["']?\b({key})["']?\s*:\s*(\[[^\[\]]*\]|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')"""
    for key in (*_SELECTED_KEYS, *_REWRITE_KEYS, *_RESPONSE_KEYS):
        match = re.search(pattern.format(key=re.escape(key).replace("_", "[ _-]")), text, re.IGNORECASE)
        if match and (value := load_lenient(match[2])) is not None:
            fields.setdefault(key, value)
    return fields


def _norm_key(key: str) -> str:
    return re.sub(r"[\s-]+", "_", key.strip().lower())


def _known(obj: dict[str, Any]) -> bool:
    return any(k in obj for k in (*_SELECTED_KEYS, *_REWRITE_KEYS, *_RESPONSE_KEYS))


def _get(fields: dict[str, Any], keys: tuple[str, ...]) -> Any:
    """The value of the first of ``keys`` present, or :data:`_ABSENT`."""
    return next((fields[k] for k in keys if k in fields), _ABSENT)


def _text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _ids(value: Any, statement_ids: Collection[str]) -> tuple[str, ...] | None:
    """Selected ids as PTKB keys; None when the key is absent or its value is no kind of id list.

    Accepts a list (of ints, integral floats, strings like ``"3"`` or ``"[3]"``, or ``{"id": 3}``), a
    single id, a comma-separated string, or ``null`` (nothing selected).
    """
    if value is _ABSENT:
        return None
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [part for part in re.split(r"[,;\s]+", value) if part]
    elif isinstance(value, list | tuple):
        items = list(value)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        items = [value]
    else:
        return None
    keys: list[str] = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("id")
        if isinstance(item, bool):
            continue
        if isinstance(item, float) and item.is_integer():
            item = int(item)
        key = str(item).strip(_ID_TRIM) if isinstance(item, int | str) else ""
        if key in statement_ids and key not in keys:
            keys.append(key)
    return tuple(keys)
