"""The shipped query adapter's cost on the read path: search with it against the same search without it.

One user with ``--records`` seeded synthetic records in a real store. ``search`` with
``method="dense"`` (the store's encoder embeds the query) against ``method="adapter:mixed"`` (the same
vector, then mapped by the adapter's 384 x 384 weights), alternating which goes first, a different
query each time; the ratio of medians is the result. ``hybrid`` against ``default`` (hybrid with the
adapter, weighted to dense) is reported beside it.

Gate: p50(adapter) / p50(dense) <= 1.05. The last stdout line is
``query_adapter_search_p50_ratio: R (target <= 1.05)``; the exit status is 1 when the target is missed.

    python bench/query_adapter.py [--records 500] [--iters 300]
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 1.05


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=300, help="timed searches per method")
    args = parser.parse_args()

    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    rng = random.Random(0)
    pairs = {"adapter": ("dense", "adapter:mixed"), "default": ("hybrid", "default")}
    with (
        tempfile.TemporaryDirectory(prefix="bench-adapter-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        mem.add_many([{"id": f"r{i}", "text": realistic_text(rng)} for i in range(args.records)], user_id="u")
        times = paired(  # the warm-up loads the adapter, builds BM25, fills caches
            {
                method: lambda i, method=method: mem.search(
                    "u", QUERIES[i % len(QUERIES)] + f" ({i})", k=10, method=method
                )
                for pair in pairs.values()
                for method in pair
            },
            args.iters,
        )
    for base, ours in pairs.values():
        log(
            f"search p50: {base} {sorted(times[base])[args.iters // 2] * 1e3:.2f} ms, {ours} "
            f"{sorted(times[ours])[args.iters // 2] * 1e3:.2f} ms over {args.records} records"
        )
    print(f"default_vs_hybrid_search_p50_ratio: {median_ratio(times['default'], times['hybrid']):.3f}")
    ratio = median_ratio(times["adapter:mixed"], times["dense"])
    return gate("query_adapter_search_p50_ratio", ratio, TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main())
