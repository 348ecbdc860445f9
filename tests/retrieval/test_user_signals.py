"""A user's BM25 index and ranker signals grow by the records a write appends, and equal a fresh build.

Real store (SQLite + Chroma, and a second store over the same files for another process's writes),
real encoder, the default pipeline's ranker.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from personamem import PersonaMem, SentenceEncoder
from personamem.retrieval.bm25 import BM25Retriever, UserIndex, tokenize
from personamem.retrieval.ranker import LearnedRanker
from personamem.retrieval.user_signals import UserSignals
from personamem.store.catalog_users import appended_to

TURNS = [
    ("s1", "Caroline went to the LGBTQ support group on 7 May 2023."),
    ("s1", "Melanie painted a sunrise over the lake last year."),
    ("s2", "I'm vegan and cook lentils most nights."),
    ("s2", "My favourite dish is a spicy tofu curry, and Melanie's is ramen."),
    ("s3", "I take the 8:15 train to work in Porto."),
    ("s1", "Caroline is researching adoption agencies."),
    ("s3", "ok"),
    ("s2", "We went camping in the mountains in June with Ana."),
]
QUERIES = ["When did Caroline go to the support group?", "melanie painting", "what do I cook", "train 8:15"]


def _ranker(mem: PersonaMem) -> LearnedRanker:
    ranker = mem.pipeline().ranker
    assert isinstance(ranker, LearnedRanker)
    return ranker


def _add(mem: PersonaMem, start: int, stop: int) -> None:
    for i in range(start, stop):
        session, text = TURNS[i % len(TURNS)]
        mem.add(
            "u",
            f"{text} ({i})" if i >= len(TURNS) else text,
            id=f"t{i}",
            metadata={"session": session, "role": "user"},
        )


def _assert_same_index(grown: UserIndex, built: UserIndex) -> None:
    assert [r.id for r in grown.records] == [r.id for r in built.records]
    assert (
        grown.records == built.records and grown.tokens == built.tokens and grown.position == built.position
    )
    for query in QUERIES:
        terms = tokenize([query])[0]
        assert np.array_equal(grown.scores(terms), built.scores(terms))


def _assert_same_signals(grown: UserSignals, built: UserSignals) -> None:
    _assert_same_index(grown.index, built.index)
    for field in (f.name for f in dataclasses.fields(UserSignals) if f.compare and f.name != "index"):
        a, b = getattr(grown, field), getattr(built, field)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype and np.array_equal(a, b), field
        else:
            assert a == b, field


def test_appends_grow_the_cached_index_and_signals_into_what_a_fresh_build_makes(mem: PersonaMem) -> None:
    ranker = _ranker(mem)
    _add(mem, 0, 3)
    first = ranker.signals("u")
    for start, stop in [(3, 4), (4, 7), (7, 12)]:  # single adds, then a batch
        before = mem.store.revision("u")
        if stop - start > 1:
            mem.add_many(
                [
                    {"id": f"t{i}", "text": f"batch turn {i} about Porto", "metadata": {"session": "s9"}}
                    for i in range(start, stop)
                ],
                user_id="u",
            )
        else:
            _add(mem, start, stop)
        after = mem.store.revision("u")
        assert before is not None and after is not None and appended_to(before, after)
        grown = ranker.signals("u")
        assert grown.index.records[0] is first.index.records[0]  # grown from the first build, not rebuilt
        fresh = BM25Retriever(mem.store)  # a cache of its own: built from every record
        _assert_same_signals(grown, UserSignals.of(mem.store, fresh.index("u"), "u"))
    # sessions s1 s1 s2 s2, then s9 from t4 on: a turn of one batch joins the last of the one before
    assert ranker.signals("u").neighbours[[1, 2, 3, 6]].tolist() == [[0, -1], [-1, 3], [2, -1], [5, 7]]
    assert mem.search("u", QUERIES[0], k=3)[0].record.id == "t0"


def test_the_indexer_marking_vectors_indexed_is_an_append_of_nothing(mem: PersonaMem) -> None:
    ranker = _ranker(mem)
    _add(mem, 0, 4)
    mem.store.flush()
    signals = ranker.signals("u")
    before = mem.store.revision("u")
    _add(mem, 4, 5)
    assert ranker.signals("u").index.records[0] is signals.index.records[0]
    mem.store.flush()  # the background indexer marks the new row indexed: a revision of its own
    after = mem.store.revision("u")
    assert before is not None and after is not None and appended_to(before, after)
    grown = ranker.signals("u")
    assert grown is ranker.signals("u") and len(grown.index.records) == 5


def test_a_write_that_changes_a_stored_record_builds_again(mem: PersonaMem) -> None:
    ranker = _ranker(mem)
    _add(mem, 0, 6)
    edits = [
        lambda: mem.update("u", "t2", text="I'm vegetarian now and cook lentils most nights."),
        lambda: mem.supersede("u", "t4", "I take the 7:40 train to work in Lisbon."),
        lambda: mem.delete("u", "t1"),
        lambda: mem.add("u", "Caroline went to the LGBTQ support group on 7 May 2023.", id="t0"),  # unchanged
    ]
    for edit in edits:
        held = ranker.signals("u")
        before = mem.store.revision("u")
        edit()
        after = mem.store.revision("u")
        if after == before:  # the same record again: nothing written, nothing to build
            assert ranker.signals("u") is held
            continue
        assert before is not None and after is not None and not appended_to(before, after)
        rebuilt = ranker.signals("u")
        assert rebuilt.index.records[0] is not held.index.records[0]
        _assert_same_signals(rebuilt, UserSignals.of(mem.store, BM25Retriever(mem.store).index("u"), "u"))
    texts = [r.text for r in ranker.signals("u").index.records]
    assert "I'm vegetarian now and cook lentils most nights." in texts and TURNS[1][1] not in texts


def test_another_process_appends_are_read_when_the_index_grows(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with (
        PersonaMem.open(tmp_path / "store", encoder=encoder) as mine,
        PersonaMem.open(tmp_path / "store", encoder=encoder) as theirs,
    ):
        bm25 = BM25Retriever(mine.store)
        _add(mine, 0, 3)
        held = bm25.index("u")
        _add(theirs, 3, 6)  # the other store's writes, through SQL alone
        grown = bm25.index("u")
        assert grown.records[0] is held.records[0]
        _assert_same_index(grown, BM25Retriever(theirs.store).index("u"))
        assert bm25.search("u", "tofu curry", k=1)[0].record.id == "t3"


def test_a_record_that_expired_is_left_out_by_a_rebuild_not_kept_by_growing(mem: PersonaMem) -> None:
    bm25 = BM25Retriever(mem.store)
    soon = datetime.now(UTC) + timedelta(seconds=1)
    mem.add_many(
        [{"id": "brief", "text": "My door code this week is 4711.", "expires_at": soon.isoformat()}],
        user_id="u",
    )
    _add(mem, 0, 2)
    assert [r.id for r in bm25.index("u").records] == ["brief", "t0", "t1"]
    time.sleep(max(0.0, (soon - datetime.now(UTC)).total_seconds()) + 0.05)
    _add(mem, 2, 3)
    assert [r.id for r in bm25.index("u").records] == ["t0", "t1", "t2"]


def test_two_growths_of_the_same_signals_each_keep_their_own_rows() -> None:
    """Vectors live in a buffer the grown signals share; a second growth from the same signals (two
    threads after one write) must copy, not write over the rows the first one appended."""
    from personamem import Record

    records = [Record(user_id="u", id=f"r{i}", text=text) for i, (_, text) in enumerate(TURNS)]
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((len(records), 8)).astype(np.float32)
    base = UserSignals.build(UserIndex.of(3, records[:3]), vectors[:3])
    once = base.extended(UserIndex.of(4, records[:4]), vectors[3:4])  # room to grow from here
    first = once.extended(UserIndex.of(5, records[:5]), vectors[4:5])
    other = rng.standard_normal((1, 8)).astype(np.float32)
    second = once.extended(UserIndex.of(5, [*records[:4], records[6]]), other)
    assert np.array_equal(first.vectors, vectors[:5]) and np.array_equal(second.vectors[4], other[0])
    assert np.array_equal(once.vectors, vectors[:4]) and np.array_equal(base.vectors, vectors[:3])
    assert first.vectors.base is once.vectors.base and second.vectors.base is not once.vectors.base
