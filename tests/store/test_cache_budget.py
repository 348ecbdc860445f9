"""Per-user memory within ``PERSONAMEM_CACHE_MB``: vector views, derived values and Chroma's loaded
collections each stay within their share however many users a process meets, and what was evicted
comes back the same."""

from __future__ import annotations

import gc
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.retrieval.bm25 import BM25Retriever
from personamem.retrieval.first_stage import RankedStage
from personamem.retrieval.ranker import UserSignals
from personamem.store.budget import MIB, MIN_COLLECTIONS, MemoryBudget
from personamem.store.cache import BytePool, UserCache
from personamem.store.chroma_memory import loaded_collections
from personamem.store.footprint import footprint

WORDS = [
    "bees",
    "bike",
    "curry",
    "train",
    "Porto",
    "lentils",
    "camping",
    "violin",
    "tofu",
    "marathon",
    "garden",
    "chess",
]


def _cache(pool: BytePool, sizes: dict[str, int], *, max_users: int = 256) -> UserCache[str]:
    """A cache whose value for user ``u`` is the string ``u`` said to hold ``sizes[u]`` bytes."""
    return UserCache(
        lambda _: "r1", lambda user: user, pool=pool, size=lambda user: sizes[user], max_users=max_users
    )


def test_caches_sharing_a_pool_evict_the_least_recently_used_of_any_of_them_by_bytes() -> None:
    pool = BytePool(max_bytes=100)
    sizes = {"a": 40, "b": 40, "c": 40, "huge": 101}
    first, second = _cache(pool, sizes), _cache(pool, sizes)
    first.get("a"), second.get("b")
    first.get("a")  # a is now more recent than b
    first.get("c")  # 120 bytes: b, the least recently used of either cache, goes
    assert (len(first), len(second), pool.nbytes, first.nbytes, second.nbytes) == (2, 0, 80, 80, 0)
    assert second.get("huge") == "huge" and len(second) == 0 and pool.nbytes == 80  # returned, not kept
    assert second.oversized("huge") and not second.oversized("b") and not first.oversized("huge")
    second.evict("huge")
    assert not second.oversized("huge")
    first.evict("a")
    assert pool.nbytes == first.nbytes == 40
    del first
    gc.collect()
    second.get("b")  # a dropped cache's bytes are released at the next admission
    assert pool.nbytes == second.nbytes == 40
    counted = _cache(BytePool(max_bytes=1000), sizes, max_users=1)
    counted.get("a"), counted.get("b")
    assert len(counted) == 1 and counted.nbytes == 40  # the count of users still bounds a cache


def test_the_budget_is_split_as_documented_and_read_from_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    embedded = MemoryBudget.split(1500 * MIB, embedded=True)
    assert embedded.chroma_collections == 100  # a fifth, at 3 MiB a collection
    assert (embedded.views, embedded.derived) == (480 * MIB, 720 * MIB)  # two and three fifths of the rest
    server = MemoryBudget.split(1500 * MIB, embedded=False)
    assert server.chroma_collections == 0 and server.views + server.derived == 1500 * MIB
    assert (
        MemoryBudget.split(256 * MIB, embedded=True).chroma_collections == MIN_COLLECTIONS
    )  # Chroma's floor
    monkeypatch.setenv("PERSONAMEM_CACHE_MB", "1500")
    assert MemoryBudget.configured(embedded=True) == embedded
    monkeypatch.delenv("PERSONAMEM_CACHE_MB")
    assert 256 * MIB <= MemoryBudget.configured(embedded=False).total <= 4096 * MIB


def _records(users: int, per_user: int) -> list[Record]:
    rng = np.random.default_rng(0)
    return [
        Record(
            user_id=f"user{u}",
            id=f"r{i}",
            text=f"I like {' and '.join(rng.choice(WORDS, size=3))} since {2000 + i}.",
            metadata={"role": "user" if i % 2 else "assistant"},
        )
        for u in range(users)
        for i in range(per_user)
    ]


