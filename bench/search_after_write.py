"""A chat's pattern, a turn added and then the user's memory searched: that search against a warm one.

Every per-user cache (the BM25 index, the ranker's signals) is valid for one revision of the user, and
every write makes a new one, so the first search after an ``add`` builds them again from all of the
user's records. A warm search (``bench/scale.py``'s figures) never sees that cost; an agent that adds
each turn and then searches pays it on every search.

For each ``--sizes`` (one user of that many LoCoMo turns, varied as ``scale.py`` varies them, in a fresh
embedded store, vectors looked up), ``--iters`` rounds of: ``mem.add`` of a new turn and a wait for the
indexer (``mem.store.flush()``; untimed), a search (timed: after a write), a second search with another
question (timed: warm); then three rounds of an ``update`` of one of those turns and a search (timed:
after an edit, which builds the user's caches again; reported, not gated). Per method
(``--methods``, the default first): p50 of each and the ratio of the first two.
Without the wait the indexer's own revision (the add's vector marked indexed) lands between the two
searches, and the warm one builds everything again too.

Target (this bench's, for the fix it measures): at 5,000 records the default's search after a write
<= 2x its warm search, the cost of a write to the next search at most a warm search's again. The last
stdout line is ``search_after_write_ratio_5000: R (target <= 2)``; the exit status is 1 when it is
missed. Measured first at stop 76 (2026-11-30), before any fix: see ``bench/README.md``.

    python bench/search_after_write.py [--sizes 1000,5000,20000] [--iters 8] [--methods default,hybrid,dense]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import Pool, load_pool, log
from harness import arguments, gate

from personamem import PersonaMem
from personamem.encoder import Encoder, default_encoder

TARGET = 2.0
GATED = 5000  # the size the verdict reads
EDITS = 3  # edits timed per method and size (each rebuilds the user's caches: seconds at 20,000)
USER = "chat"


def measure(
    folder: Path, pool: Pool, encoder: Encoder, size: int, methods: list[str], iters: int
) -> dict[str, tuple[float, float, float]]:
    """Per method: p50 ms of a search after an add, of a warm search and after an edit (``size`` turns).

    ``encoder`` is the one the pool's vectors came from.
    """
    rng = np.random.default_rng(size)
    found: dict[str, tuple[float, float, float]] = {}
    with PersonaMem.open(folder, encoder=encoder) as mem:
        for start in range(0, size, 2000):
            records, vectors = pool.records(USER, start, min(start + 2000, size), rng)
            mem.store.add_many(records, vectors=vectors)
        mem.store.flush()
        questions = pool.queries
        for method in methods:
            mem.search(USER, questions[0], k=10, method=method)  # built once before timing
            after, warm, edited, turns = [], [], [], []
            for i in range(iters):
                turns.append(mem.add(USER, f"{pool.texts[i]} (said again at turn {size + i}, {method})"))
                mem.store.flush()  # the indexer's revision lands before the timed searches
                began = time.perf_counter()
                mem.search(USER, questions[2 * i + 1], k=10, method=method)
                after.append(time.perf_counter() - began)
                began = time.perf_counter()
                mem.search(USER, questions[2 * i + 2], k=10, method=method)
                warm.append(time.perf_counter() - began)
            for record in turns[:EDITS]:  # after the appends: an edit is not an append, and rebuilds
                mem.update(USER, record.id, text=f"{record.text} (corrected)")
                mem.store.flush()
                began = time.perf_counter()
                mem.search(USER, questions[0], k=10, method=method)
                edited.append(time.perf_counter() - began)
            found[method] = (
                statistics.median(after) * 1000,
                statistics.median(warm) * 1000,
                statistics.median(edited) * 1000,
            )
            added, kept, rebuilt = found[method]
            log(
                f"[{size:,}] {method}: after an add {added:.1f} ms, warm {kept:.1f} ms, edit {rebuilt:.1f} ms"
            )
    return found


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--sizes", default="1000,5000,20000", help="records of the user, comma-separated")
    parser.add_argument("--iters", type=int, default=8)
    parser.add_argument("--methods", default="default,hybrid,dense")
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--cache", type=Path, default=Path("runs/scale-cache"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    methods = args.methods.split(",")
    encoder = default_encoder()
    pool = load_pool(args.data, args.cache, encoder)
    rows: dict[int, dict[str, tuple[float, float, float]]] = {}
    for size in sizes:
        folder = Path(tempfile.mkdtemp(prefix="personamem-bench-after-write-"))
        try:
            rows[size] = measure(folder, pool, encoder, size, methods, args.iters)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    header = ("records", "method", "after an add ms", "warm ms", "ratio", "after an edit ms")
    print("{:>8} {:<8} {:>16} {:>9} {:>7} {:>17}".format(*header))
    for size, found in rows.items():
        for method, (after, warm, edited) in found.items():
            print(f"{size:>8,} {method:<8} {after:>16.1f} {warm:>9.1f} {after / warm:>7.1f} {edited:>17.1f}")
    if GATED not in rows or "default" not in rows[GATED]:
        print(f"the verdict reads the default at {GATED:,} records: include both", file=sys.stderr)
        return 2
    after, warm, _ = rows[GATED]["default"]
    return gate(f"search_after_write_ratio_{GATED}", after / warm, TARGET, digits=1)


if __name__ == "__main__":
    sys.exit(main())
