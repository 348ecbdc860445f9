"""What the interaction log adds to ``context()``.

A store of ``--users`` users with ``--records`` realistic records each; for each iteration a user and a
query (round robin), timed alternately in one process:

1. ``mem.context(user, query)`` with the default pipeline and ``log_interactions = false``: the baseline.
2. The default pipeline, which logs (on by default since issue 58): the call plus one interaction row
   queued for the store's writer thread, which inserts it into SQLite off the call's path.

Gate: p50(logged) / p50(plain) <= 1.05. The last stdout line is
``interaction_log_overhead_p50_ratio: R (target <= 1.05)``; the exit status is 1 when it is missed.

    python bench/interaction_log.py [--users 20] [--records 200] [--iters 300]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
from pathlib import Path

from _common import QUERIES, fill_users, log
from harness import arguments, gate, median_ratio, paired

TARGET = 1.05


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--records", type=int, default=200, help="records per user")
    parser.add_argument("--iters", type=int, default=300, help="timed calls per variant")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from personamem import PersonaMem, PipelineConfig
    from personamem.encoder import default_encoder

    rng = random.Random(args.seed)
    plain = PipelineConfig(log_interactions=False)
    with (
        tempfile.TemporaryDirectory(prefix="personamem-bench-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        users = fill_users(mem, args.users, args.records, rng)
        log("[setup] warm-up: each user and query once per variant (BM25 indexes)")
        for user in users:
            for query in QUERIES:
                mem.context(user, query, method=plain)
                mem.context(user, query)
        times = paired(
            {
                name: lambda i, pipeline=pipeline: mem.context(
                    users[i % len(users)], QUERIES[(i * 7) % len(QUERIES)], method=pipeline
                )
                for name, pipeline in (("context", plain), ("context, logged", None))
            },
            args.iters,
            warmup=0,  # warmed up above, every user and query
        )
        rows = len(mem.interactions())
    for name, samples in times.items():
        print(f"{name:18s} p50 {statistics.median(samples) * 1e3:7.2f} ms")
    print(f"interactions logged: {rows}")
    ratio = median_ratio(times["context, logged"], times["context"])
    return gate("interaction_log_overhead_p50_ratio", ratio, TARGET)


if __name__ == "__main__":
    sys.exit(main())
