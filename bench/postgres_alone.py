"""PostgreSQL alone (pgvector) against the embedded store (SQLite + embedded Chroma), in one run.

``PersonaMem.connect("postgresql+psycopg://...")`` with no Chroma argument keeps the vectors in the
same database (``personamem/store/pgvectors.py``): an ``add`` commits row and vector in one
transaction, where the embedded store commits the row pending and indexes it in the background.
Searches score a user from this process's copy of its vectors either way (``store/views.py``), so
what PostgreSQL adds is the round trips to a server instead of a file.

1. In process, one encoder object for both stores and the same records: ``--users`` × ``--per-user``
   realistic records, bulk-loaded into each with the same precomputed vectors
   (``Store.add_many(records, vectors=...)``), into a throwaway PostgreSQL cluster with pgvector and
   a temporary folder. After warm-up (a few searches per user, each method, each store):

   - search: ``--searches`` (user, query) pairs, ``mem.search(user, query, k=10)`` with the default
     method on each store, alternating which goes first; p50 of each and the ratio of the p50s
     (gated). The same for ``method="dense"`` (reported, not gated).
   - single add: ``--adds`` iterations, each a fresh realistic text per store (the same text but for
     a two-letter tag, so the same length), ``mem.add(user, text)`` on each in alternating order;
     between iterations (untimed) both stores are flushed, so the embedded store's background
     indexer has finished the previous record, as between the turns of a chat
     (``bench/single_add.py``). The gate is the median of the paired ratios pg / embedded.

2. Scale-out (reported, not gated; ``--no-scaleout`` skips it): two ``personamem serve`` processes
   on one PostgreSQL database alone, two ingest clients (threads, one per server, each adding its own
   ``--scale-users`` × ``--scale-per-user`` records in ``add_many`` batches of ``--batch``) and a
   third client searching through the first server the whole time. Reported: records/s (records /
   ingest wall time) and the p50 of the searches meanwhile. Then the same shape on the embedded
   store: two servers over one local folder (SQLite + embedded Chroma). Afterwards every record
   must be there exactly once, and the store consistent; exit 1 otherwise.

Gates (issue: "Postgres + pgvector search p50 <= 1.5x the embedded store's on the same records,
single add <= 1.2x"). The last two stdout lines are
``pgvector_add_ratio: R (target <= 1.2)`` and ``pgvector_search_p50_ratio: R (target <= 1.5)``; the
exit status is 1 when a target is missed. Needs PostgreSQL with pgvector: the ``pgserver`` wheel of
the dev extra ships both (``pip install "personamem[dev]"``).

    python bench/postgres_alone.py [--users 20] [--per-user 200] [--searches 200] [--adds 150]
        [--scale-users 6] [--scale-per-user 100] [--batch 25] [--no-scaleout]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import QUERIES, ingest_through, log, realistic_text
from harness import arguments, gate, median_ratio, paired

ADD_TARGET = 1.2
SEARCH_TARGET = 1.5
TENANT = "bench"


def p(values: list[float], q: int) -> float:
    """The ``q``-th percentile of ``values`` (seconds), in ms; NaN for none."""
    if not values:
        return float("nan")
    if q == 50 or len(values) < 2:
        return statistics.median(values) * 1e3
    return statistics.quantiles(values, n=100)[q - 1] * 1e3


# -- 1. in process ----------------------------------------------------------------------------


def load(mem: Any, records: list[Any], vectors: Any, label: str) -> None:
    """Bulk-load ``records`` with their precomputed ``vectors`` (no encoder call)."""
    start = time.perf_counter()
    mem.store.add_many(records, vectors=vectors, batch_size=1000)
    log(f"[setup] {label}: {len(records)} records bulk-loaded in {time.perf_counter() - start:.1f} s")


def in_process(args: argparse.Namespace, root: Path, sql_url: str) -> tuple[float, float, list[str]]:
    """Search and single-add timings of both stores; (add ratio, search p50 ratio, summary lines)."""
    from personamem import PersonaMem
    from personamem.encoder import default_encoder
    from personamem.records import Record
    from personamem.store.pgvectors import PgVectorIndex

    log("[setup] loading encoder")
    encoder = default_encoder()
    rng = random.Random(args.seed)
    users = [f"user-{u:03d}" for u in range(args.users)]
    records = [
        Record(user_id=user, id=f"r{j:04d}", text=realistic_text(rng))
        for user in users
        for j in range(args.per_user)
    ]
    start = time.perf_counter()
    vectors = encoder.encode([r.text for r in records])
    log(f"[setup] encoded {len(records)} texts once for both stores in {time.perf_counter() - start:.1f} s")
    lines: list[str] = []
    with (
        PersonaMem.open(root / "embedded", encoder=encoder) as embedded,
        PersonaMem.connect(sql_url, encoder=encoder) as pg,
    ):
        if not isinstance(pg.store.index, PgVectorIndex):
            raise SystemExit(
                f"the PostgreSQL store does not keep its vectors with pgvector: {pg.store.index!r}"
            )
        stores = {"embedded": embedded, "pgvector": pg}
        load(embedded, records, vectors, "embedded (SQLite + embedded Chroma)")
        load(pg, records, vectors, "PostgreSQL + pgvector")
        embedded.store.flush()
        for name, mem in stores.items():
            if mem.count() != len(records):
                raise SystemExit(f"{name}: {mem.count()} records stored, {len(records)} added")

        log(f"[warm-up] {args.warmup} searches per user, each method, each store")
        for user in users:
            for j in range(args.warmup):
                for mem in stores.values():
                    mem.search(user, QUERIES[j % len(QUERIES)], k=10)
                    mem.search(user, QUERIES[j % len(QUERIES)], k=10, method="dense")

        search_ratio = float("nan")
        for method in (None, "dense"):
            label = method or "default"
            log(f"[search] {args.searches} paired searches, method {label}")

            def search(mem: Any, i: int, method: str | None = method) -> None:
                hits = mem.search(
                    users[i % len(users)], QUERIES[(i // len(users)) % len(QUERIES)], k=10, method=method
                )
                if len(hits) != 10:
                    raise SystemExit(f"a search returned {len(hits)} hits, not 10")

            spent = paired(
                {name: lambda i, mem=mem: search(mem, i) for name, mem in stores.items()},
                args.searches,
                warmup=0,  # warmed up above, every user
            )
            ratio = median_ratio(spent["pgvector"], spent["embedded"])
            each = [a / b for a, b in zip(spent["pgvector"], spent["embedded"], strict=True)]
            lines.append(
                f"search ({label:7}) p50 embedded {p(spent['embedded'], 50):6.2f} ms, pgvector "
                f"{p(spent['pgvector'], 50):6.2f} ms; p95 {p(spent['embedded'], 95):6.2f} / "
                f"{p(spent['pgvector'], 95):6.2f} ms; p50 ratio {ratio:.2f} (paired median "
                f"{statistics.median(each):.2f}){'' if method is None else ', not gated'}"
            )
            log(lines[-1])
            if method is None:
                search_ratio = ratio

        log(f"[add] {args.adds} paired single adds (flushed between iterations, untimed)")
        texts = [realistic_text(rng) for _ in range(args.adds)]

        def add(mem: Any, i: int) -> None:
            tag = "pg" if mem is pg else "em"  # the same length on both stores, never the same text
            mem.add(users[i % len(users)], f"turn {i} {tag}: {texts[i]}")

        def flush() -> None:
            embedded.store.flush()
            pg.store.flush()

        spent = paired(
            {name: lambda i, mem=mem: add(mem, i) for name, mem in stores.items()},
            args.adds,
            warmup=0,  # a warm-up would add records
            between=lambda i: flush(),
        )
        flush()
        ratios = [a / b for a, b in zip(spent["pgvector"], spent["embedded"], strict=True)]
        add_ratio = statistics.median(ratios)
        lines.append(
            f"single add: median embedded {p(spent['embedded'], 50):6.2f} ms, pgvector "
            f"{p(spent['pgvector'], 50):6.2f} ms; paired ratio median {add_ratio:.2f} "
            f"(p90 {statistics.quantiles(ratios, n=10)[-1]:.2f})"
        )
        log(lines[-1])
        for name, mem in stores.items():
            expected = len(records) + args.adds
            if mem.count() != expected or not mem.store.check().ok:
                raise SystemExit(
                    f"{name}: store inconsistent after the run ({mem.count()} of {expected} records)"
                )
    return add_ratio, search_ratio, lines


# -- 2. scale-out -----------------------------------------------------------------------------


@dataclass
class ScaleOut:
    shape: str
    records: int
    seconds: float
    searches: list[float]
    errors: list[str]
    lost: int = 0
    duplicated: int = 0
    consistent: bool = False

    @property
    def ok(self) -> bool:
        return not self.errors and self.lost == 0 and self.duplicated == 0 and self.consistent

    def row(self) -> str:
        n = len(self.searches)
        return (
            f"{self.shape:34} {self.records / self.seconds:7.1f} records/s ({self.records} in "
            f"{self.seconds:5.1f} s); search p50 {p(self.searches, 50):6.1f} ms, p95 "
            f"{p(self.searches, 95):6.1f} ms ({n} searches); lost {self.lost}, duplicated "
            f"{self.duplicated}, consistent {self.consistent}"
        )


def plan(worker: int, args: argparse.Namespace) -> list[dict[str, str]]:
    """One ingest client's records: its own users'."""
    rng = random.Random(args.seed + 100 + worker)
    return [
        {"user_id": f"w{worker}-u{u}", "id": f"r{j:04d}", "text": realistic_text(rng)}
        for u in range(args.scale_users)
        for j in range(args.scale_per_user)
    ]


def drive(shape: str, urls: tuple[str, str], key: str, args: argparse.Namespace) -> ScaleOut:
    """Two ingest clients (one per server) and a searching client on the first server; then count."""
    from personamem.client import Client

    plans = [plan(w, args) for w in (1, 2)]
    for url in urls:  # load each server's encoder before the clock starts
        with Client(url, key, timeout=120) as client:
            client.search("nobody", "warm up")
    done = threading.Event()
    latencies: list[float] = []
    errors: list[str] = []

    def search() -> None:
        rng = random.Random(args.seed)
        users = sorted({r["user_id"] for records in plans for r in records})
        try:
            with Client(urls[0], key, timeout=300) as client:
                while not done.is_set():
                    start = time.perf_counter()
                    client.search(rng.choice(users), rng.choice(QUERIES), k=10)
                    latencies.append(time.perf_counter() - start)
        except Exception as error:
            errors.append(f"search via {urls[0]}: {error!r}")

    log(f"[scale-out] {shape}: 2 x {len(plans[0])} records in batches of {args.batch}, searching meanwhile")
    threads = [
        threading.Thread(target=ingest_through, args=(url, key, records, args.batch, errors))
        for url, records in zip(urls, plans, strict=True)
    ]
    searcher = threading.Thread(target=search)
    start = time.perf_counter()
    searcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    done.set()
    searcher.join()
    result = ScaleOut(shape, sum(len(records) for records in plans), seconds, latencies, errors)
    expected: dict[str, int] = {}
    for records in plans:
        for r in records:
            expected[r["user_id"]] = expected.get(r["user_id"], 0) + 1
    for url in urls:  # both servers must see every record, once
        with Client(url, key, timeout=120) as client:
            counts = {user: client.count(user) for user in expected}
            total = client.count()
        result.lost += sum(max(expected[u] - counts[u], 0) for u in expected)
        result.duplicated += max(total - sum(counts.values()), 0) + sum(
            max(counts[u] - expected[u], 0) for u in expected
        )
    return result


def scale_out(args: argparse.Namespace, root: Path, cluster: Any) -> list[ScaleOut]:
    from personamem import PersonaMem
    from personamem.store.pgvectors import PgVectorIndex
    from personamem.testing.servers import personamem_server

    results = []
    sql_url = cluster.create_database()
    with PersonaMem.connect(sql_url) as admin:
        key, _ = admin.store.keys.create(TENANT)
    log("[scale-out] starting two servers on one PostgreSQL database (pgvector, no Chroma)")
    with (
        personamem_server(root / "pg-a", "--sql-url", sql_url) as first,
        personamem_server(root / "pg-b", "--sql-url", sql_url) as second,
    ):
        result = drive("PostgreSQL + pgvector, 2 servers", (first, second), key, args)
    with PersonaMem.connect(sql_url) as admin:
        result.consistent = admin.store.check().ok and isinstance(admin.store.index, PgVectorIndex)
    log(f"[scale-out] {result.row()}")
    results.append(result)

    folder = root / "shared-store"
    with PersonaMem.open(folder) as admin:
        key, _ = admin.store.keys.create(TENANT)
    log("[scale-out] starting two servers over one local folder (SQLite + embedded Chroma)")
    with (
        personamem_server(root / "em-a", "--store", str(folder)) as first,
        personamem_server(root / "em-b", "--store", str(folder)) as second,
    ):
        result = drive("SQLite + embedded Chroma, 2 servers", (first, second), key, args)
    with PersonaMem.open(folder) as admin:
        deadline = time.monotonic() + 30
        while not (consistent := admin.store.check().ok) and time.monotonic() < deadline:
            time.sleep(0.5)
        result.consistent = consistent
    log(f"[scale-out] {result.row()}")
    results.append(result)
    return results


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--per-user", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=3, help="searches per user and method before timing")
    parser.add_argument("--searches", type=int, default=200, help="paired searches per method")
    parser.add_argument("--adds", type=int, default=150, help="paired single adds")
    parser.add_argument("--scale-users", type=int, default=6, help="users per ingest client (scale-out)")
    parser.add_argument("--scale-per-user", type=int, default=100)
    parser.add_argument("--batch", type=int, default=25, help="records per add_many request (scale-out)")
    parser.add_argument("--no-scaleout", action="store_true", help="skip the two-server part")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from personamem.testing.postgres import find_postgres, postgres_cluster

    binaries = find_postgres("vector")
    if binaries is None:
        log(
            "no PostgreSQL with pgvector found: put initdb/pg_ctl of an installation with the vector "
            'extension on PATH, or pip install "personamem[dev]" (its pgserver wheel ships both)'
        )
        return 1
    log(f"[setup] PostgreSQL from {binaries.source} ({binaries.folder})")
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-pgvector-"))
    try:
        with postgres_cluster(binaries) as cluster:
            add_ratio, search_ratio, lines = in_process(args, root, cluster.create_database())
            scaled = [] if args.no_scaleout else scale_out(args, root, cluster)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"{args.users} users x {args.per_user} records in each store, one encoder, one run")
    for line in lines:
        print(line)
    if scaled:
        print("scale-out (not gated): 2 ingest clients + 1 searching client")
        for result in scaled:
            print(f"  {result.row()}")
            for error in result.errors:
                print(f"  error: {error}")
    failed = [r.shape for r in scaled if not r.ok]
    if failed:
        log(f"scale-out lost, duplicated or failed records: {', '.join(failed)}")
    return max(
        gate("pgvector_add_ratio", add_ratio, ADD_TARGET, digits=2),
        gate("pgvector_search_p50_ratio", search_ratio, SEARCH_TARGET, digits=2),
        int(bool(failed)),
    )


if __name__ == "__main__":
    sys.exit(main())
