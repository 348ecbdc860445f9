"""Personal statements as the rewriter reads them: user id -> statement id -> text.

Loading iKAT's turns for evaluation is the harness's side
(:func:`personamem.rewriting.evaluate.load_ikat_turns`).
"""

from __future__ import annotations

from collections.abc import Iterable

from personamem.records import Record

__all__ = ["statements_by_user"]


def statements_by_user(records: Iterable[Record]) -> dict[str, dict[str, str]]:
    """Index PTKB records as user id -> statement id -> text (the rewriter's ``statements_by_user``)."""
    index: dict[str, dict[str, str]] = {}
    for record in records:
        index.setdefault(record.user_id, {})[record.id] = record.text
    return index
