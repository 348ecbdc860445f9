"""``context()`` with a cached preference memory stays flat as the history grows; raw history does not.

Three users with 10, 100 and 1,000 records (seeded synthetic sentences) in a fresh store, a pipeline
with ``preference_memory="prompted"`` over the packaged SmolLM2 (CTranslate2, the pipeline's
runtime). Their memories are built ahead with ``refresh_memories`` (timed and printed: it is the
per-history cost the write path never pays). Then ``context()`` runs ``--iters`` times per user,
alternating users, a different request each time; the memory is read from the store's slot, so the
per-query cost is retrieval plus one slot read, whatever the history length. For comparison the
raw-history prompt (every record, as the LLM would see it without a memory) is counted in tokens.

Gate: p50(context, 1,000 records) / p50(context, 10 records) <= 1.2. The last stdout line is
``memory_context_1000_over_10: R (target <= 1.2)``; the exit status is 1 when it is missed.

    python bench/memory_context.py [--iters 20]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, paired

TARGET_RATIO = 1.2
SIZES = (10, 100, 1000)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--iters", type=int, default=20, help="timed context() calls per user")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from personamem import PersonaMem
    from personamem.pipeline import PipelineConfig

    rng = random.Random(args.seed)
    config = PipelineConfig(preference_memory="prompted", llm="smollm2-135m", memory_timeout_s=None)
    with (
        tempfile.TemporaryDirectory(prefix="personamem-bench-memory-") as tmp,
        PersonaMem.open(Path(tmp), pipeline=config) as mem,
    ):
        users = {n: f"user-{n}" for n in SIZES}
        for n, user in users.items():
            mem.add_many([realistic_text(rng) for _ in range(n)], user_id=user)
        log("[setup] building the three memories ahead (refresh_memories)")
        start = time.perf_counter()
        mem.refresh_memories(list(users.values()), batch_size=len(users))
        build_s = time.perf_counter() - start
        for user in users.values():  # warm: BM25 index, revision readers, the LLM's tokenizer
            mem.context(user, QUERIES[-1])
        log(f"[time] context() x {args.iters} per user, alternating")
        llm = mem.pipeline().llm
        assert llm is not None
        memory_tokens: dict[str, int] = {}

        def count(i: int, contexts: dict[str, Any]) -> None:
            for user, context in contexts.items():
                assert context.memory is not None and not context.warnings, context.warnings
                memory_tokens[user] = llm.count_tokens(context.memory)

        times = paired(
            {
                user: lambda i, u=user: mem.context(u, QUERIES[i % (len(QUERIES) - 1)])
                for user in users.values()
            },
            args.iters,
            warmup=0,
            check=count,
        )
        raw_tokens = {
            n: llm.count_tokens("\n".join(f"- {r.text}" for r in mem.records(users[n]))) for n in SIZES
        }
    p50 = {n: statistics.median(times[user]) for n, user in users.items()}
    print(f"memories built ahead: {build_s:.1f} s for {len(SIZES)} users (one batched generation)")
    print("records   context p50 ms   memory tokens   raw-history tokens")
    for n in SIZES:
        print(f"{n:>7} {p50[n] * 1e3:16.1f} {memory_tokens[users[n]]:15d} {raw_tokens[n]:20d}")
    return gate("memory_context_1000_over_10", p50[1000] / p50[10], TARGET_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
