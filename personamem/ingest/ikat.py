"""Import the PTKB (personal text knowledge base) statements of TREC iKAT 2023/2024 topics.

Each topic is one simulated user whose PTKB lists short statements about them ("I'm vegetarian.").
One statement becomes one :attr:`~personamem.records.RecordKind.KNOWLEDGE` record whose id is its PTKB
key (``"1"``, ``"2"``, ...), because each turn's ``ptkb_provenance`` names the relevant statements by
those keys: kept unchanged, they are the gold labels for statement selection.
"""

from __future__ import annotations

from pathlib import Path

from personamem.ingest._json import JsonFile
from personamem.records import Record, RecordKind

__all__ = ["load_ikat"]


def load_ikat(path: str | Path, *, user_prefix: str = "") -> list[Record]:
    """Load every topic's PTKB statements from an iKAT topics file, one record per statement.

    Args:
        path: a ``*_topics.json`` file (a list of topics with ``number``, ``title`` and ``ptkb``).
        user_prefix: prepended to the topic number to form the user id. Topic numbers repeat across
            years (2024 numbers topics 0, 1, ...), so a prefix such as ``"ikat24-"`` keeps users
            from different files apart in one store.

    Returns:
        The records, topic by topic in file order; user id is ``user_prefix + str(number)`` and
        metadata holds the topic ``title``.

    Raises:
        IngestError: the file is missing, not JSON, not a list of topics, or a topic lacks a field
            or has a blank statement or key.
    """
    src = JsonFile(Path(path))
    records: list[Record] = []
    for i, topic in enumerate(src.expect(src.load(), list, "top level")):
        topic = src.expect(topic, dict, f"topic {i}")
        number = src.field(topic, "number", object, f"topic {i}")
        if isinstance(number, bool) or not isinstance(number, str | int) or not str(number).strip():
            raise src.error(f"topic {i}: field 'number' must be a non-blank string or an integer")
        where = f"topic {number!r}"
        title = src.field(topic, "title", str, where)
        ptkb = src.field(topic, "ptkb", dict, where)
        for key in ptkb:
            if not key.strip():
                raise src.error(f"{where}, field 'ptkb': blank statement key")
            records.append(
                Record(
                    user_id=f"{user_prefix}{number}",
                    text=src.text(ptkb, key, f"{where}, field 'ptkb'"),
                    id=key,
                    kind=RecordKind.KNOWLEDGE,
                    metadata={"title": title},
                )
            )
    return records
