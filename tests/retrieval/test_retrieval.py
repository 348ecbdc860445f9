import logging
import subprocess
import sys

import numpy as np
import pytest

from personamem import Hit, PersonaMem, Record
from personamem.retrieval import reciprocal_rank_fusion


def _hits(ids: list[str]) -> list[Hit]:
    return [Hit(Record(user_id="u", text=i, id=i), 1.0, rank) for rank, i in enumerate(ids, start=1)]


def test_rrf_rewards_agreement_between_rankings() -> None:
    fused = reciprocal_rank_fusion([_hits(["a", "b", "c"]), _hits(["b", "d", "a"])], k_rrf=60)
    assert [r.id for r, _ in fused] == ["b", "a", "d", "c"]
    assert fused[0][1] == 1 / 62 + 1 / 61


def test_bm25_sees_new_records_at_once(mem: PersonaMem) -> None:
    mem.add("u", "I keep bees on the roof.")
    assert [h.record.text for h in mem.search("u", "bees", method="bm25")] == ["I keep bees on the roof."]
    mem.add("u", "The bees made forty jars of honey.")  # must invalidate the cached index
    assert len(mem.search("u", "bees", method="bm25")) == 2


def test_bm25_index_builds_are_silent_under_a_root_handler(
    mem: PersonaMem, caplog: pytest.LogCaptureFixture
) -> None:
    mem.add("u", "I keep bees on the roof.")
    caplog.handler.setLevel(logging.DEBUG)  # a root handler, as absl (via rouge-score) installs one
    mem.search("u", "bees", method="bm25")
    assert not [r for r in caplog.records if r.name.startswith("bm25s")]


def test_bm25_with_no_searchable_terms(mem: PersonaMem) -> None:
    mem.add("u", "1")
    mem.add("u", "!")
    assert mem.search("u", "1", method="bm25") == []
    assert len(mem.search("u", "1", method="hybrid")) == 2  # dense still ranks them


def test_hybrid_finds_what_either_method_finds(mem: PersonaMem) -> None:
    mem.add_many(
        [
            {"text": "My locker code is 4471."},  # lexical: only an exact token matches
            {"text": "I adore long walks along the seaside."},  # semantic: no shared word with the query
            {"text": "The invoice from March is still unpaid."},
        ],
        user_id="u",
    )
    hits = mem.search("u", "4471 beach strolls", k=2, method="hybrid")
    assert {h.record.text for h in hits} == {
        "My locker code is 4471.",
        "I adore long walks along the seaside.",
    }


def test_search_vector_takes_a_ready_query_vector(mem: PersonaMem) -> None:
    mem.add("ana", "I play the saxophone in a jazz band.")
    mem.add("ana", "My cat is called Miso.")
    mem.add("bo", "I play jazz piano.")
    vector = mem.store.encoder.encode(["music"])[0]
    hits = mem.search_vector("ana", vector, k=1)
    assert [h.record.text for h in hits] == ["I play the saxophone in a jazz band."]
    with pytest.raises(ValueError, match=r"vector must have shape \(384,\)"):
        mem.search_vector("ana", vector[:10], k=1)
    with pytest.raises(ValueError, match="k must be at least 1"):
        mem.search_vector("ana", vector, k=0)


def test_store_vectors_returns_each_indexed_record_with_its_vector(mem: PersonaMem) -> None:
    texts = ["I play the saxophone.", "My cat is called Miso.", "I live in Porto."]
    for text in texts:
        mem.add("ana", text)
    mem.add("bo", "I play jazz piano.")
    records, matrix = mem.store.vectors("ana")
    assert sorted(r.text for r in records) == sorted(texts) and matrix.shape == (3, 384)
    expected = mem.store.encoder.encode([r.text for r in records])
    assert np.allclose(matrix, expected, atol=1e-5)
    unknown_records, unknown = mem.store.vectors("nobody")
    assert unknown_records == [] and len(unknown) == 0


def test_bm25s_is_imported_without_numba_in_its_thread_alone() -> None:
    """numba and tqdm are refused to the thread importing bm25s (0.14 s of a CLI search), to no other."""
    check = (
        "import sys, threading\n"
        "from personamem.retrieval import bm25\n"
        "sys.meta_path.insert(0, bm25._FINDER)\n"
        "bm25._FINDER.importing.bm25s = True  # this thread is importing bm25s\n"
        "other = []\n"
        "thread = threading.Thread(target=lambda: other.append(__import__('numba').__name__))\n"
        "thread.start(); thread.join()\n"
        "try:\n"
        "    import tqdm.auto\n"
        "except ImportError:\n"
        "    other.append('refused')\n"
        "bm25._FINDER.importing.bm25s = False\n"
        "import tqdm.auto\n"
        "print(other, bm25._bm25s().BM25().backend)\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['numba',", "'refused']", "numpy"]
