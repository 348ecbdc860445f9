"""The cost of erasure: ``forget`` of a user with ``--records`` records against writing that user, in one run.

A store holds the user and ``--others`` other users of ``--per-other`` records each. Writing is
timed as ``Store.add_many`` with precomputed unit vectors (the storage cost alone: the encoder's
time does not depend on erasure); ``forget`` is then timed as a whole (rows deleted, collection
dropped, Chroma segment files shredded, both SQLite files vacuumed), and the store is checked: the
other users intact, the user's collection name nowhere on disk. Vacuuming rewrites whole database
files, so the cost grows with the store, not only with the user; ``--others`` sets that size.
Reported, not gated: ``delete`` of one of the user's records before the forget (it rebuilds the
user's collection, so it costs about as much as re-indexing the user).

Gate: forget / add_many <= 0.25 for the same user. The last stdout line is
``forget_cost_ratio: R (target <= 0.25)`` and the exit status is 1 when the target is missed.

    python bench/forget.py [--records 10000] [--others 20] [--per-other 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import log, realistic_text
from harness import arguments, gate

TARGET_RATIO = 0.25


def _records(user: str, n: int, rng: random.Random):
    from personamem.records import Record

    return [Record(user_id=user, id=f"r{i:05d}", text=realistic_text(rng)) for i in range(n)]


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def one_repeat(args: argparse.Namespace, root: Path, rep: int) -> tuple[float, float, int, float]:
    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    encoder = default_encoder()
    rng = random.Random(rep)
    with PersonaMem.open(root, encoder=encoder) as mem:
        for u in range(args.others):
            others = _records(f"other{u:03d}", args.per_other, rng)
            mem.store.add_many(others, vectors=_unit(len(others), encoder.dim, 1000 * rep + u))
        target = _records("departing-user", args.records, rng)
        start = time.perf_counter()
        mem.store.add_many(target, vectors=_unit(len(target), encoder.dim, rep))
        write_s = time.perf_counter() - start
        collection = mem.store.names.collection("departing-user").encode()
        start = time.perf_counter()
        mem.delete("departing-user", [target[0].id])
        delete_s = time.perf_counter() - start
        start = time.perf_counter()
        mem.forget("departing-user")
        forget_s = time.perf_counter() - start
        if mem.count() != args.others * args.per_other or "departing-user" in mem.users():
            raise SystemExit("forget removed the wrong records")
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
    if any(collection in p.read_bytes() for p in root.rglob("*") if p.is_file()):
        raise SystemExit("the forgotten user's collection name is still on disk")
    return write_s, forget_s, size, delete_s


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--others", type=int, default=20)
    parser.add_argument("--per-other", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="personamem-bench-forget-"))
    runs = []
    try:
        for rep in range(args.repeats):
            runs.append(one_repeat(args, base / f"run{rep}", rep))
            write_s, forget_s, _, _ = runs[-1]
            log(f"[rep {rep + 1}/{args.repeats}] add_many {write_s:.2f} s, forget {forget_s:.2f} s")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    write_s = statistics.median(r[0] for r in runs)
    forget_s = statistics.median(r[1] for r in runs)
    ratio = statistics.median(r[1] / r[0] for r in runs)
    print(
        f"user with {args.records} records among {args.others} others x {args.per_other} "
        f"(store {runs[-1][2] / 1e6:.0f} MB after forget), median of {args.repeats}"
    )
    print(f"add_many of the user (precomputed vectors): {write_s:.2f} s")
    print(f"forget of the user:                         {forget_s:.2f} s")
    print(f"delete of one of its records (not gated):   {statistics.median(r[3] for r in runs):.2f} s")
    return gate("forget_cost_ratio", ratio, TARGET_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
