"""Every iKAT turn for rewriting, including the turns that need no PTKB statement.

:func:`~personamem.eval.benchmarks.ikat.load_ikat_benchmark` skips turns with empty
``ptkb_provenance``, since statement retrieval cannot be scored on them. Rewriting must still handle
them (the right answer is a rewrite without personal facts, and selecting nothing is scorable), so this
builds the same questions, with the same ids and attributes, for all turns.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from personamem.eval.benchmark import Question
from personamem.eval.benchmarks.ikat import _provenance, _question, _topics_file, _turns
from personamem.ingest._json import JsonFile
from personamem.ingest.ikat import load_ikat
from personamem.records import Record

__all__ = ["load_ikat_turns", "statements_by_user"]


def load_ikat_turns(
    data_dir: str | Path, *, split: str = "2023_test"
) -> tuple[list[Question], dict[str, dict[str, str]]]:
    """All turns of one iKAT split and each topic's PTKB.

    Args:
        data_dir: the folder holding the ``<split>_topics.json`` files.
        split: e.g. ``"2023_train"``, ``"2023_test"``, ``"2024_test"``.

    Returns:
        The turns in file order, shaped like :func:`load_ikat_benchmark`'s questions (same ids, users,
        context and ``resolved_utterance``; no ``judged`` flag) but with possibly empty ``relevant``
        (provenance keys naming no statement are dropped, as there); and user id -> statement id ->
        statement text.

    Raises:
        IngestError: as :func:`load_ikat_benchmark`.
    """
    path = _topics_file(Path(data_dir), split)
    prefix = f"ikat{split.partition('_')[0]}-"
    statements = statements_by_user(load_ikat(path, user_prefix=prefix))
    src = JsonFile(path)
    turns = []
    for turn in _turns(src):
        ptkb = statements.get(prefix + turn.topic, {})
        relevant = {key: 1 for key in _provenance(src, turn) if key in ptkb}
        turns.append(_question(src, turn, prefix, relevant, None))
    return turns, statements


def statements_by_user(records: Iterable[Record]) -> dict[str, dict[str, str]]:
    """Index PTKB records as user id -> statement id -> text (the rewriter's ``statements_by_user``)."""
    index: dict[str, dict[str, str]] = {}
    for record in records:
        index.setdefault(record.user_id, {})[record.id] = record.text
    return index
