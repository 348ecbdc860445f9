"""What validity filtering costs ``search``: a user whose facts changed against one whose did not, in one run.

Two users hold the same ``--records`` texts. For the *bounded* user, ``--changed`` of them were
superseded (their validity ended a year ago, and each has a replacement current since), so every
search must leave the old versions out; the *plain* user has no bounded record, which the store
learns from the row it reads anyway. Each method is timed in its own loop alternating the two users
on the same query; the ratio of the p50s is what is reported.

Gates: dense and hybrid p50 ratio (bounded / plain) <= 1.05 (BM25 reported). The last stdout line is
``validity_search_p50_ratio: R (target <= 1.05)`` (the worse of dense and hybrid), exit status 1 on a miss.

    python bench/validity_search.py [--records 1000] [--changed 100] [--iters 300]
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 1.05
GATED = ("dense", "hybrid")


def run(args: argparse.Namespace, root: Path) -> dict[str, float]:
    from personamem import PersonaMem
    from personamem.encoder import default_encoder
    from personamem.records import parse_record

    encoder = default_encoder()
    rng = random.Random(args.seed)
    texts = [f"{i}: {realistic_text(rng)}" for i in range(args.records - args.changed)]
    old = [f"old {i}: {realistic_text(rng)}" for i in range(args.changed)]
    new = [f"new {i}: {realistic_text(rng)}" for i in range(args.changed)]
    year_ago = datetime.now(UTC) - timedelta(days=365)
    vectors = encoder.encode(texts + old + new)
    with PersonaMem.open(root, encoder=encoder) as mem:
        log(f"[setup] two users x {args.records + args.changed} records, {args.changed} superseded")
        plain = [{"text": t} for t in texts + old + new]
        bounded = (
            [{"text": t} for t in texts]
            + [{"text": t, "id": f"old{i}", "valid_until": year_ago} for i, t in enumerate(old)]
            + [{"text": t, "valid_from": year_ago, "supersedes": f"old{i}"} for i, t in enumerate(new)]
        )
        for user, records in (("plain", plain), ("bounded", bounded)):
            mem.store.add_many([parse_record({"user_id": user, **r}) for r in records], vectors=vectors)
        ratios: dict[str, float] = {}
        for method in ("dense", "bm25", "hybrid"):

            def search(user: str, method: str = method) -> Callable[[int], object]:
                return lambda i: mem.search(user, QUERIES[i % len(QUERIES)], k=10, method=method)

            def check(i: int, hits: dict[str, Any], method: str = method) -> None:
                if any(h.record.id.startswith("old") for h in hits["bounded"]):
                    raise SystemExit(f"{method}: a superseded record was returned")

            spent = paired({user: search(user) for user in ("plain", "bounded")}, args.iters, check=check)
            ratios[method] = median_ratio(spent["bounded"], spent["plain"])
            p50 = sorted(spent["plain"])[len(spent["plain"]) // 2] * 1e3
            print(f"{method:6s} plain p50 {p50:6.2f} ms, bounded/plain p50 ratio {ratios[method]:.3f}")
    return ratios


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--changed", type=int, default=100)
    parser.add_argument("--iters", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-validity-"))
    try:
        ratios = run(args, root / "store")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return gate("validity_search_p50_ratio", max(ratios[m] for m in GATED), TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main())
