"""The expiry sweep against deleting the same records by id, on two identical stores, in one run.

Both stores hold ``--users`` x ``--per-user`` records (100,000 by default; random unit vectors, so
building them needs no encoder) of which ``--expired`` per user carry an expiry. In store A that
expiry is far off and the records are deleted by id (``mem.delete(user, ids)`` per user, what an
application without expiry would do); in store B it has passed and ``mem.purge()`` finds and erases
them. Both erase the same way (rows, vectors rebuilt, files vacuumed), so the sweep's own cost is
finding the records.

Gate: purge seconds / delete-by-id seconds <= 2.0. The last stdout line is
``expiry_sweep_ratio: R (target <= 2)`` and the exit status is 1 when the target is missed.

    python bench/expiry_sweep.py [--users 20] [--per-user 5000] [--expired 500]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from _common import log, realistic_text
from harness import arguments, gate

TARGET_RATIO = 2.0


def build(root: Path, args: argparse.Namespace, expires: datetime) -> dict[str, list[str]]:
    """A store of the bench's shape; the ids that carry ``expires``, by user."""
    from personamem import PersonaMem
    from personamem.records import Record

    rng = random.Random(args.seed)
    vectors_rng = np.random.default_rng(args.seed)
    expiring: dict[str, list[str]] = {}
    with PersonaMem.open(root) as mem:
        dim = mem.store.encoder.dim
        for u in range(args.users):
            user = f"user-{u:03d}"
            records = [
                Record(
                    user_id=user,
                    id=f"r{i}",
                    text=realistic_text(rng),
                    expires_at=expires if i < args.expired else None,
                )
                for i in range(args.per_user)
            ]
            vectors = vectors_rng.standard_normal((len(records), dim)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            mem.store.add_many(records, vectors=vectors)
            expiring[user] = [r.id for r in records[: args.expired]]
    return expiring


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--per-user", type=int, default=5000)
    parser.add_argument("--expired", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ["PERSONAMEM_SWEEP_S"] = "0"  # no background sweep: the bench times purge() itself
    from personamem import PersonaMem

    root = Path(tempfile.mkdtemp(prefix="personamem-bench-expiry-"))
    try:
        total = args.users * args.per_user
        log(f"[setup] two stores of {total} records, {args.users * args.expired} of them to erase")
        by_id = build(root / "by-id", args, datetime(2100, 1, 1, tzinfo=UTC))
        expires = datetime.now(UTC) + timedelta(seconds=5)
        build(root / "sweep", args, expires)
        time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds() + 0.1))  # let it pass
        with PersonaMem.open(root / "by-id") as mem:
            start = time.perf_counter()
            deleted = sum(len(mem.delete(user, ids)) for user, ids in by_id.items())
            delete_s = time.perf_counter() - start
        with PersonaMem.open(root / "sweep") as mem:
            start = time.perf_counter()
            purged = mem.purge()
            purge_s = time.perf_counter() - start
            left = mem.count()
        if deleted != purged or left != total - purged:
            raise SystemExit(f"deleted {deleted}, purged {purged}, {left} left of {total}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{purged} expired records among {total}, {args.users} users")
    print(f"delete by id {delete_s:7.2f} s")
    print(f"purge()      {purge_s:7.2f} s")
    return gate("expiry_sweep_ratio", purge_s / delete_s, TARGET_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
