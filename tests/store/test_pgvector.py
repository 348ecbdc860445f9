"""PostgreSQL alone: records and vectors (pgvector) in one database, no Chroma.

The cluster runs binaries that ship pgvector (the ``pgserver`` wheel's, in the ``dev`` extra; the
system's where they have it). The crash test is in ``test_crash_recovery.py``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
from pgvector.psycopg import register_vector
from sqlalchemy import text

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.client import Client
from personamem.errors import ConfigError
from personamem.store import KeyRing
from personamem.store.pgvectors import TABLE, PgVectorIndex, _hnsw_query, _index
from personamem.store.sql import SqlCatalog
from personamem.testing import MemoryContract
from personamem.testing.postgres import PostgresCluster, find_postgres, postgres_cluster
from personamem.testing.servers import personamem_server

pytest.importorskip("pgvector", reason='pgvector not installed: pip install "personamem[postgres]"')
BINARIES = find_postgres("vector")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
pytestmark = pytest.mark.skipif(
    BINARIES is None, reason='no PostgreSQL binaries with pgvector (pip install "personamem[dev]")'
)


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    with postgres_cluster(BINARIES) as cluster:
        yield cluster


@pytest.fixture
def url(postgres: PostgresCluster) -> str:
    return postgres.create_database()


class TestPostgresAloneMemory(MemoryContract):
    @pytest.fixture
    def mem(self, url: str, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
        with PersonaMem.connect(url, encoder=encoder) as memory:
            assert isinstance(memory.store.index, PgVectorIndex)
            yield memory


def _vector_rows(url: str) -> list[tuple[str, str]]:
    catalog = SqlCatalog(url)
    try:
        with catalog.engine.connect() as connection:
            rows = connection.execute(text(f"SELECT collection, vector_id FROM {TABLE}"))
            return [(collection, vector_id) for collection, vector_id in rows]
    finally:
        catalog.close()


def test_an_add_commits_its_row_and_vector_together(url: str, encoder: SentenceEncoder) -> None:
    with PersonaMem.connect(url, encoder=encoder) as mem:
        record = mem.add("alice", "I keep bees on the roof.")
        names = mem.store.names
        assert mem.store.catalog.pending() == {}  # nothing waits for a background indexer
        assert _vector_rows(url) == [(names.collection("alice"), names.vector_id("alice", record.id))]
        assert mem.search("alice", "honey", k=1, method="dense")[0].record.id == record.id


class _NanFor:
    """The real encoder, except that one text encodes to NaN, which pgvector refuses to store."""

    def __init__(self, real: SentenceEncoder, poison: str) -> None:
        self.real, self.poison = real, poison
        self.name, self.dim = real.name, real.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.real.encode(texts)
        vectors[[i for i, t in enumerate(texts) if t == self.poison]] = np.nan
        return vectors


def test_a_vector_the_database_refuses_leaves_no_record_behind(url: str, encoder: SentenceEncoder) -> None:
    with PersonaMem.connect(url, encoder=_NanFor(encoder, "poison")) as mem:
        kept = mem.add("alice", "I keep bees on the roof.")
        with pytest.raises(Exception, match="NaN"):
            mem.add("alice", "poison")
        assert [r.id for r in mem.records("alice")] == [kept.id]
        assert len(_vector_rows(url)) == 1 and mem.store.check().ok
        assert [e.event for e in mem.history("alice", kept.id)] == ["added"]


def test_forget_and_delete_remove_the_vectors_rows(url: str, encoder: SentenceEncoder) -> None:
    with PersonaMem.connect(url, encoder=encoder) as mem:
        mem.add_many([{"text": f"Fact {i} about my garden."} for i in range(5)], user_id="alice")
        [bob] = mem.add_many([{"text": "I collect stamps."}], user_id="bob") and mem.records("bob")
        gone = mem.records("alice")[0]
        mem.delete("alice", [gone.id])
        vector_ids = {vid for _, vid in _vector_rows(url)}
        assert mem.store.names.vector_id("alice", gone.id) not in vector_ids and len(vector_ids) == 5
        assert mem.store.catalog.pending() == {}  # one transaction: the rest stay indexed, nothing rebuilt
        assert gone.id not in [h.record.id for h in mem.search("alice", gone.text, k=5, method="dense")]
        mem.forget("alice")
        names = mem.store.names
        assert _vector_rows(url) == [(names.collection("bob"), names.vector_id("bob", bob.id))]
        assert mem.store.check().ok


def test_a_store_opens_only_with_the_vector_index_it_was_made_with(
    url: str, tmp_path: Path, encoder: SentenceEncoder
) -> None:
    with PersonaMem.connect(url, encoder=encoder) as mem:
        mem.add("alice", "I keep bees on the roof.")
    with pytest.raises(ConfigError, match="in this PostgreSQL database"):
        PersonaMem.connect(url, chroma_path=tmp_path / "chroma", encoder=encoder)


def test_a_postgres_store_with_chroma_vectors_is_not_opened_without_them(
    postgres: PostgresCluster, tmp_path: Path, encoder: SentenceEncoder
) -> None:
    url = postgres.create_database()
    with PersonaMem.connect(url, chroma_path=tmp_path / "chroma", encoder=encoder) as mem:
        mem.add("alice", "I keep bees on the roof.")
    with pytest.raises(ConfigError, match="in Chroma"):
        PersonaMem.connect(url, encoder=encoder)


@pytest.mark.server
@pytest.mark.enable_socket
@pytest.mark.slow
def test_two_servers_on_one_database_serve_each_others_writes(url: str, tmp_path: Path) -> None:
    """The scale-out shape: two ``serve`` processes (two machines' worth) on one PostgreSQL, no Chroma."""
    catalog = SqlCatalog(url)
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()
    with (
        personamem_server(tmp_path / "a", "--sql-url", url) as writer_url,
        personamem_server(tmp_path / "b", "--sql-url", url, workers=2) as reader_url,
        Client(writer_url, key) as writer,
    ):
        for i in range(8):
            plant = ["fern", "cactus", "orchid"][i % 3]
            text_ = f"Turn {i}: I repotted my {plant} number {i} on the balcony."
            writer.add("u", text_, id=f"t{i}")
            with Client(reader_url, key) as reader:  # a client per call: both workers answer
                assert reader.search("u", text_, k=1, method="dense")[0].record.id == f"t{i}", i
                assert reader.search("u", text_, k=1)[0].record.id == f"t{i}", i
        writer.delete("u", ["t5"])
        with Client(reader_url, key) as reader:
            found = reader.search("u", "fern cactus orchid", k=8, method="dense")
            assert "t5" not in [h.record.id for h in found]
        writer.forget("u")
        with Client(reader_url, key) as reader:
            assert reader.search("u", "balcony", k=3, method="dense") == []
    assert not (tmp_path / "a" / "chroma").exists() and not (tmp_path / "b" / "chroma").exists()


def test_a_postgres_store_made_before_migrations_is_brought_to_the_head(
    url: str, encoder: SentenceEncoder
) -> None:
    from personamem.store.migrations import HEAD, VERSION_TABLE

    with PersonaMem.connect(url, encoder=encoder) as mem:
        kept = mem.add("ana", "I keep bees on the roof.")
    catalog = SqlCatalog(url)
    try:
        with catalog.engine.begin() as connection:  # as a store made before migrations was
            connection.execute(text("DROP INDEX ix_records_user_status"))
            connection.execute(text(f"DROP TABLE {VERSION_TABLE}"))
    finally:
        catalog.close()
    with PersonaMem.connect(url, encoder=encoder) as mem:
        assert [h.record.id for h in mem.search("ana", "bees", k=1)] == [kept.id]
        with mem.store.catalog.engine.connect() as connection:
            assert connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar() == HEAD
            found = connection.execute(
                text("SELECT 1 FROM pg_indexes WHERE indexname = 'ix_records_user_status'")
            )
            assert found.scalar() == 1


def test_a_big_user_is_searched_through_an_hnsw_index_of_its_own_and_forgetting_drops_it(
    url: str, encoder: SentenceEncoder
) -> None:
    """Past the copy limit a user's searches reach the table: its own partial HNSW index answers them.

    The limits are lowered to 1,000 vectors, so a user of 3,000 (30 sentences' vectors, each varied
    100 times, written without encoding) is "big". The first search is exact and starts the build;
    after it the plan uses the index and finds what the exact scan found.
    """
    rng = np.random.default_rng(0)
    base = encoder.encode([f"Note {i}: the parcel for dock {i} left on a {DAYS[i % 7]}." for i in range(30)])
    vectors = np.repeat(base, 100, axis=0) + rng.normal(scale=0.03, size=(3000, encoder.dim))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    records = [Record(user_id="alice", id=f"r{i}", text=f"varied note {i}") for i in range(3000)]
    with PersonaMem.connect(url, encoder=encoder) as mem:
        index = mem.store.index
        assert isinstance(index, PgVectorIndex)
        mem.store.views.max_user_vectors = index.index_at = 1000
        mem.store.add_many(records, vectors=vectors, batch_size=3000)
        mem.add("bob", "I collect stamps.")
        exact = [{h.record.id for h in mem.search_vector("alice", q, k=10)} for q in base[:10]]
        collection = mem.store.names.collection("alice")
        index.build_index(collection, encoder.dim)  # the first search started it; this waits for it
        with mem.store.catalog.engine.connect() as connection:
            raw = connection.connection.driver_connection
            register_vector(raw)
            plan = raw.execute("EXPLAIN " + _hnsw_query(collection, encoder.dim), (base[0], base[0], 300))
            assert any(_index(collection) in line for (line,) in plan.fetchall())
        found = [{h.record.id for h in mem.search_vector("alice", q, k=10)} for q in base[:10]]
        assert _valid(url, collection) is True and index._indexed(collection, encoder.dim)  # searched so
        assert np.mean([len(a & b) / 10 for a, b in zip(found, exact, strict=True)]) >= 0.9
        for i in (3, 17):  # the near-duplicate check goes through the index too (looking narrower)
            text = f"Note {i}: the parcel for dock {i} left on a {DAYS[i % 7]}."
            nearest = int(np.argmax(vectors @ encoder.encode([text])[0]))
            assert mem.add("alice", text, duplicates="skip", duplicate_threshold=0.8).id == f"r{nearest}"
        assert [h.record.id for h in mem.search("bob", "stamps", k=1, method="dense")] != []  # small: exact
        mem.forget("alice")
        assert _valid(url, collection) is None  # dropped with the user's rows


def test_an_index_a_crash_left_invalid_is_built_again(url: str, encoder: SentenceEncoder) -> None:
    with PersonaMem.connect(url, encoder=encoder) as mem:
        index = mem.store.index
        assert isinstance(index, PgVectorIndex)
        mem.add_many([f"Fact {i} about my garden." for i in range(30)], user_id="alice")
        collection = mem.store.names.collection("alice")
        index.build_index(collection, encoder.dim)
        name = _index(collection)
        with mem.store.catalog.engine.begin() as connection:  # what a build killed half way leaves
            connection.execute(
                text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass(:name)"),
                {"name": name},
            )
        index.build_index(collection, encoder.dim)
        assert _valid(url, collection) is True


def _valid(url: str, collection: str) -> bool | None:
    """Whether the collection's HNSW index is valid (None: there is none)."""
    catalog = SqlCatalog(url)
    try:
        with catalog.engine.connect() as connection:
            query = text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:name)")
            return connection.execute(query, {"name": _index(collection)}).scalar()
    finally:
        catalog.close()


