"""Every iKAT turn for rewriting, including the turns that need no PTKB statement.

:func:`~personamem.eval.benchmarks.ikat.load_ikat_benchmark` skips turns with empty
``ptkb_provenance``, since statement retrieval cannot be scored on them. Rewriting must still handle
them (the right answer is a rewrite without personal facts, and selecting nothing is scorable), so this
asks it for all turns.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from personamem.eval.benchmark import Question
from personamem.eval.benchmarks.ikat import load_ikat_benchmark
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
        The turns in file order, as :func:`load_ikat_benchmark` makes them but with possibly empty
        ``relevant``; and user id -> statement id -> statement text.

    Raises:
        IngestError: as :func:`load_ikat_benchmark`.
    """
    bench = load_ikat_benchmark(data_dir, split=split, include_unlabelled=True)
    return bench.questions, statements_by_user(bench.records)


def statements_by_user(records: Iterable[Record]) -> dict[str, dict[str, str]]:
    """Index PTKB records as user id -> statement id -> text (the rewriter's ``statements_by_user``)."""
    index: dict[str, dict[str, str]] = {}
    for record in records:
        index.setdefault(record.user_id, {})[record.id] = record.text
    return index