def _units(n: int, dim: int) -> np.ndarray:
    vectors = np.random.default_rng(1).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_store_that_met_many_users_stays_within_its_budget_and_evicted_users_read_the_same(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_CACHE_MB", "200")  # Chroma's floor of 64 collections, and 8 MiB left
    users = 60  # more than the views and derived values' shares hold (about 44 and 10 users)
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        store = mem.store
        records = _records(users, 20)
        store.add_many(records, vectors=_units(len(records), encoder.dim))
        budget = store.budget
        assert budget.chroma_collections == MIN_COLLECTIONS and budget.views + budget.derived == 8 * MIB
        assert loaded_collections(store.index._client) == MIN_COLLECTIONS  # type: ignore[union-attr]
        ranker = mem.pipeline().ranker  # the default's learned ranker: its signals hold a BM25 index
        assert ranker is not None
        bm25 = BM25Retriever(store)
        query = _units(1, encoder.dim)[0]

        def read(user: str) -> tuple[object, ...]:
            dense = [hit.record.id for hit in mem.search_vector(user, query, k=5)]
            lexical = [hit.record.id for hit in bm25.search(user, "bees and curry", k=5)]
            return dense, lexical, ranker.profile(user)

        full = [hit.record.id for hit in mem.search("user3", "what do I like about bees?", k=5)]
        first = {f"user{u}": read(f"user{u}") for u in range(users)}
        views, pool = store.views.nbytes, store.caches.pool.nbytes
        assert 0 < views <= budget.views and 0 < pool <= budget.derived
        assert store.views.get("user0", store.catalog.search_state("user0").index_token) is None  # type: ignore[union-attr]
        assert [read(f"user{u}") for u in range(users)] == list(first.values())  # evicted, rebuilt the same
        assert store.views.nbytes <= budget.views and store.caches.pool.nbytes <= budget.derived
        assert [hit.record.id for hit in mem.search("user3", "what do I like about bees?", k=5)] == full


@pytest.mark.parametrize("vocabulary", ["narrow", "wide"])
def test_estimates_are_near_what_building_a_value_allocates(
    tmp_path: Path, encoder: SentenceEncoder, vocabulary: str
) -> None:
    """Wide: a term per record, far more terms than the estimate samples (the postings' per-term arrays
    are views of two shared ones, which a sampled walk once counted once per term: 95x at 10,000)."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        store = mem.store
        records = _records(1, 300 if vocabulary == "narrow" else 2000)
        if vocabulary == "wide":
            records = [
                r.model_copy(update={"text": f"{r.text} Ticket t{i}x{7 * i}."}) for i, r in enumerate(records)
            ]
        store.add_many(records, vectors=_units(len(records), encoder.dim))
        for build in (
            lambda: BM25Retriever(store).index("user0"),  # a new retriever: built, not found in a cache
            lambda: UserSignals.of(store, BM25Retriever(store).index("user0"), "user0"),  # index included
        ):
            build()  # imports and lazy state first
            gc.collect()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                value = build()
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            assert 0.7 <= footprint(value) / held <= 1.5, (type(value).__name__, footprint(value), held)


def test_values_grown_by_appends_are_counted_near_what_they_hold(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """A grown value is sized as the one it grew from, per record, and measured again once it holds
    half as many records again: the pool's count stays near a fresh estimate as a user grows 1x-6x."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        store, records = mem.store, _records(1, 600)
        vectors = _units(len(records), encoder.dim)
        store.add_many(records[:100], vectors=vectors[:100])
        bm25 = BM25Retriever(store)
        first = bm25.index("user0")
        for start in range(100, 600, 25):
            store.add_many(records[start : start + 25], vectors=vectors[start : start + 25])
            grown = bm25.index("user0")
            assert grown.records[0] is first.records[0]  # grown, not built again
            assert 0.8 <= store.caches.pool.nbytes / footprint(grown) <= 1.25, start


def test_a_user_too_large_for_the_rankers_cache_is_served_by_hybrid_not_rebuilt_per_search(
    mem: PersonaMem,
) -> None:
    """Rebuilt per search, a 200,000-record user's signals made a default search take 14 s."""
    mem.add_many(
        [f"Note {i}: the hive by the {['fence', 'pond'][i % 2]} gave {i} jars." for i in range(40)],
        user_id="u",
    )
    pipeline = mem.pipeline()
    stage = pipeline.first
    assert isinstance(stage, RankedStage) and stage.ranker.fits("u")
    query = "how many jars did the hive by the pond give?"
    mem.store.caches.pool.max_bytes = footprint(stage.hybrid.bm25.index("u")) + 1  # the signals hold it too
    assert [h.record.id for h in pipeline.search("u", query, 5)]  # built, served once, not kept
    assert not stage.ranker.fits("u")
    hybrid = [h.record.id for h in stage.hybrid.candidates("u", query, 5).hits]
    assert [h.record.id for h in pipeline.search("u", query, 5)] == hybrid
    served = pipeline.context("u", query).first_stage  # the context says which served, and why
    assert served["ranker"] == "none" and "signals outgrow" in served["ranker_skipped"]
    assert pipeline.first_stage["ranker"] != "none"  # the pipeline's own settings are unchanged
    assert stage.ranker.decide("u").reason.startswith("hybrid serves it")  # as `analyze ranker` says
