"""What the near-duplicate check costs ``add``: one record with the check against one without, in one run.

``add`` compares the new record's vector with the user's current records (one exact nearest-neighbour
lookup over this process's view) before staging it. Each user starts with ``--history`` records, as
a chat user a few weeks in would; each iteration lets the indexer finish the previous record
(untimed), then times, in alternating order, ``mem.add(user, text)`` with the check on (the
default: threshold 0.95, policy ``keep``) and with it off (``duplicate_threshold=2.0``) on two
fresh texts; the gate is the median of the paired ratios.

Gate: median check / no check <= 1.10. The last stdout line is
``near_duplicate_add_ratio: R (target <= 1.1)`` and the exit status is 1 when the target is missed.

    python bench/near_duplicate_add.py [--records 300] [--users 10] [--history 500]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from _common import log, realistic_text
from harness import arguments, gate, paired

TARGET_RATIO = 1.10
OFF = 2.0  # a cosine never reaches it: the check is skipped


def run(args: argparse.Namespace, root: Path) -> float:
    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    encoder = default_encoder()
    rng = random.Random(args.seed)
    users = [f"user{u}" for u in range(args.users)]
    with PersonaMem.open(root, encoder=encoder) as mem:
        log(f"[setup] {args.users} users x {args.history} records of history")
        for user in users:
            mem.add_many([realistic_text(rng) for _ in range(args.history)], user_id=user)
        texts = [f"turn {i}: {realistic_text(rng)}" for i in range(2 * args.records)]
        encoder.encode(texts[:32])
        for user in users:
            mem.search(user, "warm up this user's view", k=1)
        duplicates: list[bool] = []
        spent = paired(
            {
                "check": lambda i: mem.add(users[i % args.users], texts[2 * i]),
                "no check": lambda i: mem.add(
                    users[i % args.users], texts[2 * i + 1], duplicate_threshold=OFF
                ),
            },
            args.records,
            warmup=0,
            between=lambda i: mem.store.flush(),  # the previous record is indexed between turns, untimed
            check=lambda i, added: duplicates.append(added["check"].duplicate_of is not None),
        )
        if not mem.store.check().ok:
            raise SystemExit("store inconsistent after the run")
    checked, unchecked = spent["check"], spent["no check"]
    ratios = [c / u for c, u in zip(checked, unchecked, strict=True)]
    ratio = statistics.median(ratios)
    print(f"{args.records} paired single adds, {args.users} users with {args.history} records each")
    print(f"add, check off       median {statistics.median(unchecked) * 1e3:6.2f} ms")
    print(
        f"add, check on (keep) median {statistics.median(checked) * 1e3:6.2f} ms "
        f"({sum(duplicates)} near-duplicates)"
    )
    print(f"paired ratio median {ratio:.3f} (p90 {statistics.quantiles(ratios, n=10)[-1]:.3f})")
    return ratio


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--history", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-dup-"))
    try:
        ratio = run(args, root / "store")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return gate("near_duplicate_add_ratio", ratio, TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main())
