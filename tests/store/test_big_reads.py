"""Reads and deletes of many vector ids go to Chroma in bounded chunks.

Embedded Chroma's SQLite refuses a statement of more than 32,766 variables: before chunking, a
default search for a user of 40,000 records failed as a damaged index (``UnreadableIndexError``)
when the ranker read every vector by id (measured in ``bench/scale.py``'s big user). Here the chunk
is made small, so a user of 30 records crosses many chunk boundaries in every read and delete.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import personamem.store.recovery as recovery
import personamem.store.vectors as vectors
from personamem import PersonaMem, SentenceEncoder
from personamem.store.catalog_reads import _USER_VECTORS


def test_reads_and_deletes_of_many_ids_go_in_chunks(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "IDS_PER_CALL", 7)
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        texts = [
            f"Note {i}: I planted {i} tulips by the {['fence', 'pond', 'shed'][i % 3]}." for i in range(30)
        ]
        ids = [mem.add("ana", text).id for text in texts]
        mem.store.flush()
        collection = mem.store.names.collection(mem.store._key("ana"))
        index = mem.store.index
        every, matrix = index.vectors(collection)
        by_id, chunked = index.vectors(collection, list(reversed(every)))
        assert len(every) == 30 and sorted(by_id) == sorted(every)
        rows = {vid: row for vid, row in zip(by_id, chunked, strict=True)}
        assert all(np.array_equal(rows[vid], row) for vid, row in zip(every, matrix, strict=True))
        assert mem.search("ana", texts[12], k=1)[0].record.id == ids[12]  # the default: ranker signals
        assert sorted(mem.delete("ana", ids[:20])) == sorted(ids[:20])
        assert sorted(h.record.id for h in mem.search("ana", "tulips", k=30, method="dense")) == sorted(
            ids[20:]
        )
        assert mem.store.check().ok


def test_a_delete_and_a_rebuild_index_a_big_users_rows_again_in_batches(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both keep the vectors SQL holds and index the rows again a batch at a time, every row once."""
    monkeypatch.setattr(recovery, "_REBUILD_BATCH", 4)
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        ids = [mem.add("ana", f"Note {i}: I planted {i} tulips.").id for i in range(30)]
        mem.store.flush()
        key = mem.store._key("ana")
        collection = mem.store.names.collection(key)
        assert sorted(mem.delete("ana", ids[:3])) == sorted(ids[:3])
        assert len(mem.store.index.ids(collection)) == 27 and not mem.store.catalog.pending(key)
        recovery.rebuild(mem.store.indexing, key)
        assert len(mem.store.index.ids(collection)) == 27 and not mem.store.catalog.pending(key)
        found = mem.search("ana", "tulips", k=30, method="dense")
        assert sorted(h.record.id for h in found) == sorted(ids[3:])


def test_a_users_indexed_rows_are_found_through_the_user_and_status_index(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """Without statistics, SQLite's planner walked the status index: every indexed row of the store,
    for each cold user's first search (39 ms at 54,000 rows)."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("u", "I keep bees on the roof.")
        mem.store.flush()
    with contextlib.closing(sqlite3.connect(tmp_path / "personamem.sqlite")) as db:
        plan = db.execute(f"EXPLAIN QUERY PLAN {_USER_VECTORS}", ("indexed", "u")).fetchall()
    assert "ix_records_user_status (user_id=? AND status=?)" in plan[-1][-1]
