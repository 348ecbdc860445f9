"""Per-process views of users' vectors: exact, keyed by the index token, moved forward only by a
write that follows the view's own token, and built from the vectors SQL keeps, without Chroma."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from personamem import PersonaMem, SentenceEncoder
from personamem.store.views import VectorViews, view_bytes


def _units(n: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_a_view_ranks_exactly_and_leaves_out_what_is_pending() -> None:
    vectors = _units(50, 0)
    view = VectorViews().put("u", "t1", [f"v{i}" for i in range(50)], vectors)
    exact = np.argsort(-(vectors @ vectors[7]))[:5]
    assert [vid for vid, _ in view.nearest(vectors[7], 5, skip=set())] == [f"v{i}" for i in exact]
    assert "v7" not in [vid for vid, _ in view.nearest(vectors[7], 5, skip={"v7"})]


def test_a_view_moves_forward_only_from_its_own_token() -> None:
    views, vectors = VectorViews(), _units(4, 1)
    views.put("u", "t1", ["a", "b"], vectors[:2])
    views.advance("u", "t1", "t2", ["b", "c"], vectors[2:])  # this process indexed right after t1
    view = views.get("u", "t2")
    assert view is not None and view.ids == ["a", "b", "c"]
    assert np.allclose(view.matrix, vectors[[0, 2, 3]])  # b replaced in place, c appended
    views.advance("u", "t9", "t10", ["d"], vectors[:1])  # another process indexed in between
    assert views.get("u", "t2") is None and views.get("u", "t10") is None


def test_views_keep_within_their_byte_budget_and_large_users_keep_no_copy() -> None:
    views = VectorViews(max_bytes=3 * view_bytes(50, 8), max_user_vectors=60)  # three users' views
    for user in ("a", "b", "c", "d"):
        views.put(user, "t", [f"{user}{i}" for i in range(50)], _units(50, 2))
    assert views.get("a", "t") is None and views.get("d", "t") is not None  # least recently used left
    large = views.put("e", "t", [f"e{i}" for i in range(61)], _units(61, 3))
    assert large.matrix is None and large.ids == []


def test_a_process_s_own_adds_advance_its_view_without_a_rebuild(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many(["I keep bees on the roof.", "My bike is a red fixie."], user_id="u")
        mem.search("u", "bees", k=1)
        built = mem.store.views.get("u", mem.store.catalog.search_state("u").index_token)  # type: ignore[union-attr]
        mem.add("u", "I switched to oat milk last spring.", id="milk")
        mem.store.flush()
        assert mem.search("u", "oat milk", k=1)[0].record.id == "milk"
        now = mem.store.views.get("u", mem.store.catalog.search_state("u").index_token)  # type: ignore[union-attr]
        assert now is built and len(now.ids) == 3  # the same copy, moved forward in place


def test_a_view_is_built_from_the_vectors_sql_keeps_exactly_as_chroma_holds_them(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many([f"note {i}: the orchard has {i} beehives" for i in range(30)], user_id="u")
        mem.add("u", "I switched to oat milk last spring.", id="milk")  # indexed by the background
        mem.store.flush()
        token = mem.store.catalog.search_state("u").index_token  # type: ignore[union-attr]
        from_sql = mem.store.reads._from_sql("u")
        assert from_sql is not None and from_sql.token == token and from_sql.matrix is not None
        from_chroma = mem.store.reads._from_index("u", token, small=True)
        assert from_chroma.matrix is not None and sorted(from_sql.ids) == sorted(from_chroma.ids)
        rows = [from_chroma.position[vid] for vid in from_sql.ids]
        # the encoder's own floats; Chroma's cosine space normalizes them again (measured: 1.5e-8 apart)
        assert np.allclose(from_sql.matrix, from_chroma.matrix[rows], rtol=0, atol=1e-6)


def test_a_search_of_a_stored_user_starts_no_chroma(tmp_path: Path, encoder: SentenceEncoder) -> None:
    """A one-shot read (the CLI's) needs neither chromadb's import nor its client's start (0.4 s), nor
    numba, which bm25s imports only to offer a backend this library does not run (0.12 s), nor
    Alembic, which opening a store runs only when its schema is behind (``store/migrations``)."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.add_many(
            ["I keep bees on the roof.", "My bike is a red fixie.", "I drink oat milk."], user_id="u"
        )
    read = (
        "import sys\n"
        "from personamem import PersonaMem\n"
        f"with PersonaMem.open({str(tmp_path)!r}) as mem:\n"
        "    hits = mem.search('u', 'what do I ride?', k=1)\n"
        "    loaded = [m in sys.modules for m in ('chromadb', 'numba', 'alembic')]\n"
        "    print([h.record.text for h in hits], *loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", read],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["['My", "bike", "is", "a", "red", "fixie.']", "False", "False", "False"]


def test_a_user_too_large_to_copy_is_read_whole_from_the_vectors_sql_keeps(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """Past the copy limit, a corpus-level read and a read by id get SQL's kept vectors (a fifth of a
    Chroma ``get``'s memory and time): the same rows as the index holds, pending rows in, deleted out."""
    with PersonaMem.open(tmp_path, encoder=encoder) as mem:
        mem.store.views.max_user_vectors = 10  # before the user's first read: no copy is ever made
        mem.add_many([f"note {i}: the orchard has {i} beehives" for i in range(30)], user_id="u")
        mem.store.flush()
        mem.delete("u", [mem.store.records("u")[3].id])
        mem.add("u", "I switched to oat milk last spring.", id="milk")  # may still be pending
        records, matrix = mem.store.vectors("u")
        assert mem.store.views.get("u", None) is None and len(records) == 30 == len(matrix)
        assert "milk" in {r.id for r in records} and "note 3:" not in " ".join(r.text for r in records)
        mem.store.flush()
        ids, held = mem.store.index.vectors(mem.store.names.collection("u"))
        rows = {vid: row for vid, row in zip(ids, held, strict=True)}
        expected = np.stack([rows[mem.store.names.vector_id("u", r.id)] for r in records])
        assert np.allclose(matrix, expected, rtol=0, atol=1e-6)
        by_id = mem.store.record_vectors("u", [r.id for r in records][::-1])  # by id, as the ranker reads
        assert np.allclose(by_id, expected[::-1], rtol=0, atol=1e-6)
