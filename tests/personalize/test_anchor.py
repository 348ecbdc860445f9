"""P-Anchor (PBR): the sparse kNN similarity graph, PageRank, the anchor vector and its per-user cache."""

from __future__ import annotations

import tracemalloc

import networkx as nx
import numpy as np
import pytest
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from personamem import PersonaMem, SentenceEncoder
from personamem.personalize.anchor import PAnchor, anchor_graph, anchor_vector, pagerank


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def angles(*degrees: float) -> np.ndarray:
    radians = np.deg2rad(degrees)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1)


def brute_force_graph(vectors: np.ndarray, theta: float, k2: int) -> np.ndarray:
    """The definition, on the dense n×n similarity matrix: each row's top k2 others with cos ≥ θ."""
    sims = vectors @ vectors.T
    np.fill_diagonal(sims, -np.inf)
    dense = np.zeros(sims.shape)
    for i, row in enumerate(sims):
        top = np.argsort(-row, kind="stable")[:k2]
        top = top[row[top] >= theta]
        dense[i, top] = row[top]
    return dense


def row_normalized(graph: sparse.csr_matrix) -> np.ndarray:
    dense = graph.toarray()
    return dense / dense.sum(axis=1, keepdims=True)


# -- the graph -------------------------------------------------------------------------------------


def test_graph_keeps_the_top_k2_edges_at_or_above_theta() -> None:
    vectors = angles(0, 10, 25, 90)  # cos(0,1)=.985, cos(1,2)=.966, cos(0,2)=.906, 3 is far from all
    c01, c12, c02 = np.cos(np.deg2rad([10, 15, 25]))
    one = anchor_graph(vectors, theta=0.9, k2=1).toarray()
    np.testing.assert_allclose(
        one, [[0, c01, 0, 0], [c01, 0, 0, 0], [0, c12, 0, 0], [0, 0, 0, 0]], rtol=1e-12
    )
    two = anchor_graph(vectors, theta=0.9, k2=2).toarray()
    np.testing.assert_allclose(
        two, [[0, c01, c02, 0], [c01, 0, c12, 0], [c02, c12, 0, 0], [0, 0, 0, 0]], rtol=1e-12
    )
    # θ drops the weakest pair even when k2 leaves room for it
    np.testing.assert_allclose(anchor_graph(vectors, theta=0.95, k2=3).toarray()[0], [0, c01, 0, 0])


def test_graph_is_directed_as_defined() -> None:
    # 1 is among 0's nearest, but 0 is not among 1's: 1 has a closer neighbour (2)
    graph = anchor_graph(angles(0, 30, 35, 200), theta=0.0, k2=1)
    assert graph[0, 1] > 0 and graph[1, 0] == 0 and graph[1, 2] > 0


def test_graph_has_no_self_loops_even_for_duplicates() -> None:
    vectors = angles(0, 0, 0)
    dense = anchor_graph(vectors, theta=0.5, k2=5).toarray()
    assert np.all(np.diag(dense) == 0)
    np.testing.assert_allclose(dense, 1 - np.eye(3))


@pytest.mark.parametrize(
    ("theta", "k2"), [(0.3, 5), (0.3, 40), (-1.0, 10), (0.0, 299), (0.0, 1000), (0.99, 3)]
)
@pytest.mark.parametrize("block_size", [1, 7, 299, 300, 301, None])
def test_graph_matches_brute_force(theta: float, k2: int, block_size: int | None) -> None:
    vectors = unit_rows(300, 16)  # 16-d: many pairs reach θ=0.3, so rows with both few and many candidates
    expected = brute_force_graph(vectors, theta, k2)
    graph = anchor_graph(vectors, theta=theta, k2=k2, block_size=block_size)
    assert isinstance(graph, sparse.csr_matrix) and graph.has_sorted_indices
    assert graph.shape == (300, 300) and graph.dtype == np.float64
    assert graph.getnnz(axis=1).max() <= k2 and graph.diagonal().max() == 0
    np.testing.assert_array_equal(graph.toarray() != 0, expected != 0)
    np.testing.assert_allclose(graph.toarray(), expected, rtol=0, atol=1e-6)  # float32 sums, blocked


