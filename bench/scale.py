"""How cost grows with the store: one user from 1k to 200k records, 10 to 10,000 users, both backends.

Two curves per backend, each built up step by step in one store (the embedded one, SQLite + Chroma,
and PostgreSQL + pgvector alone, on the dev extra's ``pgserver``), each backend in a process of its
own, so its memory figures are its own:

1. **One big user** (``--sizes``, records): at each size, ``add_many``'s throughput growing to it;
   the store's open and the user's first (cold) search after it; search p50 / p95 with no method
   (the default), ``dense`` and ``dense`` filtered to ~10 % of the records (``category``), and
   whether the filtered search fills k; ``context`` and single ``add`` (encoding included) p50; one
   ``delete``; recall@10 of the store's nearest-vector read against an exact scan of the same
   vectors (approximate indexes take over above the exact-copy limit); the process's resident
   memory (peak) and the disk bytes per record.
2. **Many users** of ``--per-user`` records (``--users``): store open, the store's first search
   (which builds the pipeline), a cold user's first search (the median of 20 users not searched
   yet) against a warm user's p50, the resident memory after touching ``--touch`` users, disk per
   record, one ``forget``.

Records are real text: the turns of LoCoMo (``--data``), each repeated with a numbered variation,
its vector the turn's vector plus a little noise (so duplicates do not collapse); the turns are
encoded once and the vectors cached under ``--cache``, so a rerun encodes nothing. Queries are
LoCoMo's questions. Every ratio is between points of one run.

Targets (issue 60): at 50k vs 1k records search p50 <= 2.5x, single add <= 1.5x, filtered search
fills k, peak RSS <= 1.5 GB; at 200k search p50 <= 4x and recall@10 >= 0.98; at 10,000 users open
<= 1 s and a cold user's first search <= 3x a warm one; every method answers at every size. The
verdict line counts the targets missed among the points run (a point not run is reported, not
counted). Each backend's curves are kept in ``--out`` when done, so a rerun with the same arguments
starts at the first backend not finished (a backend's curve takes up to an hour at the full sizes).

    python bench/scale.py [--backend embedded,postgres] [--sizes 1000,10000,50000,200000]
        [--users 10,100,1000,10000] [--out runs/scale]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import resource
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from _common import Pool, load_pool, log
from harness import arguments, gate

from personamem import PersonaMem, Record
from personamem.encoder import Encoder, default_encoder
from personamem.store.pgvectors import PgVectorIndex
from personamem.store.read import NOW

USER = "big"
BATCH = 5_000
QUERIES_TIMED = 30
COLD_USERS = 20


def p(seconds: list[float], q: float) -> float:
    return float(np.percentile(seconds, q)) * 1000


def timed(call: Callable[[int], Any], n: int, warmup: int = 3) -> list[float]:
    for i in range(warmup):
        call(i)
    spent = []
    for i in range(n):
        start = time.perf_counter()
        call(warmup + i)
        spent.append(time.perf_counter() - start)
    return spent


def folder_bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


class Backend:
    """How to open one of the bench's stores, and how many bytes of disk it takes."""

    def __init__(self, name: str, folder: Path, sql_url: str | None, encoder: Encoder) -> None:
        self.name, self.folder, self.sql_url, self.encoder = name, folder, sql_url, encoder

    def open(self) -> PersonaMem:
        if self.sql_url is None:
            return PersonaMem.open(self.folder, encoder=self.encoder)
        return PersonaMem.connect(self.sql_url, encoder=self.encoder)

    def disk_bytes(self) -> int:
        """The store folder's files; PostgreSQL's database size (``pg_database_size``)."""
        if self.sql_url is None:
            return folder_bytes(self.folder)
        from sqlalchemy import create_engine, text

        engine = create_engine(self.sql_url)
        try:
            with engine.connect() as connection:
                return int(
                    connection.execute(text("SELECT pg_database_size(current_database())")).scalar_one()
                )
        finally:
            engine.dispose()


