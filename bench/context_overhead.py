"""The context call's cost against the hybrid search it builds on.

A store of ``--users`` users with ``--records`` realistic records each; for each iteration a user and a
query (round robin), timed alternately in one process:

1. ``mem.search(user, query, k=5, method="hybrid")``: the baseline.
2. ``mem.context(user, query)`` with the default pipeline (hybrid, its top 5, no LLM stage, fitted
   to 512 tokens): what the pipeline, the rendering and the token-budget fit add.
3. ``mem.context(user, query, method="hybrid")``: hybrid's top 5 as the profile, the selection
   PURPLE replaces.
4. ``mem.context(user, query, method="purple:<checkpoint>")``: PURPLE picking 5 of hybrid's top 20.
   The checkpoint is ``--checkpoint`` or an untrained 2-layer token scorer saved to a temporary
   folder (a trained one of the same shape costs the same); each user's records were seen by an
   earlier query, as they are in a running service.

Gates: p50(context) / p50(hybrid) <= 1.10 and p50(PURPLE context) / p50(hybrid) <= 3.0. The last
stdout line is ``context_overhead_p50_ratio: R (target <= 1.1)``; the exit status is 1 when either
target is missed. Printed beside them, not gating: p50(PURPLE context) / p50(hybrid's top-5 context),
whose target (1.2) applies to a PURPLE checkpoint that is the default selector (none is yet).

    python bench/context_overhead.py [--users 20] [--records 200] [--iters 200] [--checkpoint FOLDER]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _common import QUERIES, fill_users, log
from harness import arguments, gate, median_ratio, paired

TARGET_OVERHEAD = 1.10
TARGET_PURPLE = 3.0


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--records", type=int, default=200, help="records per user")
    parser.add_argument("--iters", type=int, default=200, help="timed calls per variant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", type=Path, help="a PURPLE checkpoint folder (default: untrained)")
    args = parser.parse_args()

    from personamem import PersonaMem
    from personamem.encoder import default_encoder
    from personamem.profile.purple import PurpleConfig
    from personamem.profile.purple.checkpoint import save_checkpoint
    from personamem.profile.purple.model import RecordScorer

    rng = random.Random(args.seed)
    encoder = default_encoder()
    with tempfile.TemporaryDirectory(prefix="personamem-bench-") as tmp:
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = Path(tmp) / "purple"
            save_checkpoint(checkpoint, RecordScorer(PurpleConfig(layers=2)), encoder=encoder.name)
        with PersonaMem.open(Path(tmp) / "store", encoder=encoder) as mem:
            users = fill_users(mem, args.users, args.records, rng)
            calls: dict[str, Callable[[str, str], object]] = {
                "hybrid search": lambda u, q: mem.search(u, q, k=5, method="hybrid"),
                "context (default pipeline)": lambda u, q: mem.context(u, q),
                "context (hybrid's top 5)": lambda u, q: mem.context(u, q, method="hybrid"),
                "context (PURPLE over hybrid's top 20)": lambda u, q: mem.context(
                    u, q, method=f"purple:{checkpoint}"
                ),
            }
            log("[setup] warm-up: each user and query once per variant (BM25 indexes, PURPLE record cache)")
            for user in users:
                for query in QUERIES:
                    for call in calls.values():
                        call(user, query)
            times = paired(
                {
                    name: lambda i, call=call: call(users[i % len(users)], QUERIES[(i * 7) % len(QUERIES)])
                    for name, call in calls.items()
                },
                args.iters,
                warmup=0,  # warmed up above, every user and query
            )
    base = times["hybrid search"]
    for name, samples in times.items():
        ordered = sorted(samples)
        p95 = ordered[int(0.95 * (len(ordered) - 1))]
        print(
            f"{name:40s} p50 {statistics.median(samples) * 1e3:7.2f} ms  p95 {p95 * 1e3:7.2f} ms  "
            f"ratio {median_ratio(samples, base):5.2f}"
        )
    overhead = median_ratio(times["context (default pipeline)"], base)
    purple = median_ratio(times["context (PURPLE over hybrid's top 20)"], base)
    selection = median_ratio(
        times["context (PURPLE over hybrid's top 20)"], times["context (hybrid's top 5)"]
    )
    print(f"PURPLE context / hybrid's top-5 context, p50: {selection:.3f} (1.2 for a default selector)")
    return max(
        gate("context_purple_p50_ratio", purple, TARGET_PURPLE, digits=2),
        gate("context_overhead_p50_ratio", overhead, TARGET_OVERHEAD),
    )


if __name__ == "__main__":
    sys.exit(main())
