"""One PersonaMem shared by many threads: concurrent writers and readers."""

from concurrent.futures import ThreadPoolExecutor

from personamem import PersonaMem


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
