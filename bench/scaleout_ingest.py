"""Two ``personamem serve`` workers ingesting into one PostgreSQL + Chroma server while a client searches.

The scale-out shape of docs/DEPLOY.md on one machine: a throwaway PostgreSQL cluster (records), a
``chroma run`` server (vectors) and two server workers over both. Two ingest clients, one per
worker, add ``--users`` users each plus ``--shared`` users that both add with the same record ids
(the same record through two workers must be stored once); a third client searches through the
first worker the whole time and checks that every hit is the user's own. Afterwards the store is
checked: every record there exactly once in SQL, one vector per row in Chroma.

Reported: writes per second (unique records / ingest wall time), searches served meanwhile, each
worker's resident memory (with a Chroma server a worker holds no vectors). The gate: no record
lost or duplicated, the last stdout line ``lost_or_duplicated: N (target <= 0)``; exit 1 when N > 0, a
text is wrong, a hit is another user's, a request fails or the store is inconsistent.

    python bench/scaleout_ingest.py [--users 30] [--shared 10] [--per-user 100] [--batch 50]
"""

from __future__ import annotations

import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from _common import QUERIES, ingest_through, log, realistic_text, rss_mib
from harness import arguments, gate

from personamem import PersonaMem
from personamem.client import Client
from personamem.testing.postgres import postgres_cluster
from personamem.testing.servers import chroma_server, personamem_server


def plan(worker: int, users: int, shared: int, per_user: int, seed: int) -> list[dict[str, str]]:
    """The records one ingest client adds: its own users', then the shared users' (same for both)."""
    rng, shared_rng = random.Random(seed + worker), random.Random(seed)
    own = [
        {"user_id": f"w{worker}-u{u}", "id": f"r{j}", "text": realistic_text(rng)}
        for u in range(users)
        for j in range(per_user)
    ]
    common = [
        {"user_id": f"shared-u{u}", "id": f"r{j}", "text": realistic_text(shared_rng)}
        for u in range(shared)
        for j in range(per_user)
    ]
    return own + common


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=30, help="users per ingest client")
    parser.add_argument("--shared", type=int, default=10, help="users both ingest clients add")
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--batch", type=int, default=50, help="records per batch request")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    plans = [plan(w, args.users, args.shared, args.per_user, args.seed) for w in (1, 2)]
    expected = {(r["user_id"], r["id"]): r["text"] for p in plans for r in p}

    root = Path(tempfile.mkdtemp(prefix="personamem-scaleout-"))
    with postgres_cluster() as postgres, chroma_server(root / "chroma") as chroma_url:
        sql_url = postgres.create_database("personamem")
        with PersonaMem.connect(sql_url, chroma_url=chroma_url) as admin:
            key, _ = admin.store.keys.create("load")
        options = ("--sql-url", sql_url, "--chroma-url", chroma_url)
        with (
            personamem_server(root / "w1", *options) as first,
            personamem_server(root / "w2", *options) as second,
        ):
            for url in (first, second):  # load each worker's encoder before the clock starts
                with Client(url, key, timeout=120) as client:
                    client.search("nobody", "warm up")
            done = threading.Event()
            searches, foreign, errors = [0], [0], []

            def search() -> None:
                rng = random.Random(args.seed)
                users = sorted({user for user, _ in expected})
                with Client(first, key, timeout=300) as client:
                    while not done.is_set():
                        user = rng.choice(users)
                        hits = client.search(user, rng.choice(QUERIES), k=5, method="hybrid")
                        foreign[0] += sum(hit.record.user_id != user for hit in hits)
                        searches[0] += 1

            ingesters = [
                threading.Thread(target=ingest_through, args=(url, key, records, args.batch, errors))
                for url, records in zip((first, second), plans, strict=True)
            ]
            searcher = threading.Thread(target=search)
            start = time.perf_counter()
            searcher.start()
            for thread in ingesters:
                thread.start()
            for thread in ingesters:
                thread.join()
            seconds = time.perf_counter() - start
            done.set()
            searcher.join()
            memory = [rss_mib(int(url.rsplit(":", 1)[1])) for url in (first, second)]

        with PersonaMem.connect(sql_url, chroma_url=chroma_url) as admin:
            store = admin.tenant("load")
            stored = {(r.user_id, r.id): r.text for user in store.users() for r in store.records(user)}
            rows = store.count()
            deadline = time.monotonic() + 30  # single adds are indexed behind; batches are not
            while not (consistent := admin.store.check().ok) and time.monotonic() < deadline:
                time.sleep(0.5)

    lost = len(expected.keys() - stored.keys())
    duplicated = rows - len(stored)
    wrong = sum(stored.get(key) != text for key, text in expected.items() if key in stored)
    sent = sum(len(p) for p in plans)
    log(f"errors: {errors}" if errors else "no request failed")
    print(
        f"{len(expected)} unique records ({sent} sent: shared users twice) via 2 workers in {seconds:.1f} s"
    )
    print(f"writes: {len(expected) / seconds:.0f} records/s unique, {sent / seconds:.0f} records/s sent")
    print(f"searches meanwhile: {searches[0]} ({searches[0] / seconds:.1f}/s), foreign hits: {foreign[0]}")
    print(
        f"lost {lost}, duplicated {duplicated}, wrong text {wrong}; SQL and Chroma consistent: {consistent}"
    )
    print(
        f"worker resident memory: {memory[0]:.0f} MiB, {memory[1]:.0f} MiB (vectors are in the Chroma server)"
    )
    failed = wrong + foreign[0] + len(errors) + (not consistent)  # what the gated count does not show
    return max(gate("lost_or_duplicated", lost + duplicated, 0, digits=0), int(failed > 0))


if __name__ == "__main__":
    sys.exit(main())