def recall_at_10(mem: PersonaMem, user: str, pool: Pool) -> float:
    """Mean overlap of the store's 10 nearest records with an exact scan of all the user's vectors.

    20 LoCoMo questions; the exact scan reads every vector of the user (itself a read of many ids).
    """
    records, matrix = mem.store.vectors(user)
    found = []
    for query in mem.store.encoder.encode(pool.queries[:20]):
        exact = {records[i].id for i in np.argsort(-(matrix @ query))[:10]}
        approx = {record.id for record, _ in mem.store.nearest(user, query, 10, NOW)}
        found.append(len(exact & approx) / 10)
    return float(np.mean(found))


def one_user(backend: Backend, pool: Pool, sizes: list[int], seed: int) -> list[dict[str, Any]]:
    """The big user's curve: grow it to each size, reopen the store, measure."""
    rng, points, have = np.random.default_rng(seed), [], 0
    for size in sizes:
        with backend.open() as mem:
            start = time.perf_counter()
            for at in range(have, size, BATCH):  # made a batch at a time: the bench's memory stays small
                records, vectors = pool.records(USER, at, min(at + BATCH, size), rng)
                mem.store.add_many(records, vectors=vectors, batch_size=BATCH)
            mem.store.flush()
            throughput = (size - have) / (time.perf_counter() - start)
            have = size
        start = time.perf_counter()
        with backend.open() as mem:
            point = {"records": size, "add_many_per_s": throughput, "open_s": time.perf_counter() - start}
            point.update(measure_user(mem, pool, size, records[-1]))
            point["disk_bytes_per_record"] = backend.disk_bytes() / max(1, mem.count())
        log(f"[{backend.name}] one user, {size} records: {json.dumps(point)}")
        points.append(point)
    return points


def measure_user(mem: PersonaMem, pool: Pool, size: int, last: Record) -> dict[str, Any]:
    """The big user's figures on a store just opened (the first search is the cold one)."""
    queries = pool.queries
    start = time.perf_counter()
    mem.search(USER, queries[0], k=10)
    point: dict[str, Any] = {"cold_s": time.perf_counter() - start, "errors": []}
    index = mem.store.index
    if isinstance(index, PgVectorIndex) and size >= index.index_at:  # the cold search started its index
        start = time.perf_counter()
        index.build_index(mem.store.names.collection(USER), mem.store.encoder.dim)
        point["index_wait_s"] = time.perf_counter() - start  # until it answers (0: built at a step before)
    ten_percent = {"category": "c3"}
    for name, call in {
        "default": lambda i: mem.search(USER, queries[i % len(queries)], k=10),
        "dense": lambda i: mem.search(USER, queries[i % len(queries)], k=10, method="dense"),
        "hybrid": lambda i: mem.search(USER, queries[i % len(queries)], k=10, method="hybrid"),
        "filtered": lambda i: mem.search(
            USER, queries[i % len(queries)], k=10, method="dense", filters=ten_percent
        ),
        "context": lambda i: mem.context(USER, queries[i % len(queries)]),
    }.items():
        try:
            spent = timed(call, QUERIES_TIMED)
        except Exception as error:  # a method that fails at this size is a finding, not a crash
            point["errors"].append(f"{name}: {type(error).__name__}: {error}"[:300])
            continue
        point[f"{name}_p50_ms"], point[f"{name}_p95_ms"] = p(spent, 50), p(spent, 95)
    point["filtered_fills_k"] = all(
        len(mem.search(USER, q, k=10, method="dense", filters=ten_percent)) == 10 for q in queries[:10]
    )
    point["add_p50_ms"] = p(timed(lambda i: mem.add(USER, f"{pool.texts[i]} (added {size}-{i})"), 10, 2), 50)
    point["recall_at_10"] = recall_at_10(mem, USER, pool)
    start = time.perf_counter()
    mem.delete(USER, [last.id])
    point["delete_s"] = time.perf_counter() - start
    mem.add(USER, last.text, id=last.id)  # back, so the next step grows the same records
    point["rss_mib"], point["peak_rss_mib"] = rss_mib(), peak_rss_mib()
    return point


