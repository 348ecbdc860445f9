"""``add`` returns once the row and its vector are in SQL; the vector index catches up in the background."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from personamem import PersonaMem, Record, SentenceEncoder


class CountingEncoder:
    """The real encoder, counting the texts it is asked to encode."""

    def __init__(self, encoder: SentenceEncoder) -> None:
        self._encoder, self.name, self.dim, self.texts = encoder, encoder.name, encoder.dim, 0

    def encode(self, texts: list[str]) -> np.ndarray:
        self.texts += len(texts)
        return self._encoder.encode(texts)


def test_an_added_record_is_searchable_before_it_is_indexed(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with (
        PersonaMem.open(tmp_path, encoder=encoder) as writer,
        PersonaMem.open(tmp_path, encoder=encoder) as reader,
    ):
        writer.add("ana", "I keep three beehives in the orchard")
        writer.add("ana", "My sister lives in Lisbon")
        # read through another store object, as another process would: only SQL has the vector yet
        assert (
            reader.search("ana", "honey bees", k=1)[0].record.text == "I keep three beehives in the orchard"
        )
        records, vectors = reader.store.vectors("ana")
        assert len(records) == 2 and vectors.shape == (2, encoder.dim)
        writer.store.flush()
        assert writer.store.catalog.pending() == {}
        assert reader.search("ana", "family abroad", k=1)[0].record.text == "My sister lives in Lisbon"


def test_a_record_staged_with_its_vector_is_repaired_without_re_encoding(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    record = Record(user_id="ana", text="I adopted a greyhound named Pixel")
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.store.catalog.stage([record], mem.store.names, encoder.encode([record.text]))  # killed here
    counting = CountingEncoder(encoder)
    with PersonaMem.open(tmp_path, encoder=counting) as mem:  # type: ignore[arg-type]
        assert counting.texts == 0
        assert mem.store.check().ok
        assert mem.search("ana", "my dog", k=1)[0].record.text == record.text


def test_forget_right_after_add_leaves_no_vector(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        for i in range(20):
            mem.add("ana", f"private note {i}")
        mem.add("bob", "bob stays")
        collection = mem.store.names.collection("ana")
        assert mem.forget("ana")
        mem.store.flush()
        assert collection not in mem.store.index.names()
        assert mem.store.check().ok
        assert [r.text for r in mem.records("bob")] == ["bob stays"]
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    assert collection.encode() not in stored


def test_changing_a_queued_record_indexes_its_latest_version(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add("ana", "I drive a red car", id="car")
        mem.add("ana", "I sold the car and ride a bicycle", id="car")
        assert mem.store.check().ok
        _, vectors = mem.store.vectors("ana")
        expected = encoder.encode(["I sold the car and ride a bicycle"])[0]
        assert vectors.shape == (1, encoder.dim) and float(vectors[0] @ expected) > 0.999
