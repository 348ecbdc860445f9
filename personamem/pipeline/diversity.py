"""A profile that says different things: near-duplicates out, then maximal marginal relevance.

A history flooded with near-identical turns ("Chat turn 7: talked about weekend plans...") fills the
first stage's top ranks, and a profile of its top 5 repeats one thing five times while the facts that
matter ("I'm allergic to peanuts.") wait below. :func:`distinct` keeps the best-ranked record of each
group of near-duplicates; :func:`mmr` then picks each next record by Carbonell & Goldstein's (1998)
maximal marginal relevance, ``(1 − diversity) · relevance − diversity · redundancy``.

Relevance is the record's rank among the distinct candidates, mapped linearly onto (0, 1]; the first
stage's scores are not used because they are not on cosine's scale (hybrid's fused reciprocal ranks
are 0.01–0.3 and move with RRF's k, BM25's are unbounded), while a rank means the same under every
first stage. Redundancy is the largest cosine to a record already picked, from the records' stored
vectors (unit length, as dense search assumes).
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct", "mmr"]


def distinct(vectors: np.ndarray, threshold: float) -> list[int]:
    """Rows (best first) whose cosine to every better-ranked row kept is below ``threshold``."""
    kept: list[int] = []
    for i in range(len(vectors)):
        if not kept or float(np.max(vectors[kept] @ vectors[i])) < threshold:
            kept.append(i)
    return kept


def mmr(vectors: np.ndarray, k: int, diversity: float) -> list[int]:
    """``k`` rows of ``vectors`` (in relevance order, best first) in MMR's order of picking.

    ``diversity`` 0 keeps the relevance order; 1 ignores relevance after the first pick.
    """
    n = len(vectors)
    relevance = 1.0 - np.arange(n) / n
    similarity = vectors @ vectors.T
    redundancy = np.zeros(n)  # a negative cosine earns nothing: unrelated is as good as it gets
    free = np.ones(n, dtype=bool)
    picked: list[int] = []
    for _ in range(min(k, n)):
        gain = np.where(free, (1.0 - diversity) * relevance - diversity * redundancy, -np.inf)
        best = int(np.argmax(gain))  # the first of equals: ties go to the better rank
        picked.append(best)
        free[best] = False
        redundancy = np.maximum(redundancy, similarity[best])
    return picked
