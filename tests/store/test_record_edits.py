"""Per-record delete and update: a deleted record leaves no trace; an updated one is searched as new."""

from __future__ import annotations

from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.errors import InvalidInputError
from tests.bytescan import files_containing, store_files, vectors_in


def test_a_deleted_record_leaves_no_trace_on_disk(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many(
            [{"text": f"note {i} about my week", "id": f"keep-{i}"} for i in range(1500)]
            + [{"text": "ZQXGONETEXT my old address", "id": "ZQXGONEID"}],
            user_id="ana",
        )
        mem.add("bob", "bob stays")
        records, vectors = mem.store.vectors("ana")
        gone = next(i for i, r in enumerate(records) if r.id == "ZQXGONEID")
        vector = vectors[gone : gone + 1]
        vector_id = mem.store.names.vector_id("ana", "ZQXGONEID").encode()
        mem.store.derived("ana", "test", "k", lambda: {"quote": "ZQXGONETEXT"})
        assert vectors_in(store_files(tmp_path), vector), "the vector should be on disk before delete"

        assert mem.delete("ana", ["ZQXGONEID", "no-such-id"]) == ["ZQXGONEID"]

        after = store_files(tmp_path)
        for needle in (b"ZQXGONETEXT", b"ZQXGONEID", vector_id):
            assert files_containing(after, needle) == [], needle
        assert vectors_in(after, vector) == set()
        assert mem.count("ana") == 1500 and mem.get("ana", "ZQXGONEID") is None
        assert mem.search("ana", "note 7 about my week", k=1)[0].record.id == "keep-7"
        assert mem.store.check().ok
        assert [r.text for r in mem.records("bob")] == ["bob stays"]


def test_update_replaces_the_text_and_the_vector(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I drive a red car", id="car", category="transport")
        mem.add("ana", "I love jazz")
        updated = mem.update("ana", "car", text="I sold the car and ride a bicycle")
        assert updated.id == "car" and updated.category == "transport"
        assert mem.search("ana", "cycling", k=1)[0].record.text == "I sold the car and ride a bicycle"
        assert mem.count("ana") == 2 and mem.store.check().ok


def test_bad_edits_are_refused_and_change_nothing(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I love jazz", id="jazz")
        assert mem.delete("ana", "no-such-id") == [] and mem.delete("nobody", ["jazz"]) == []
        with pytest.raises(InvalidInputError, match="record ids"):
            mem.delete("ana", [b"jazz"])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError, match="user_id"):
            mem.delete(b"ana", ["jazz"])  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="no record"):
            mem.update("ana", "missing", text="x")
        with pytest.raises(InvalidInputError, match="cannot change a record's id"):
            mem.update("ana", "jazz", id="blues")
        assert [r.text for r in mem.records("ana")] == ["I love jazz"]
