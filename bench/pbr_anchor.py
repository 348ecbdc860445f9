"""P-Anchor (PBR) cost: building a user's anchor, and using the cached anchor per query, in one run.

One user with ``--records`` short, varied sentences (seeded, 1-3 sentences each, real encoder vectors)
is written into a fresh store. Reported:

* build: ``anchor_vector`` over the user's vectors (graph + PageRank + weighted sum; median of
  ``--build-repeats``), and the cold ``PAnchor.anchor(user)`` that also fetches the vectors from the
  store, each with its tracemalloc peak;
* per query: the cached ``PAnchor.anchor(user)`` (a revision check in SQL, then the cached vector)
  plus a fusion-like vector op (``q + c_anchor``, normalized), against the bare
  ``encoder.encode([query])`` that every query pays anyway. ``--iters`` iterations alternate the two on
  the same query, swapping which goes first every iteration, so drift and ordering effects cancel.

Gate: p50(anchor + fusion) / p50(encode) <= 0.05. The last stdout line is
``pbr_anchor_overhead_ratio: R (target <= 0.05)`` and the exit status is 1 when the target is missed.

    python bench/pbr_anchor.py [--records 500] [--iters 200] [--theta 0.75] [--k2 10] [--store DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 0.05
USER = "alice"


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def traced(fn: Callable[[], object]) -> tuple[float, float]:
    """(seconds, tracemalloc peak in MiB) of one call; tracing slows it, so time it untraced too."""
    tracemalloc.start()
    try:
        seconds = timed(fn)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return seconds, peak / 2**20


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:8.3f}"


# -- benchmark -------------------------------------------------------------------------------------


def run(args: argparse.Namespace, root: Path) -> float:
    from personamem import PersonaMem, Record
    from personamem.encoder import default_encoder
    from personamem.personalize.anchor import PAnchor, anchor_graph, anchor_vector

    log("[setup] loading encoder")
    encoder = default_encoder()
    encoder.encode(["warm up the encoder"])
    params = {"theta": args.theta, "k2": args.k2, "alpha": args.alpha, "teleport": not args.no_teleport}
    mem = PersonaMem.open(root, encoder=encoder)
    try:
        if mem.count(USER) == 0:
            rng = random.Random(args.seed)
            records = [
                Record(user_id=USER, id=f"m{i:05d}", text=realistic_text(rng), kind="note")
                for i in range(args.records)
            ]
            log(f"[build] encoding and writing {len(records)} records")
            mem.add_many(records)
        _, vectors = mem.store.vectors(USER)
        n = len(vectors)
        graph = anchor_graph(vectors, theta=args.theta, k2=args.k2)

        log(f"[time] anchor build over {n} records, {args.build_repeats} repeats")
        build = statistics.median(
            timed(lambda: anchor_vector(vectors, **params)) for _ in range(args.build_repeats)
        )
        _, build_peak = traced(lambda: anchor_vector(vectors, **params))
        panchor = PAnchor(mem.store, **params)
        cold = timed(lambda: panchor.anchor(USER))
        fetch = statistics.median(timed(lambda: mem.store.vectors(USER)) for _ in range(args.build_repeats))
        _, cold_peak = traced(lambda: PAnchor(mem.store, **params).anchor(USER))

        query_vectors = {q: encoder.encode([q])[0] for q in QUERIES}

        def personalize(query: str) -> np.ndarray:
            anchor = panchor.anchor(USER)
            assert anchor is not None
            fused = query_vectors[query] + anchor
            return fused / np.linalg.norm(fused)

        load_before = f"{os.getloadavg()[0]:.2f}"
        log(f"[time] per query: {args.iters} iterations, alternating with the encoder baseline")
        spent = paired(
            {
                "encode": lambda i: encoder.encode([QUERIES[i % len(QUERIES)]]),
                "anchor": lambda i: personalize(QUERIES[i % len(QUERIES)]),
            },
            args.iters,
            warmup=args.warmup,
        )
        base, over = spent["encode"], spent["anchor"]

        log("[time] breakdown of the cached path")
        parts: dict[str, list[float]] = {"revision (sql)": [], "cache get": [], "fusion op": []}
        for i in range(args.iters):
            q = query_vectors[QUERIES[i % len(QUERIES)]]
            t0 = time.perf_counter()
            mem.store.revision(USER)
            t1 = time.perf_counter()
            anchor = panchor.anchor(USER)
            t2 = time.perf_counter()
            fused = q + anchor
            fused /= np.linalg.norm(fused)
            t3 = time.perf_counter()
            parts["revision (sql)"].append(t1 - t0)
            parts["cache get"].append(t2 - t1)
            parts["fusion op"].append(t3 - t2)
        anchor = panchor.anchor(USER)
        assert anchor is not None
        anchor_norm = float(np.linalg.norm(anchor))
    finally:
        mem.close()

    ratio = median_ratio(over, base)
    each = statistics.median(o / b for o, b in zip(over, base, strict=True))
    print(
        f"load average before / after timing: {load_before} / {os.getloadavg()[0]:.2f} "
        f"({os.cpu_count()} cpus)"
    )
    print(
        f"user {USER}: {n} records (real encoder vectors); theta={args.theta} k2={args.k2} "
        f"alpha={args.alpha} teleport={not args.no_teleport}"
    )
    print(
        f"graph: {graph.nnz} edges ({graph.nnz / n:.1f} per record), "
        f"{int((graph.getnnz(axis=1) == 0).sum())} records without out-edges; anchor norm {anchor_norm:.3f}"
    )
    print()
    print(f"anchor_vector (graph + PageRank + sum), median of {args.build_repeats}: {ms(build)} ms")
    print(f"  tracemalloc peak: {build_peak:.2f} MiB")
    print(f"cold PAnchor.anchor (store.vectors fetch + build):     {ms(cold)} ms")
    print(f"  of which store.vectors fetch (median):               {ms(fetch)} ms")
    print(f"  tracemalloc peak: {cold_peak:.2f} MiB")
    print()
    print(f"per query, {args.iters} iterations interleaved     p50 ms   p95 ms")
    for name, samples in (("encoder.encode([query])", base), ("cached anchor + fusion", over)):
        print(f"{name:<40} {ms(statistics.median(samples))} {ms(float(np.percentile(samples, 95)))}")
    print(f"paired p50 ratio (median of per-iteration ratios): {each:.4f}")
    print("\ncached path breakdown                    p50 ms   p95 ms")
    for name, samples in parts.items():
        print(f"{name:<40} {ms(statistics.median(samples))} {ms(float(np.percentile(samples, 95)))}")
    return ratio


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--iters", type=int, default=200, help="timed per-query iterations")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--build-repeats", type=int, default=5)
    parser.add_argument("--theta", type=float, default=0.75)
    parser.add_argument("--k2", type=int, default=10)
    parser.add_argument("--alpha", type=float, default=0.85)
    parser.add_argument("--no-teleport", action="store_true", help="PageRank as the PBR authors' code")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", type=Path, help="store folder (kept; reused if the user has records)")
    args = parser.parse_args()

    if args.store is not None:
        ratio = run(args, args.store)
    else:
        root = Path(tempfile.mkdtemp(prefix="personamem-bench-anchor-"))
        try:
            ratio = run(args, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return gate("pbr_anchor_overhead_ratio", ratio, TARGET_RATIO, digits=4)


if __name__ == "__main__":
    sys.exit(main())
