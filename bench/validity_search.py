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
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _common import QUERIES, log, median_ratio, realistic_text

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
            for user in ("plain", "bounded"):
                mem.search(user, "warm up", k=10, method=method)
            spent: dict[str, list[float]] = {"plain": [], "bounded": []}
            for i in range(args.iters):
                query = QUERIES[i % len(QUERIES)]
                for user in ("plain", "bounded") if i % 2 == 0 else ("bounded", "plain"):
                    start = time.perf_counter()
                    hits = mem.search(user, query, k=10, method=method)
                    spent[user].append(time.perf_counter() - start)
                    if user == "bounded" and any(h.record.id.startswith("old") for h in hits):
                        raise SystemExit(f"{method}: a superseded record was returned")
            ratios[method] = median_ratio(spent["bounded"], spent["plain"])
            p50 = sorted(spent["plain"])[len(spent["plain"]) // 2] * 1e3
            print(f"{method:6s} plain p50 {p50:6.2f} ms, bounded/plain p50 ratio {ratios[method]:.3f}")
    return ratios


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
    worst = max(ratios[m] for m in GATED)
    print(f"validity_search_p50_ratio: {worst:.3f} (target <= {TARGET_RATIO})")
    return 0 if worst <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
