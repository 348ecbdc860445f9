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
``filtered_search_ratio: R (target <= 1.2)`` (the worst gated ratio); the exit status is 1 on a miss.

    python bench/filters.py [--records 500] [--iters 200]
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 1.2
TOPICS = 10  # one topic in ten: 10 % selectivity
K = 10
METHODS: dict[str, str | None] = {"dense": "dense", "bm25": "bm25", "hybrid": "hybrid", "default": None}
GATED = ("dense", "hybrid", "default")


def main() -> int:
    parser = arguments(__doc__)
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

            def search(i: int, filtered: bool, method: str | None = method) -> Any:
                query = QUERIES[i % len(QUERIES)] + f" ({i})"
                chosen = {"metadata.topic": f"t{i % TOPICS}", "metadata.n": {"gt": -1 - i}}  # new each time
                return mem.search("u", query, k=K, method=method, filters=chosen if filtered else None)

            def check(i: int, hits: dict[str, Any], name: str = name) -> None:
                found = hits["filtered"]
                if any(h.record.metadata["topic"] != f"t{i % TOPICS}" for h in found) or (
                    name != "bm25" and len(found) < K
                ):
                    raise SystemExit(f"{name}: a filtered search returned {len(found)} hits, or a non-match")

            spent = paired(  # the warm-up loads the models, builds BM25 and the views
                {"unfiltered": lambda i: search(i, False), "filtered": lambda i: search(i, True)},
                args.iters,
                check=check,
            )
            ratios[name] = median_ratio(spent["filtered"], spent["unfiltered"])
            p50 = sorted(spent["unfiltered"])[len(spent["unfiltered"]) // 2] * 1e3
            log(f"{name:8s} unfiltered p50 {p50:6.2f} ms, filtered/unfiltered p50 ratio {ratios[name]:.3f}")
    return gate("filtered_search_ratio", max(ratios[name] for name in GATED), TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main())
