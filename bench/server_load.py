"""One ``personamem serve`` worker under load, against the in-process SDK call, in one run.

A tenant's store of ``--users`` x ``--per-user`` records (1,000 x 200 by default) is built from varied
synthetic sentences; their vectors come from encoding a pool of distinct sentences once, so dense
search is meaningful without encoding 200,000 texts. Then, on the same store and the same (user,
query) pairs:

1. the SDK in this process, ``mem.search(user, query, k=5)`` and ``mem.context(user, query)``,
   alternating call by call with the same calls through ``Client`` against one server worker,
   after one warm-up pass on both sides (a user's Chroma collection is loaded on first touch);
3. ``--clients`` concurrent clients (threads, one connection each), half searches, half contexts,
   a bounded number of requests each: throughput and p50 / p99.

Reported: p50(HTTP search) / p50(SDK search), the gate (target <= 1.5); the same ratio for context;
the load figures; and the server worker's resident memory, so a deployment can size its workers.
Everything is loopback on one machine, so the clients and the worker share its cores.

    python bench/server_load.py [--users 1000] [--per-user 200] [--clients 8] [--requests 100] [--store DIR]
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from _common import QUERIES, log, realistic_text, rss_mib
from harness import arguments, gate, median_ratio, paired

from personamem import PersonaMem, Record
from personamem.client import Client
from personamem.testing.servers import personamem_server

TARGET_SEARCH_P50_RATIO = 1.5
TENANT = "bench"


def build(folder: Path, users: int, per_user: int, seed: int) -> None:
    """Fill the tenant's store once (``folder/.built`` marks a finished build)."""
    if (folder / ".built").exists():
        log(f"reusing the store in {folder}")
        return
    rng = random.Random(seed)
    with PersonaMem.open(folder) as mem:
        pool = sorted({realistic_text(rng) for _ in range(20_000)})
        log(f"encoding a pool of {len(pool)} distinct sentences")
        vectors = mem.store.encoder.encode(pool)
        store = mem.tenant(TENANT).store
        start = time.perf_counter()
        for first in range(0, users, 10):
            batch, rows = [], []
            for user in range(first, min(first + 10, users)):
                for j in range(per_user):
                    row = rng.randrange(len(pool))
                    batch.append(Record(user_id=f"user{user}", id=f"r{j}", text=pool[row]))
                    rows.append(row)
            store.add_many(batch, vectors=vectors[rows], batch_size=len(batch))
            if first % 100 == 0:
                log(f"  {first + 10} users in {time.perf_counter() - start:.0f} s")
    (folder / ".built").touch()


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1000


def load(
    url: str, key: str, pairs: list[tuple[str, str]], clients: int, requests: int
) -> tuple[float, list[float]]:
    """``clients`` threads, ``requests`` calls each; returns (seconds for all, latencies)."""
    latencies: list[float] = []
    lock = threading.Lock()

    def worker(index: int) -> None:
        rng = random.Random(index)
        mine = []
        with Client(url, key, timeout=120) as client:
            for i in range(requests):
                user, query = rng.choice(pairs)
                start = time.perf_counter()
                if i % 2:
                    client.search(user, query, k=5)
                else:
                    client.context(user, query)
                mine.append(time.perf_counter() - start)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, latencies


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--per-user", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=100, help="per client")
    parser.add_argument("--pairs", type=int, default=200, help="(user, query) pairs timed one by one")
    parser.add_argument("--store", type=Path, default=None, help="reuse a store built by an earlier run")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    folder = args.store or Path(tempfile.mkdtemp(prefix="personamem-load-"))
    build(folder, args.users, args.per_user, args.seed)
    rng = random.Random(args.seed + 1)
    pairs = [(f"user{rng.randrange(args.users)}", rng.choice(QUERIES)) for _ in range(args.pairs)]

    with PersonaMem.open(folder) as mem, personamem_server(folder) as url:
        tenant = mem.tenant(TENANT)
        key, _ = mem.store.keys.create(TENANT, label="bench")
        port = int(url.rsplit(":", 1)[1])
        with Client(url, key, timeout=120) as client:
            fresh = rss_mib(port)
            log(f"warming both sides on {len(pairs)} pairs (a user's collection loads on first touch)")
            for user, query in pairs:
                tenant.search(user, query, k=5), client.search(user, query, k=5)
                tenant.context(user, query), client.context(user, query)
            warm = rss_mib(port)
            spent = paired(
                {
                    "http search": lambda i: client.search(*pairs[i], k=5),
                    "sdk search": lambda i: tenant.search(*pairs[i], k=5),
                    "http context": lambda i: client.context(*pairs[i]),
                    "sdk context": lambda i: tenant.context(*pairs[i]),
                },
                len(pairs),
                warmup=0,  # warmed up above, with the memory read before and after
            )
        seconds, latencies = load(url, key, pairs, args.clients, args.requests)
        loaded = rss_mib(port)

    sdk_search, http_search = spent["sdk search"], spent["http search"]
    sdk_context, http_context = spent["sdk context"], spent["http context"]
    search_ratio = median_ratio(http_search, sdk_search)
    context_ratio = median_ratio(http_context, sdk_context)
    total = args.users * args.per_user
    print(f"store: {args.users} users x {args.per_user} records = {total} records, in {folder}")
    for name, sdk, http, ratio in (
        ("search ", sdk_search, http_search, search_ratio),
        ("context", sdk_context, http_context, context_ratio),
    ):
        print(f"{name} p50: SDK {p(sdk, 50):.1f} ms, HTTP {p(http, 50):.1f} ms (ratio {ratio:.2f})")
    print(
        f"{args.clients} clients x {args.requests} requests (half search, half context): "
        f"{len(latencies) / seconds:.1f} req/s, p50 {p(latencies, 50):.1f} ms, p99 {p(latencies, 99):.1f} ms"
    )
    print(
        f"server worker resident memory: {fresh:.0f} MiB at start, {warm:.0f} MiB with {len(set(pairs))} "
        f"users' collections loaded, {loaded:.0f} MiB after the load"
    )
    return gate("server_search_overhead_p50", search_ratio, TARGET_SEARCH_P50_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