def many_users(
    backend: Backend, pool: Pool, counts: list[int], per_user: int, touch: int, seed: int
) -> list[dict[str, Any]]:
    """The many-users curve: add users up to each count, reopen the store, measure."""
    rng, points, have = np.random.default_rng(seed + 1), [], 0
    for count in counts:
        with backend.open() as mem:
            start = time.perf_counter()
            for first in range(have, count, 50):
                made = [
                    pool.records(f"u{u:05d}", 0, per_user, rng) for u in range(first, min(first + 50, count))
                ]
                batch = [record for records, _ in made for record in records]
                mem.store.add_many(batch, vectors=np.concatenate([v for _, v in made]), batch_size=BATCH)
            mem.store.flush()
            throughput = (count - have) * per_user / max(1e-9, time.perf_counter() - start)
            have = count
        start = time.perf_counter()
        with backend.open() as mem:
            point = {"users": count, "records": count * per_user, "add_many_per_s": throughput}
            point["open_s"] = time.perf_counter() - start
            point.update(measure_users(mem, pool, count, per_user, touch, np.random.default_rng(seed)))
            point["disk_bytes_per_record"] = backend.disk_bytes() / max(1, count * per_user)
        log(f"[{backend.name}] {count} users: {json.dumps(point)}")
        points.append(point)
    return points


def measure_users(
    mem: PersonaMem, pool: Pool, count: int, per_user: int, touch: int, rng: np.random.Generator
) -> dict[str, Any]:
    """A store of ``count`` users just opened: cold and warm searches, memory after touching many, forget.

    The store's first search (``first_s``) builds the pipeline too; a cold user's first search
    (``cold_s``) is the median over :data:`COLD_USERS` users no search has touched yet, after it.
    """
    queries, last = pool.queries, f"u{count - 1:05d}"
    start = time.perf_counter()
    mem.search(last, queries[0], k=10)
    point: dict[str, Any] = {"first_s": time.perf_counter() - start}
    cold = []
    for u in range(min(COLD_USERS, count - 1)):
        start = time.perf_counter()
        mem.search(f"u{u:05d}", queries[u % len(queries)], k=10)
        cold.append(time.perf_counter() - start)
    point["cold_s"] = float(np.median(cold)) if cold else point["first_s"]
    point["warm_p50_ms"] = p(timed(lambda i: mem.search(last, queries[i % len(queries)], k=10), 20), 50)
    for u in rng.choice(count, size=min(touch, count), replace=False):
        mem.search(f"u{u:05d}", queries[int(u) % len(queries)], k=10)
    point["rss_mib"], point["peak_rss_mib"] = rss_mib(), peak_rss_mib()
    start = time.perf_counter()
    mem.forget(last)
    point["forget_s"] = time.perf_counter() - start
    records, vectors = pool.records(last, 0, per_user, rng)
    mem.store.add_many(records, vectors=vectors)  # back, for the next step
    return point


def misses(results: dict[str, dict[str, list[dict[str, Any]]]]) -> list[str]:
    """The issue's targets that a point run here misses (a point not run is not counted)."""
    missed = []
    for name, curves in results.items():
        by_size = {pt["records"]: pt for pt in curves["one_user"]}
        for pt in curves["one_user"]:
            if pt["errors"]:
                missed.append(f"{name}: at {pt['records']} records: {pt['errors']}")
        base, mid, top = by_size.get(1000), by_size.get(50_000), by_size.get(200_000)
        if base and mid:
            for metric, target in (("default_p50_ms", 2.5), ("dense_p50_ms", 2.5), ("add_p50_ms", 1.5)):
                if metric in mid and metric in base and mid[metric] / base[metric] > target:
                    missed.append(f"{name}: {metric} 50k/1k {mid[metric] / base[metric]:.2f} > {target}")
            if not mid["filtered_fills_k"]:
                missed.append(f"{name}: filtered search does not fill k at 50k")
            if mid["peak_rss_mib"] > 1536:
                missed.append(f"{name}: peak RSS {mid['peak_rss_mib']:.0f} MiB > 1.5 GB at 50k")
        if base and top:
            if "default_p50_ms" in top and top["default_p50_ms"] / base["default_p50_ms"] > 4:
                missed.append(
                    f"{name}: search p50 200k/1k {top['default_p50_ms'] / base['default_p50_ms']:.2f} > 4"
                )
            if top["recall_at_10"] < 0.98:
                missed.append(f"{name}: recall@10 at 200k {top['recall_at_10']:.3f} < 0.98")
        by_users = {pt["users"]: pt for pt in curves["many_users"]}
        if (last := by_users.get(10_000)) is not None:
            if last["open_s"] > 1:
                missed.append(f"{name}: open at 10,000 users {last['open_s']:.2f} s > 1 s")
            if last["cold_s"] * 1000 > 3 * last["warm_p50_ms"]:
                missed.append(f"{name}: cold first search {last['cold_s'] * 1000:.0f} ms > 3x warm")
    return missed