def test_graph_of_tiny_corpora() -> None:
    assert anchor_graph(np.zeros((0, 4), dtype=np.float32)).shape == (0, 0)
    single = anchor_graph(unit_rows(1, 4))
    assert single.shape == (1, 1) and single.nnz == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"theta": 1.5}, "theta"),
        ({"theta": -1.01}, "theta"),
        ({"k2": 0}, "k2"),
        ({"k2": 2.5}, "k2"),
        ({"block_size": 0}, "block_size"),
    ],
)
def test_graph_rejects_bad_parameters(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        anchor_graph(unit_rows(5, 4), **kwargs)


def test_graph_rejects_a_non_matrix() -> None:
    with pytest.raises(ValueError, match="2-D"):
        anchor_graph(np.ones(4))


@pytest.mark.slow
def test_graph_of_20000_records_stays_sparse_in_memory() -> None:
    n, k2 = 20_000, 10
    vectors = unit_rows(n, 384)
    tracemalloc.start()
    try:
        graph = anchor_graph(vectors, theta=0.0, k2=k2)  # θ=0: about half of all pairs are candidates
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert graph.nnz == n * k2  # every row has far more than k2 candidates
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB (a dense n×n float32 would be 1.5 GiB)"
    for i in (0, 12_345, n - 1):  # spot-check rows against the definition
        sims = vectors @ vectors[i]
        sims[i] = -np.inf
        np.testing.assert_array_equal(np.sort(graph[i].indices), np.sort(np.argsort(-sims)[:k2]))


# -- PageRank --------------------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.85, 0.5])
def test_pagerank_with_teleport_matches_networkx(alpha: float) -> None:
    graph = anchor_graph(unit_rows(200, 16, seed=1), theta=0.5, k2=4)
    dangling = graph.getnnz(axis=1) == 0
    assert 0 < dangling.sum() < 20  # a few dangling records among many edges
    ours = pagerank(graph, alpha=alpha)
    # networkx's defaults: uniform teleport and dangling mass handed out uniformly, like ours
    theirs = nx.pagerank(nx.from_scipy_sparse_array(graph, create_using=nx.DiGraph), alpha=alpha, tol=1e-14)
    np.testing.assert_allclose(ours, [theirs[i] for i in range(200)], atol=1e-10)
    assert ours.sum() == pytest.approx(1.0) and np.all(ours > 0)


def test_pagerank_without_teleport_reaches_the_stationary_distribution() -> None:
    graph = anchor_graph(unit_rows(120, 8, seed=2), theta=-1.0, k2=6)
    assert connected_components(graph, directed=True, connection="strong")[0] == 1
    pi = pagerank(graph, teleport=False)
    np.testing.assert_allclose(pi @ row_normalized(graph), pi, atol=1e-9)
    assert pi.sum() == pytest.approx(1.0) and np.all(pi >= 0)
    assert pi.max() > 1.5 / 120  # not just the uniform start


@pytest.mark.parametrize("teleport", [True, False])
def test_pagerank_of_a_graph_without_edges_is_uniform(teleport: bool) -> None:
    np.testing.assert_allclose(pagerank(sparse.csr_matrix((5, 5)), teleport=teleport), np.full(5, 0.2))


def test_pagerank_without_teleport_keeps_dangling_mass_uniform() -> None:
    # 0 → 1, and 1 has no out-edge: its mass goes to both records alike, so πᵀ = πᵀ(P + uniform row 1)
    pi = pagerank(np.array([[0.0, 1.0], [0.0, 0.0]]), teleport=False)
    np.testing.assert_allclose(pi, [1 / 3, 2 / 3], atol=1e-9)


def test_pagerank_warns_when_a_periodic_walk_does_not_converge() -> None:
    cycle = np.zeros((4, 4))
    cycle[[3, 0, 1, 2], [0, 1, 2, 0]] = 1.0  # 3 feeds a 3-cycle: the walk rotates forever
    with pytest.warns(RuntimeWarning, match="did not converge"):
        pi = pagerank(cycle, teleport=False, max_iter=50)
    assert pi.sum() == pytest.approx(1.0)
    assert pagerank(cycle, teleport=True).sum() == pytest.approx(1.0)  # teleport always converges


@pytest.mark.parametrize(
    ("adjacency", "kwargs", "message"),
    [
        (np.array([[0.0, -1.0], [1.0, 0.0]]), {}, "non-negative"),
        (np.ones((2, 3)), {}, "square"),
        (np.zeros((0, 0)), {}, "square"),
        (np.ones((2, 2)), {"alpha": 1.0}, "alpha"),
        (np.ones((2, 2)), {"alpha": 0.0}, "alpha"),
    ],
)
def test_pagerank_rejects_bad_input(adjacency: np.ndarray, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pagerank(adjacency, **kwargs)


# -- the anchor ------------------------------------------------------------------------------------


def test_anchor_of_no_one_record_and_no_edges() -> None:
    with pytest.raises(ValueError, match="at least one"):
        anchor_vector(np.zeros((0, 4), dtype=np.float32))
    vectors = unit_rows(6, 384)  # random 384-d vectors: no pair reaches θ=0.75
    np.testing.assert_allclose(anchor_vector(vectors[:1]), vectors[0])
    anchor = anchor_vector(vectors)
    assert anchor.dtype == np.float32
    np.testing.assert_allclose(anchor, vectors.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(anchor_vector(vectors, teleport=False), vectors.mean(axis=0), rtol=1e-5)


@pytest.mark.parametrize("kwargs", [{"theta": -0.1}, {"k2": 0}, {"alpha": 1.2}])
def test_anchor_rejects_bad_parameters(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        anchor_vector(unit_rows(3, 4), **kwargs)


@pytest.mark.parametrize("teleport", [True, False])
def test_anchor_leans_towards_the_dense_cluster(teleport: bool) -> None:
    rng = np.random.default_rng(3)
    centre, elsewhere = unit_rows(2, 32, seed=4)
    cluster = centre + 0.08 * rng.standard_normal((30, 32))  # cos ≈ 0.9 within the cluster
    outliers = elsewhere + 0.5 * rng.standard_normal((15, 32))  # a loose group: few pairs reach θ
    vectors = np.vstack([cluster, outliers]).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pi = pagerank(anchor_graph(vectors, theta=0.75, k2=10), teleport=teleport)
    assert pi[:30].min() > pi[30:].max()  # every clustered record outweighs every outlier

    def lean(v: np.ndarray) -> float:  # > 0: towards the cluster, < 0: towards the outliers
        return float(v @ (centre - elsewhere) / np.linalg.norm(v))

    anchor = anchor_vector(vectors, theta=0.75, k2=10, teleport=teleport)
    assert lean(anchor) > lean(vectors.mean(axis=0)) + 0.1


def test_anchor_of_real_sentences_leans_towards_what_the_user_talks_about(encoder: SentenceEncoder) -> None:
    cooking = [
        "I cooked a vegetarian lasagna for dinner.",
        "I love making homemade pasta with fresh basil.",
        "I baked sourdough bread this weekend.",
        "My favourite dish to cook is a spicy vegetable curry.",
        "I tried a new recipe for mushroom risotto.",
        "I made a big pot of lentil soup for the week.",
    ]
    other = ["My car insurance renewal is due in March.", "I fixed the leaking kitchen sink."]
    vectors = encoder.encode(cooking + other)
    topic = encoder.encode(["cooking and recipes"])[0]
    anchor = anchor_vector(vectors, theta=0.3, k2=3)
    mean = vectors.mean(axis=0)
    assert anchor @ topic / np.linalg.norm(anchor) > mean @ topic / np.linalg.norm(mean)


# -- the per-user cache ------------------------------------------------------------------------------


class CountingPAnchor(PAnchor):
    """Counts builds per user (the real build runs)."""

    def __init__(self, *args, **kwargs) -> None:
        self.builds: dict[str, int] = {}
        super().__init__(*args, **kwargs)

    def _build(self, user_id: str) -> np.ndarray | None:
        self.builds[user_id] = self.builds.get(user_id, 0) + 1
        return super()._build(user_id)


def test_cache_builds_once_and_rebuilds_only_for_the_written_user(mem: PersonaMem) -> None:
    mem.add("alice", "I am vegetarian and allergic to peanuts.")
    mem.add("alice", "I cooked a vegetarian lasagna for my sister.")
    mem.add("alice", "I ran a half marathon in the rain.")
    mem.add("bob", "I bought a used road bike.")
    mem.store.flush()  # marking rows indexed is a write too: let the background indexer finish first
    panchor = CountingPAnchor(mem.store, theta=0.3)

    first = panchor.anchor("alice")
    assert first is not None and first.shape == (mem.store.encoder.dim,)
    np.testing.assert_allclose(first, anchor_vector(mem.store.vectors("alice")[1], theta=0.3), rtol=1e-6)
    assert panchor.anchor("alice") is first and panchor.builds == {"alice": 1}
    with pytest.raises(ValueError, match="read-only"):
        first += 1  # shared by every caller: mutation would poison the cache

    mem.add("bob", "I adopted a rescue dog named Pepper.")
    mem.store.flush()
    assert panchor.anchor("alice") is first and panchor.builds == {"alice": 1}

    mem.add("alice", "I booked a cheap flight to Tokyo.")
    mem.store.flush()
    second = panchor.anchor("alice")
    assert panchor.builds == {"alice": 2} and not np.allclose(second, first)
    texts = [r.text for r in mem.records("alice")]
    np.testing.assert_allclose(second, anchor_vector(mem.store.encoder.encode(texts), theta=0.3), atol=1e-5)

    assert panchor.anchor("bob") is not None and panchor.builds["bob"] == 1


def test_cache_gives_none_for_unknown_and_forgotten_users(mem: PersonaMem) -> None:
    panchor = PAnchor(mem.store)
    assert panchor.anchor("nobody") is None
    mem.add("carol", "I signed up for a pottery class.")
    single = panchor.anchor("carol")
    assert single is not None
    np.testing.assert_allclose(single, mem.store.vectors("carol")[1][0])
    assert mem.forget("carol")
    assert panchor.anchor("carol") is None


def test_cache_rejects_bad_parameters(mem: PersonaMem) -> None:
    for kwargs in ({"theta": 2.0}, {"theta": -0.5}, {"k2": 0}, {"alpha": 0.0}):
        with pytest.raises(ValueError):
            PAnchor(mem.store, **kwargs)