def test_appends_keep_the_revisions_lineage_and_an_edit_renews_it(url: str, encoder: SentenceEncoder) -> None:
    """The append bump (``substr(revision) || suffix``) on PostgreSQL, single adds and a batch, and the
    BM25 index grown by them equal to one built at once."""
    from personamem.retrieval.bm25 import BM25Retriever
    from personamem.store.catalog_users import appended_to

    with PersonaMem.connect(url, encoder=encoder) as mem:
        bm25 = BM25Retriever(mem.store)
        mem.add("u", "I keep bees on the roof.", id="a")
        held, before = bm25.index("u"), mem.store.revision("u")
        mem.add("u", "The hives gave nine jars of honey in June.", id="b")
        mem.add_many([{"id": "c", "text": "I sell the honey at the Saturday market."}], user_id="u")
        after = mem.store.revision("u")
        assert before is not None and after is not None and appended_to(before, after)
        grown = bm25.index("u")
        assert grown.records[0] is held.records[0] and [r.id for r in grown.records] == ["a", "b", "c"]
        assert grown.records == BM25Retriever(mem.store).index("u").records
        assert bm25.search("u", "honey market", k=1)[0].record.id == "c"
        mem.update("u", "a", text="I keep bees in the garden.")
        edited = mem.store.revision("u")
        assert edited is not None and not appended_to(after, edited)
        assert bm25.index("u").records[0].text == "I keep bees in the garden."
