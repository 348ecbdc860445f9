"""One PersonaMem shared by many threads: concurrent writers and readers."""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from personamem import PersonaMem, SentenceEncoder


def test_concurrent_writes_and_searches(mem: PersonaMem) -> None:
    def write(user: int) -> None:
        for i in range(15):
            mem.add(f"user{user}", f"user {user} remembers thing number {i}")

    def read(user: int) -> int:
        seen = 0
        for method in ("dense", "bm25", "hybrid") * 5:
            hits = mem.search(f"user{user}", "remembers thing", k=5, method=method)
            assert all(h.record.user_id == f"user{user}" for h in hits)
            seen += len(hits)
        return seen

    with ThreadPoolExecutor(max_workers=8) as pool:
        writers = [pool.submit(write, u) for u in range(4)]
        readers = [pool.submit(read, u) for u in range(4)]
        for future in writers + readers:
            future.result()
    assert [mem.count(f"user{u}") for u in range(4)] == [15] * 4
    assert mem.store.check().ok


def test_revision_reads_see_other_connections_writes_at_once(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """The per-thread read-only revision reader never serves a stale snapshot (cache validity)."""
    with (
        PersonaMem.open(tmp_path / "s", encoder=encoder) as reader,
        PersonaMem.open(tmp_path / "s", encoder=encoder) as writer,
    ):
        assert reader.store.revision("ana") is None
        writer.add("ana", "I'm vegan.")
        first = reader.store.revision("ana")
        assert first is not None and first == writer.store.revision("ana")
        writer.add("ana", "I live in Lisbon.")
        assert reader.store.revision("ana") not in (None, first)
        with ThreadPoolExecutor(4) as pool:  # each thread reads through its own connection
            seen = set(pool.map(lambda _: reader.store.revision("ana"), range(8)))
        assert seen == {writer.store.revision("ana")}
