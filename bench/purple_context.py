"""PURPLE's cost at query time: ``context()`` with a PURPLE selector against hybrid's top K.

A store of ``--users`` users with ``--records`` realistic records each; for each iteration a user and a
query (round robin), timed alternately in one process:

1. ``mem.context(user, query, method="hybrid")``: hybrid's top 5, the selection PURPLE replaces.
2. ``mem.context(user, query, method="purple:<checkpoint>")``: hybrid's top 20, the scorer's top 5 (the
   query's token states from the encoder, the records' from the selector's cache, one forward pass).

``--checkpoint`` names a trained selector; without one an untrained scorer of the default shape is
written to a temporary folder (its weights cost the same as trained ones). Gate: p50(PURPLE) /
p50(hybrid) <= 1.2. The last stdout line is ``purple_context_p50_ratio: R (target <= 1.2)``; the exit
status is 1 when it is missed.

    python bench/purple_context.py [--users 20] [--records 200] [--iters 200] [--checkpoint FOLDER]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, fill_users, log, median_ratio

TARGET = 1.2


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--records", type=int, default=200, help="records per user")
    parser.add_argument("--iters", type=int, default=200, help="timed calls per variant")
    parser.add_argument("--checkpoint", type=Path, help="a PURPLE checkpoint folder (default: untrained)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from personamem import PersonaMem
    from personamem.encoder import default_encoder
    from personamem.profile.purple import PurpleConfig
    from personamem.profile.purple.checkpoint import save_checkpoint
    from personamem.profile.purple.model import RecordScorer

    rng = random.Random(args.seed)
    encoder = default_encoder()
    with (
        tempfile.TemporaryDirectory(prefix="personamem-bench-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=encoder) as mem,
    ):
        checkpoint = args.checkpoint
        if checkpoint is None:
            checkpoint = Path(tmp) / "purple"
            save_checkpoint(checkpoint, RecordScorer(PurpleConfig()), encoder=encoder.name)
        methods = {"hybrid top 5": "hybrid", "PURPLE top 5 of 20": f"purple:{checkpoint}"}
        users = fill_users(mem, args.users, args.records, rng)
        log("[setup] warm-up: each user and query once per variant (BM25 indexes, record states)")
        for user in users:
            for query in QUERIES:
                for method in methods.values():
                    mem.context(user, query, method=method)
        times: dict[str, list[float]] = {name: [] for name in methods}
        for i in range(args.iters):
            user, query = users[i % len(users)], QUERIES[(i * 7) % len(QUERIES)]
            for name, method in methods.items():
                start = time.perf_counter()
                mem.context(user, query, method=method)
                times[name].append(time.perf_counter() - start)
    for name, samples in times.items():
        print(f"{name:20s} p50 {statistics.median(samples) * 1e3:7.2f} ms")
    ratio = median_ratio(times["PURPLE top 5 of 20"], times["hybrid top 5"])
    print(f"purple_context_p50_ratio: {ratio:.3f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
