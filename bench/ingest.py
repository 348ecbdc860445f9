"""Ingest throughput: ``PersonaMem.add_many`` against the bare encoder on the same texts, in one run.

``--records`` short texts (1-3 sentences, seeded) for ``--users`` users are ingested into a fresh store
and, as the baseline, encoded by the encoder alone in the batch size the store uses (``encoder.encode``
on chunks of 256). Each measurement is repeated ``--repeats`` times with a fresh store each time and
the medians are compared.

Interleaving (``--interleave``): by default the baseline and the store alternate per 256-record batch
(``encoder.encode(batch)`` then ``mem.add_many(batch)``, swapping which goes first every batch), so
bursts of CPU contention from other processes hit both sides alike; ``mem.add_many(batch)`` of 256
records is exactly one of the batches a single ``mem.add_many(records)`` call would write. With
``--interleave run`` whole runs alternate instead (one encoder pass, one ``mem.add_many(records)``).

Also reported: the store's time per write phase, and re-ingesting the same records into the filled
store in one ``mem.add_many(records)`` call (the idempotent path: nothing is re-encoded).

Gate: store_rps / encoder_rps >= 0.8. The last stdout line is
``ingest_throughput_ratio: R (target >= 0.8)`` and the exit status is 1 when the target is missed.

    python bench/ingest.py [--records 2000] [--users 20] [--repeats 3] [--interleave chunk|run] [--store DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import log, realistic_text
from harness import arguments, gate, paired

TARGET_RATIO = 0.8
STORE_BATCH = 256  # Store.add_many's default batch size


def make_records(n: int, users: int, seed: int):
    """``n`` records, grouped by user (each user's history ingested together), with explicit ids."""
    from personamem.records import Record

    rng = random.Random(seed)
    per_user = [n // users + (1 if u < n % users else 0) for u in range(users)]
    return [
        Record(user_id=f"user{u:02d}", id=f"m{i:05d}", text=realistic_text(rng), kind="note")
        for u, count in enumerate(per_user)
        for i in range(count)
    ]


PHASES = ("sql stage", "encode", "chroma upsert", "  of which get/create collection", "sql mark indexed")


class _TimedEncoder:
    """Forwards to the encoder, adding the time spent in ``encode`` to ``phases``."""

    def __init__(self, encoder, phases: dict[str, float]) -> None:
        self._encoder = encoder
        self._phases = phases
        self.name = encoder.name
        self.dim = encoder.dim

    def encode(self, texts):
        start = time.perf_counter()
        try:
            return self._encoder.encode(texts)
        finally:
            self._phases["encode"] += time.perf_counter() - start


def instrument(mem, phases: dict[str, float]) -> None:
    """Time the store's write phases (wrappers on this store's instances; the library is untouched)."""

    def wrap(owner, attr: str, phase: str) -> None:
        inner = getattr(owner, attr, None)
        if inner is None:  # the library changed shape: that phase is left at 0 (counted as "other")
            return

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                phases[phase] += time.perf_counter() - start

        setattr(owner, attr, timed)

    wrap(mem.store.catalog, "stage", "sql stage")
    wrap(mem.store.index, "upsert", "chroma upsert")
    wrap(mem.store.index, "_collection", "  of which get/create collection")
    wrap(mem.store.catalog, "mark_indexed", "sql mark indexed")
    if getattr(mem.store, "_encoder", None) is not None:
        mem.store._encoder = _TimedEncoder(mem.store._encoder, phases)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_repeat(encoder, records, root: Path, rep: int, interleave: str) -> dict:
    """Encoder alone and ``add_many`` into a fresh store at ``root``, alternated; then a re-ingest."""
    from personamem import PersonaMem

    chunks = [records[i : i + STORE_BATCH] for i in range(0, len(records), STORE_BATCH)]
    phases = dict.fromkeys(PHASES, 0.0)
    enc_chunks: list[float] = []
    store_chunks: list[float] = []
    with PersonaMem.open(root, encoder=encoder) as mem:
        instrument(mem, phases)

        def run_encoder() -> None:
            for chunk in chunks:
                enc_chunks.append(timed(lambda c=chunk: encoder.encode([r.text for r in c])))

        if interleave == "chunk":
            # alternate at batch granularity: bursts of CPU contention (seconds long) hit both sides
            sides = {
                "encoder": lambda c: encoder.encode([r.text for r in chunks[c]]),
                "store": lambda c: mem.add_many(chunks[c]),
            }
            if rep % 2:  # and the side that goes first on the first chunk alternates over repeats
                sides = dict(reversed(sides.items()))
            spent = paired(sides, len(chunks), warmup=0)  # a warm-up would write records
            enc_chunks, store_chunks = spent["encoder"], spent["store"]
            store_s = sum(store_chunks)
        elif rep % 2 == 0:
            run_encoder()
            store_s = timed(lambda: mem.add_many(records))
        else:
            store_s = timed(lambda: mem.add_many(records))
            run_encoder()
        first_phases = dict(phases)  # the re-ingest below is timed as a whole only
        written = mem.count()
        again_s = timed(lambda: mem.add_many(records))
        rewritten = mem.count() - written
    if written != len(records) or rewritten != 0:
        raise SystemExit(
            f"store holds {written} records after ingest (+{rewritten}), expected {len(records)}"
        )
    first_phases["other"] = store_s - sum(v for k, v in first_phases.items() if not k.startswith(" "))
    per_chunk = (
        statistics.median(s / e for s, e in zip(store_chunks, enc_chunks, strict=True))
        if store_chunks
        else None
    )
    return {
        "enc": sum(enc_chunks),
        "store": store_s,
        "again": again_s,
        "phases": first_phases,
        "paired": per_chunk,
    }


def run(args: argparse.Namespace, base: Path) -> float:
    from personamem.encoder import default_encoder

    log("[setup] loading encoder")
    encoder = default_encoder()
    records = make_records(args.records, args.users, args.seed)
    n = len(records)
    log(f"[setup] {n} records for {args.users} users")
    encoder.encode([r.text for r in records[:STORE_BATCH]])  # warm up torch before anything is timed

    reps = []
    for rep in range(args.repeats):
        root = base / f"run{rep}"
        if root.exists():
            shutil.rmtree(root)
        reps.append(one_repeat(encoder, records, root, rep, args.interleave))
        r = reps[-1]
        log(
            f"[rep {rep + 1}/{args.repeats}] encoder alone {n / r['enc']:7.1f} rec/s, "
            f"add_many {n / r['store']:7.1f} rec/s, re-ingest {n / r['again']:9.1f} rec/s  "
            f"(load {os.getloadavg()[0]:.2f})"
        )
        if args.store is None:
            shutil.rmtree(root, ignore_errors=True)

    def med(key: str) -> float:
        return statistics.median(r[key] for r in reps)

    enc_rps, store_rps, again_rps = n / med("enc"), n / med("store"), n / med("again")
    ratio = store_rps / enc_rps
    how = "alternating per 256-record batch" if args.interleave == "chunk" else "alternating whole runs"
    print(f"{n} records, {args.users} users, batch {STORE_BATCH}, median of {args.repeats} repeats, {how}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)")
    print()
    header = f"{'measurement':<32} {'records/s':>10}   runs (s)"
    print(header)
    print("-" * (len(header) + 20))
    for name, key in (
        ("encoder alone (chunks of 256)", "enc"),
        ("mem.add_many, fresh store", "store"),
        ("mem.add_many, re-ingest same", "again"),
    ):
        runs = ", ".join(f"{r[key]:.2f}" for r in reps)
        print(f"{name:<32} {n / med(key):10.1f}   {runs}")
    print()
    print("first ingest by phase (median over repeats; encode = the store's own calls to the encoder)")
    print(f"{'phase':<34} {'s':>7} {'ms/record':>10} {'share':>7}")
    total = med("store")
    for name in (*PHASES, "other"):
        seconds = statistics.median(r["phases"][name] for r in reps)
        print(f"{name:<34} {seconds:7.2f} {seconds / n * 1e3:10.3f} {seconds / total:7.1%}")
    print(f"{'(encoder alone, same texts)':<34} {med('enc'):7.2f} {med('enc') / n * 1e3:10.3f}")
    print()
    if args.interleave == "chunk":
        per_batch = statistics.median(r["paired"] for r in reps)
        print(
            f"paired per-batch time ratio store/encoder (median): {per_batch:.2f} -> throughput "
            f"{1 / per_batch:.2f}"
        )
    print(f"store / encoder throughput: {ratio:.2f}")
    print(f"re-ingest / first ingest:   {again_rps / store_rps:.0f}x faster")
    return ratio


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--interleave",
        choices=("chunk", "run"),
        default="chunk",
        help="alternate encoder and store per 256-record batch (default) or per whole run",
    )
    parser.add_argument("--store", type=Path, help="parent folder for the stores (kept; runs overwrite)")
    args = parser.parse_args()

    if args.store is not None:
        args.store.mkdir(parents=True, exist_ok=True)
        ratio = run(args, args.store)
    else:
        base = Path(tempfile.mkdtemp(prefix="personamem-bench-ingest-"))
        try:
            ratio = run(args, base)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return gate("ingest_throughput_ratio", ratio, TARGET_RATIO, higher_is_better=True, digits=2)


if __name__ == "__main__":
    sys.exit(main())
