"""``forget`` leaves no readable trace of the user anywhere in the store's files."""

from pathlib import Path

from personamem import PersonaMem, SentenceEncoder

MARKERS = ["ZQXTEXTMARK", "ZQXIDMARK", "ZQXUSERMARK", "ZQXMETAMARK", "ZQXCATMARK"]


def _files_containing(root: Path, marker: str) -> list[str]:
    needle = marker.encode()
    return [str(p) for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


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
        mem.add("bob", "bob stays")
        mem.search("ZQXUSERMARK", "diagnosis", k=3, method="hybrid")
        assert _files_containing(store, "ZQXTEXTMARK"), "the marker should be on disk before forget"

        assert mem.forget("ZQXUSERMARK")

        for marker in MARKERS:
            assert _files_containing(store, marker) == [], marker
        assert [r.text for r in mem.records("bob")] == ["bob stays"]
    with PersonaMem.open(store, encoder=encoder) as mem:
        assert mem.users() == ["bob"]
        assert mem.store.check().ok