def plot(results: dict[str, dict[str, list[dict[str, Any]]]], out: Path) -> Path:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(11, 4))
    left, right = figure.subplots(1, 2)
    for name, curves in results.items():
        sizes = [pt["records"] for pt in curves["one_user"]]
        for metric in ("default_p50_ms", "dense_p50_ms", "filtered_p50_ms", "add_p50_ms"):
            values = [pt.get(metric, np.nan) for pt in curves["one_user"]]
            left.plot(sizes, values, marker="o", label=f"{name} {metric.removesuffix('_p50_ms')}")
        users = [pt["users"] for pt in curves["many_users"]]
        right.plot(
            users, [pt["warm_p50_ms"] for pt in curves["many_users"]], marker="o", label=f"{name} warm search"
        )
        right.plot(
            users,
            [pt["cold_s"] * 1000 for pt in curves["many_users"]],
            marker="x",
            label=f"{name} cold search",
        )
    for ax, title, xlabel in ((left, "one user", "records"), (right, "many users", "users")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("p50 ms")
        ax.legend(fontsize=7)
    path = out / "scale.png"
    figure.savefig(path, dpi=120, bbox_inches="tight")
    return path


@contextlib.contextmanager
def backend(name: str, root: Path, encoder: Encoder) -> Iterator[Backend]:
    """The store to measure; PostgreSQL from the dev extra's pgserver, started for the run."""
    if name == "embedded":
        yield Backend(name, root / name, None, encoder)
        return
    if name != "postgres":
        raise SystemExit(f"unknown backend {name!r}: embedded or postgres")
    from personamem.testing.postgres import find_postgres, postgres_cluster

    binaries = find_postgres("vector")
    if binaries is None:
        raise SystemExit('no PostgreSQL with pgvector: pip install "personamem[dev]" (pgserver)')
    with postgres_cluster(binaries) as cluster:
        yield Backend(name, root / name, cluster.create_database(), encoder)


def curves(name: str, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    """Both curves of one backend, in a process of their own (its memory is the backend's alone)."""
    encoder = default_encoder()
    pool = load_pool(args.data, args.cache, encoder)
    root = Path(tempfile.mkdtemp(prefix="personamem-scale-"))
    try:
        with backend(name, root, encoder) as measured:
            return {
                "one_user": one_user(measured, pool, args.sizes, args.seed),
                "many_users": many_users(measured, pool, args.users, args.per_user, args.touch, args.seed),
            }
    finally:
        shutil.rmtree(root, ignore_errors=True)


ONE_USER = (
    ("records", "{:,}", "records"), ("default_p50_ms", "{:.1f}", "default p50 ms"),
    ("default_p95_ms", "{:.1f}", "p95"), ("dense_p50_ms", "{:.1f}", "dense"),
    ("hybrid_p50_ms", "{:.1f}", "hybrid"), ("filtered_p50_ms", "{:.1f}", "filtered 10 %"),
    ("filtered_fills_k", "{}", "fills k"), ("context_p50_ms", "{:.1f}", "context"),
    ("add_p50_ms", "{:.1f}", "add"), ("add_many_per_s", "{:.0f}", "add_many/s"),
    ("delete_s", "{:.2f}", "delete s"), ("open_s", "{:.2f}", "open s"),
    ("cold_s", "{:.2f}", "cold search s"), ("recall_at_10", "{:.3f}", "recall@10"),
    ("peak_rss_mib", "{:.0f}", "peak RSS MiB"), ("disk_bytes_per_record", "{:.0f}", "disk B/record"),
)  # fmt: skip
MANY_USERS = (
    ("users", "{:,}", "users"), ("records", "{:,}", "records"), ("open_s", "{:.2f}", "open s"),
    ("first_s", "{:.3f}", "first search s"), ("cold_s", "{:.3f}", "cold user s"),
    ("warm_p50_ms", "{:.1f}", "warm p50 ms"), ("forget_s", "{:.2f}", "forget s"),
    ("add_many_per_s", "{:.0f}", "add_many/s"), ("rss_mib", "{:.0f}", "RSS MiB"),
    ("disk_bytes_per_record", "{:.0f}", "disk B/record"),
)  # fmt: skip


def tables(name: str, curves: dict[str, list[dict[str, Any]]], per_user: int) -> str:
    """Both curves of a backend as Markdown tables (a figure a point lacks: its method failed)."""
    lines = []
    for title, columns, points in (
        (f"{name}: one user", ONE_USER, curves["one_user"]),
        (f"{name}: users of {per_user} records", MANY_USERS, curves["many_users"]),
    ):
        lines += ["", title, "| " + " | ".join(c[2] for c in columns) + " |", "|" + "---|" * len(columns)]
        for pt in points:
            cells = [form.format(pt[key]) if key in pt else "fails" for key, form, _ in columns]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_of(args: argparse.Namespace) -> dict[str, Any]:
    """The arguments a backend's curves depend on: a checkpoint serves only a rerun with the same."""
    return {k: v for k, v in vars(args).items() if k in ("sizes", "users", "per_user", "touch", "seed")}


def checkpoint(args: argparse.Namespace, name: str) -> Path:
    """Where a backend's finished curves are kept, so a run that stops resumes at the next backend."""
    return args.out / f"scale-{name}.json"


def finished(args: argparse.Namespace, name: str) -> dict[str, list[dict[str, Any]]]:
    """The backend's curves from an earlier run with the same arguments (empty: none)."""
    kept = checkpoint(args, name)
    if not kept.exists():
        return {}
    saved = json.loads(kept.read_text())
    return saved["curves"] if saved["run"] == run_of(args) else {}


def main() -> int:
    parser = arguments(__doc__)
    ints = lambda s: [int(v) for v in s.split(",")]  # noqa: E731
    parser.add_argument("--backend", type=lambda s: s.split(","), default=["embedded", "postgres"])
    parser.add_argument("--sizes", type=ints, default=[1000, 10_000, 50_000, 200_000])
    parser.add_argument("--users", type=ints, default=[10, 100, 1000, 10_000])
    parser.add_argument("--per-user", type=int, default=100)
    parser.add_argument("--touch", type=int, default=500, help="users searched before the memory is read")
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--cache", type=Path, default=Path("runs/scale-cache"))
    parser.add_argument("--out", type=Path, default=Path("runs/scale"))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    load_pool(args.data, args.cache, default_encoder())  # encoded here once, read by each backend's process
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    spawn = multiprocessing.get_context("spawn")
    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.backend:
        results[name] = finished(args, name)
        if results[name]:
            log(f"[{name}] kept from {args.out}: a rerun with the same arguments measures it no more")
            continue
        with ProcessPoolExecutor(max_workers=1, mp_context=spawn) as child:
            results[name] = child.submit(curves, name, args).result()
        checkpoint(args, name).write_text(json.dumps({"run": run_of(args), "curves": results[name]}))
    (args.out / "scale.json").write_text(json.dumps(results, indent=1))
    print(f"plot: {plot(results, args.out)}")
    for name, measured in results.items():
        print(tables(name, measured, args.per_user))
    missed = misses(results)
    for line in missed:
        print(f"missed: {line}")
    return gate("scale_targets_missed", len(missed), 0, digits=0)


if __name__ == "__main__":
    sys.exit(main())
