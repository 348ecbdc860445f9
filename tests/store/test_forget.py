"""``forget`` leaves no trace of the user anywhere in the store's files: no text, no id, no vector."""

import hashlib
from pathlib import Path

import pytest
from sqlmodel import select

from personamem import PersonaMem, SentenceEncoder
from personamem.store.pseudonyms import legacy_collection
from personamem.store.sql import PSEUDONYM_KEY, RecordRow, StoreInfo
from tests.bytescan import files_containing, store_files, vectors_in

MARKERS = ["ZQXTEXTMARK", "ZQXIDMARK", "ZQXUSERMARK", "ZQXMETAMARK", "ZQXCATMARK"]


def test_forget_leaves_no_trace_on_disk(tmp_path: Path, encoder: SentenceEncoder) -> None:
    store = tmp_path / "store"
    with PersonaMem.open(store, encoder=encoder) as mem:
        mem.add_many(
            [
                {
                    "text": f"ZQXTEXTMARK my diagnosis, note {i}",
                    "id": f"ZQXIDMARK-{i}",
                    "category": "ZQXCATMARK",
                    "metadata": {"source": "ZQXMETAMARK"},
                }
                for i in range(300)  # enough to spill Chroma's brute-force buffer into its HNSW files
            ],
            user_id="ZQXUSERMARK",
        )
        for i in range(3):  # other users, written after: their HNSW files are allocated meanwhile
            mem.add_many([f"note {j} of user {i}" for j in range(120)], user_id=f"other-{i}")
        mem.search("ZQXUSERMARK", "diagnosis", k=3, method="hybrid")
        records, vectors = mem.store.vectors("ZQXUSERMARK")
        names = mem.store.names
        collection = names.collection("ZQXUSERMARK").encode()
        vector_ids = [names.vector_id("ZQXUSERMARK", r.id).encode() for r in records]
        before = store_files(store)
        assert files_containing(before, b"ZQXTEXTMARK"), "the marker should be on disk before forget"
        assert files_containing(before, collection), "the collection name should be on disk before"
        assert len(vectors_in(before, vectors)) > 200

        assert mem.forget("ZQXUSERMARK")

        after = store_files(store)
        for marker in MARKERS:
            assert files_containing(after, marker.encode()) == [], marker
        assert files_containing(after, collection) == []
        assert [vid for vid in vector_ids if files_containing(after, vid)] == []
        assert vectors_in(after, vectors) == set()
        assert [r.text for r in mem.records("other-1")][:1] == ["note 0 of user 1"]
    with PersonaMem.open(store, encoder=encoder) as mem:
        assert mem.users() == ["other-0", "other-1", "other-2"]
        assert mem.store.check().ok
        assert mem.search("other-2", "note 7 of user 2", k=1)[0].record.text == "note 7 of user 2"


def test_pseudonyms_are_keyed_per_store(tmp_path: Path, encoder: SentenceEncoder) -> None:
    with (
        PersonaMem.open(tmp_path / "a", encoder=encoder) as a,
        PersonaMem.open(tmp_path / "b", encoder=encoder) as b,
    ):
        a.add("ana", "hello", id="r1")
        b.add("ana", "hello", id="r1")
        assert a.store.names.collection("ana") != b.store.names.collection("ana")
        assert a.store.names.vector_id("ana", "r1") != b.store.names.vector_id("ana", "r1")
        assert legacy_collection("ana") not in a.store.index.names()
        key = a.store.catalog.info(PSEUDONYM_KEY)
    with PersonaMem.open(tmp_path / "a", encoder=encoder) as a:  # the key is durable
        assert a.store.catalog.info(PSEUDONYM_KEY) == key
        assert a.search("ana", "hello", k=1)[0].record.id == "r1"


def test_a_store_from_before_keys_is_rekeyed_on_open(tmp_path: Path, encoder: SentenceEncoder) -> None:
    """Unkeyed collections are dropped and their records re-indexed under the new key, once."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many(["I keep bees", "my hives are in the orchard"], user_id="ana")
        store = mem.store
        records, vectors = store.vectors("ana")
        # what an old store looked like: unkeyed names, no key recorded
        unkeyed = {
            r.id: hashlib.blake2b(f"ana\x00{r.id}".encode(), digest_size=16).hexdigest() for r in records
        }
        store.index.drop([store.names.collection("ana")])
        store.index.upsert(legacy_collection("ana"), list(unkeyed.values()), vectors)
        with store.catalog.session(write=True) as s:
            for row in s.exec(select(RecordRow)):
                row.vector_id = unkeyed[row.record_id]
                s.add(row)
            s.delete(s.get(StoreInfo, PSEUDONYM_KEY))
    with (
        pytest.warns(UserWarning, match="re-indexing 2 record"),
        PersonaMem.open(tmp_path, encoder=encoder) as mem,
    ):
        assert mem.store.catalog.info(PSEUDONYM_KEY) is not None
        assert legacy_collection("ana") not in mem.store.index.names()
        assert mem.store.check().ok
        assert mem.search("ana", "honey", k=1)[0].record.text == "I keep bees"
