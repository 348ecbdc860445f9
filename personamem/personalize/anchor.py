"""P-Anchor (PBR): the PageRank-weighted centre of a user's corpus, added to every query vector.

PBR's P-Anchor depends only on what the user has stored, not on the query: the user's record
embeddings c_i form a similarity graph (an edge i→j of weight cos_ij when j is among i's ``k2``
nearest records and cos_ij ≥ ``θ``), PageRank with damping ``α`` scores each record's centrality
π_i, and the anchor is c_anchor = Σ_i π_i c_i. Records in dense regions of the user's history weigh
more than outliers, so the anchor points at what the user talks about most. The fusion
q* = q + c_anchor + w1·f_avg + w2·r is built elsewhere; :class:`PAnchor` serves the anchor per user,
computed once per revision of the user's records.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import numpy as np

from personamem.store import Store

if TYPE_CHECKING:  # scipy loads where a graph is built: importing it costs a search 0.1 s
    from scipy import sparse

__all__ = ["PAnchor", "anchor_graph", "anchor_vector", "pagerank"]

# A row block's similarities (float32), their mask and, for rows with more than k2 candidates, a copy
# and argpartition's int64 indices: 2**22 entries keep a block under ~70 MB whatever the record count.
_BLOCK_ENTRIES = 1 << 22
_MAX_BLOCK_ROWS = 1024


def _check_theta(theta: float, low: float) -> None:
    if not low <= theta <= 1.0:
        why = " (PageRank needs non-negative edge weights)" if low == 0.0 else ""
        raise ValueError(f"theta must be in [{low:g}, 1]{why}, got {theta}")


def _check_k2(k2: int) -> None:
    if isinstance(k2, bool) or not isinstance(k2, int | np.integer) or k2 < 1:
        raise ValueError(f"k2 must be an integer >= 1, got {k2!r}")


def _check_alpha(alpha: float) -> None:
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    matrix = np.asarray(vectors)
    if matrix.ndim != 2:
        raise ValueError(f"vectors must be a 2-D (records, dim) array, got shape {matrix.shape}")
    return matrix.astype(np.result_type(matrix.dtype, np.float32), copy=False)


def anchor_graph(
    vectors: np.ndarray, *, theta: float = 0.75, k2: int = 10, block_size: int | None = None
) -> sparse.csr_matrix:
    """PBR's similarity graph over a user's records, as a sparse weighted adjacency matrix.

    The graph is directed, following the definition literally: row i holds i's out-edges, to the
    records j ≠ i that are among i's ``k2`` most similar and have cos_ij ≥ ``theta``, with weight
    cos_ij. So A_ij may be set while A_ji is not (i is not among j's top ``k2``): out-degree is at
    most ``k2`` while in-degree is not bounded, and PageRank favours the records that many others
    count among their nearest. There are no self loops; ties at the k2-th place are broken
    arbitrarily.

    Similarities are computed a row block at a time and only each row's top ``k2`` are kept, so the
    memory is O(n·k2 + block·n), never n×n.

    Args:
        vectors: ``(n, dim)`` unit-norm rows (the store's vectors are), so dot products are cosines.
        theta: PBR's θ, the least cosine an edge may have, in [-1, 1].
        k2: PBR's k2, the most out-edges of a record.
        block_size: rows per block; by default as many as keep a block's similarities near 2**22
            entries, at most 1024.

    Returns:
        The ``(n, n)`` CSR adjacency (float64 weights, sorted indices).

    Raises:
        ValueError: on a parameter out of range or ``vectors`` that is not 2-D.
    """
    from scipy import sparse

    _check_theta(theta, low=-1.0)
    _check_k2(k2)
    matrix = _as_matrix(vectors)
    n = matrix.shape[0]
    if block_size is None:
        block_size = max(1, min(_MAX_BLOCK_ROWS, _BLOCK_ENTRIES // max(n, 1)))
    elif block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    k = min(k2, n - 1)
    if k <= 0:  # zero or one record: nothing to link
        return sparse.csr_matrix((n, n), dtype=np.float64)
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    weights: list[np.ndarray] = []
    for start in range(0, n, block_size):
        sims = matrix[start : start + block_size] @ matrix.T
        local = np.arange(sims.shape[0])
        sims[local, start + local] = -np.inf  # no self loops
        candidates = sims >= theta
        heavy = candidates.sum(axis=1) > k
        # rows with at most k candidates keep them all; only the others need a partial sort
        light_rows, light_cols = np.nonzero(candidates[~heavy])
        light_rows = np.flatnonzero(~heavy)[light_rows]
        heavy_rows = np.flatnonzero(heavy)
        heavy_cols = np.argpartition(sims[heavy_rows], n - k, axis=1)[:, n - k :]
        for block_rows, block_cols in (
            (light_rows, light_cols),
            (np.repeat(heavy_rows, k), heavy_cols.ravel()),
        ):
            rows.append(start + block_rows)
            cols.append(block_cols)
            weights.append(sims[block_rows, block_cols].astype(np.float64))
    graph = sparse.csr_matrix(
        (np.concatenate(weights), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n)
    )
    graph.sort_indices()
    return graph


def pagerank(
    adjacency: sparse.spmatrix | sparse.sparray | np.ndarray,
    *,
    alpha: float = 0.85,
    teleport: bool = True,
    tol: float = 1e-10,
    max_iter: int = 1000,
) -> np.ndarray:
    """PageRank of a weighted directed graph, by power iteration on the row-normalized matrix P.

    With ``teleport`` (PBR's formulation), π = α·Pᵀπ + (1−α)/n; this matches ``networkx.pagerank``
    with its defaults (uniform personalization and dangling weights) and always converges. Without
    it (what the PBR authors' code runs), π ← Pᵀπ from a uniform start, the stationary distribution
    of the random walk itself; ``alpha`` is then unused. In both, a dangling record (no out-edge, or
    only zero weights) hands its mass out uniformly, as if linked to every record: dropping it
    instead would leak mass, and renormalizing would hand it out in proportion to the current π.

    Iteration stops when the L1 change of π is below ``tol``. Without teleport a periodic graph
    (e.g. a directed cycle entered unevenly) never converges: after ``max_iter`` iterations the
    last iterate is returned with a :class:`RuntimeWarning`.

    Args:
        adjacency: ``(n, n)`` non-negative weights, row i holding i's out-edges (n ≥ 1).
        alpha: PBR's damping α, in (0, 1).
        teleport: mix in the uniform jump with probability 1−α.
        tol: L1 convergence threshold.
        max_iter: the most iterations.

    Returns:
        π, float64, non-negative, summing to 1.

    Raises:
        ValueError: on a non-square, empty or negatively weighted graph, or α out of range.
    """
    from scipy import sparse

    _check_alpha(alpha)
    graph = sparse.csr_matrix(adjacency, dtype=np.float64)
    n = graph.shape[0]
    if graph.shape != (n, n) or n == 0:
        raise ValueError(f"adjacency must be a non-empty square matrix, got shape {graph.shape}")
    if graph.nnz and graph.data.min() < 0:
        raise ValueError("PageRank needs non-negative edge weights; the graph has negative ones")
    out_weight = np.asarray(graph.sum(axis=1)).ravel()
    dangling = out_weight == 0
    inverse = np.divide(1.0, out_weight, out=np.zeros(n), where=~dangling)
    transposed = graph.T.tocsr()  # Pᵀπ = Aᵀ(π / out_weight)
    pi = np.full(n, 1.0 / n)
    for _ in range(max_iter):
        new = transposed @ (pi * inverse) + pi[dangling].sum() / n
        if teleport:
            new = alpha * new + (1.0 - alpha) / n
        new /= new.sum()  # only rounding drifts from 1
        if np.abs(new - pi).sum() < tol:
            return new
        pi = new
    warnings.warn(
        f"PageRank did not converge in {max_iter} iterations (teleport={teleport}); "
        "returning the last iterate",
        RuntimeWarning,
        stacklevel=2,
    )
    return pi


def anchor_vector(
    vectors: np.ndarray,
    *,
    theta: float = 0.75,
    k2: int = 10,
    alpha: float = 0.85,
    teleport: bool = True,
) -> np.ndarray:
    """PBR's P-Anchor c_anchor = Σ_i π_i c_i over a user's record vectors.

    One record gives that record's vector. When no pair reaches ``theta`` the graph has no edges,
    every record is dangling and π is uniform, so the anchor is the plain mean vector. The anchor is
    not normalized: its norm shrinks as the corpus spreads out, which is how PBR's fusion weighs it
    against the unit query vector.

    Args:
        vectors: ``(n, dim)`` unit-norm record vectors.
        theta: PBR's θ, in [0, 1] here since PageRank needs non-negative weights.
        k2: PBR's k2, the most out-edges per record.
        alpha: PBR's damping α, in (0, 1).
        teleport: PageRank with the uniform jump (see :func:`pagerank`).

    Returns:
        The ``(dim,)`` anchor, in the vectors' float dtype.

    Raises:
        ValueError: for zero records (the caller decides what an empty user means) or bad parameters.
    """
    _check_theta(theta, low=0.0)
    _check_alpha(alpha)
    matrix = _as_matrix(vectors)
    if matrix.shape[0] == 0:
        raise ValueError("P-Anchor needs at least one record vector")
    pi = pagerank(anchor_graph(matrix, theta=theta, k2=k2), alpha=alpha, teleport=teleport)
    return (pi @ matrix).astype(matrix.dtype)


class PAnchor:
    """Each user's P-Anchor, built on first use and rebuilt only when the user's records change.

    The anchor depends on the whole corpus but not on the query, so it is cached per user with
    :meth:`Store.user_cache <personamem.store.Store.user_cache>`: a write to the user invalidates it
    (checked against the store's revision token on every read, so writes from other processes count
    too) and ``forget`` drops it.
    """

    def __init__(
        self,
        store: Store,
        *,
        theta: float = 0.75,
        k2: int = 10,
        alpha: float = 0.85,
        teleport: bool = True,
        max_users: int = 256,
    ) -> None:
        _check_theta(theta, low=0.0)
        _check_k2(k2)
        _check_alpha(alpha)
        self.store = store
        self.theta = theta
        self.k2 = k2
        self.alpha = alpha
        self.teleport = teleport
        self._anchors = store.user_cache(self._build, max_users=max_users)

    def _build(self, user_id: str) -> np.ndarray | None:
        _, matrix = self.store.vectors(user_id)  # now: kept per revision, as the history stands
        if matrix.shape[0] == 0:
            return None
        anchor = anchor_vector(matrix, theta=self.theta, k2=self.k2, alpha=self.alpha, teleport=self.teleport)
        anchor.flags.writeable = False  # shared by every caller until the user changes
        return anchor

    def anchor(self, user_id: str) -> np.ndarray | None:
        """The user's ``(dim,)`` anchor (read-only), or None for an unknown user or one with no records."""
        return self._anchors.get(user_id)
