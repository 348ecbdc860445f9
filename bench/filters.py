"""What a filter costs ``search``: filtered against unfiltered, on one user, in one run.

One user with ``--records`` seeded synthetic records in a real store, each with ``metadata.topic``
one of ten values, so ``{"metadata.topic": ...}`` keeps 10 % of them. Each method (dense, bm25,
hybrid, and the default with its learned ranker) is timed in its own loop that alternates the
filtered and the unfiltered search on the same query, swapping which goes first. Every filtered
search uses a filter never asked before (its topic plus an always-true bound that differs per
iteration), so each one pays the pass over the user's records that later asks of the same filter
skip: the worst case. The script checks that every filtered hit matches and that k is filled.

Gate: p50(filtered) / p50(unfiltered) <= 1.2 for dense, hybrid and the default (BM25 alone, a
fraction of a millisecond, is reported). The last stdout line is
``filtered_search_ratio: R (target 1.2)`` (the worst gated ratio); the exit status is 1 on a miss.

    python bench/filters.py [--records 500] [--iters 200]
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, log, median_ratio, realistic_text

TARGET_RATIO = 1.2
TOPICS = 10  # one topic in ten: 10 % selectivity
K = 10
METHODS: dict[str, str | None] = {"dense": "dense", "bm25": "bm25", "hybrid": "hybrid", "default": None}
GATED = ("dense", "hybrid", "default")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=200, help="timed searches per method and side")
    args = parser.parse_args()

    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    rng = random.Random(0)
    ratios: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-filters-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        mem.add_many(
            [
                {"id": f"r{i}", "text": realistic_text(rng), "metadata": {"topic": f"t{i % TOPICS}", "n": i}}
                for i in range(args.records)
            ],
            user_id="u",
        )
        log(f"[setup] one user, {args.records} records, filters keep {args.records // TOPICS}")
        for name, method in METHODS.items():
            mem.search("u", QUERIES[0], k=K, method=method)  # warm up: models, BM25, views
            mem.search("u", QUERIES[0], k=K, method=method, filters={"metadata.topic": "t0"})
            spent: dict[str, list[float]] = {"filtered": [], "unfiltered": []}
            for i in range(args.iters):
                query = QUERIES[i % len(QUERIES)] + f" ({i})"
                topic = f"t{i % TOPICS}"
                chosen = {"metadata.topic": topic, "metadata.n": {"gt": -1 - i}}  # new each time
                for side in ("filtered", "unfiltered") if i % 2 else ("unfiltered", "filtered"):
                    start = time.perf_counter()
                    hits = mem.search(
                        "u", query, k=K, method=method, filters=chosen if side == "filtered" else None
                    )
                    spent[side].append(time.perf_counter() - start)
                    if side == "filtered" and (
                        any(h.record.metadata["topic"] != topic for h in hits)
                        or (name != "bm25" and len(hits) < K)
                    ):
                        raise SystemExit(
                            f"{name}: a filtered search returned {len(hits)} hits, or a non-match"
                        )
            ratios[name] = median_ratio(spent["filtered"], spent["unfiltered"])
            p50 = sorted(spent["unfiltered"])[len(spent["unfiltered"]) // 2] * 1e3
            log(f"{name:8s} unfiltered p50 {p50:6.2f} ms, filtered/unfiltered p50 ratio {ratios[name]:.3f}")
    worst = max(ratios[name] for name in GATED)
    print(f"filtered_search_ratio: {worst:.3f} (target {TARGET_RATIO})")
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
