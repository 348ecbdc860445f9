"""A bulk import as a job against ``add_many``: records/s of the same records through each, in one run.

``--records`` records (100,000) of real text for ``--users`` users (100), each user's together: LoCoMo's
turns (``--data``), each repeated with a numbered variation, as ``bench/scale.py`` makes them (``_common``
``Pool``: category c0..c9, ids unique per user, every text distinct). Each side gets a fresh embedded
store (``PersonaMem.open``, SQLite + Chroma) and the same records:

1. **baseline**: ``mem.add_many(records, batch_size=--batch)``, timed from the call to its return (and
   ``mem.store.flush()``);
2. **job**: ``mem.jobs.submit_import(records)`` (the upload validated whole and its lines written to
   ``job_chunks``), then the runner a server process runs (``job_runner.from_settings``, in a thread
   of this process, ``PERSONAMEM_JOB_BATCH=--batch`` lines a transaction) storing them; timed from the
   submit to the job's own ``finished_at``. The job's submit, its wait for the runner's claim and the
   run are reported apart.

Afterwards each store must hold every user's records exactly (``count_by_user``), and the job must be
``done`` with every line ``stored`` (none skipped, failed or forgotten); otherwise the run fails.

What is measured is the store's write path, not the encoder: both stores get the project's default
encoder with the records' vectors looked up, not computed (each LoCoMo turn encoded once by that
encoder and cached under ``--cache``, shared with ``scale.py``; a record's vector is its turn's plus a
little noise), so encoding, which is the same work on both sides and would otherwise be most of the
time, does not dilute the ratio. ``--encode`` encodes every record for real on both sides instead
(the whole ingest as a user sees it; 13-16 ms a record here, most of an hour at 100,000).
``--repeats`` runs both sides again on fresh stores, alternating which goes first, and compares the
medians.

Target (issue 60): job records/s >= 0.9 x ``add_many``'s. The last stdout line is
``import_job_throughput_ratio: R (target >= 0.9)``; the exit status is 1 when it is missed.

    python bench/import_job.py [--records 100000] [--users 100] [--batch 500] [--repeats 1]
        [--encode] [--store DIR]

About a minute a side and repeat at the default size on 2 cores (``--repeats 3``: 6 minutes); the
pool's first encoding, when ``--cache`` lacks it, adds about 40 s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from _common import Pool, load_pool, log
from harness import arguments, gate

from personamem import PersonaMem, Record
from personamem.encoder import Encoder, default_encoder
from personamem.job_runner import BATCH, from_settings

TARGET_RATIO = 0.9
POLL_S = 0.5  # how often the job's progress is read while it runs (its time is the job's own)


class LookedUp:
    """The default encoder with known texts' vectors looked up (``encode`` of any other text encodes)."""

    def __init__(self, encoder: Encoder, texts: Sequence[str], vectors: np.ndarray) -> None:
        self._encoder = encoder
        self._row = {text: i for i, text in enumerate(texts)}
        self._vectors = vectors
        self.encoded = 0  # texts encoded for real (none, in a run that only ingests the records)

    @property
    def dim(self) -> int:
        return self._encoder.dim

    @property
    def name(self) -> str:
        return self._encoder.name  # the store records the encoder's name: the real one's

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        rows = [self._row.get(text, -1) for text in texts]
        if min(rows, default=0) >= 0:
            return self._vectors[rows]
        self.encoded += len(texts)
        return self._encoder.encode(texts)


def make_records(pool: Pool, n: int, users: int, seed: int) -> tuple[list[Record], np.ndarray]:
    """``n`` records for ``users`` users (``u000``...), each user's together, and their vectors."""
    rng = np.random.default_rng(seed)
    made, start = [], 0
    for u in range(users):
        count = n // users + (1 if u < n % users else 0)
        made.append(pool.records(f"u{u:03d}", start, start + count, rng))  # global numbers: texts distinct
        start += count
    return [r for records, _ in made for r in records], np.concatenate([v for _, v in made])


class Progress:
    """Logs a side's progress about every tenth of the records."""

    def __init__(self, side: str, total: int) -> None:
        self.side, self.total, self.done, self.start = side, total, 0, time.perf_counter()
        self._next = max(1, total // 10)

    def __call__(self, finished: int) -> None:
        self.done += finished
        self.at(self.done)

    def at(self, done: int) -> None:
        if done >= self._next or done == self.total:
            seconds = time.perf_counter() - self.start
            log(f"[{self.side}] {done:,}/{self.total:,} records, {done / max(seconds, 1e-9):,.0f}/s")
            while self._next <= done:
                self._next += max(1, self.total // 10)


def check_counts(mem: PersonaMem, expected: Counter[str], side: str) -> None:
    """Every user holds exactly its records: none lost, none twice, no other user."""
    held = mem.store.count_by_user()
    if held != dict(expected):
        wrong = {u: (held.get(u, 0), expected[u]) for u in sorted(set(held) | set(expected))}
        wrong = {u: pair for u, pair in wrong.items() if pair[0] != pair[1]}
        raise SystemExit(f"{side}: users holding the wrong count (held, expected): {wrong}")


def baseline(folder: Path, encoder: Encoder, records: list[Record], batch: int) -> dict[str, float]:
    """``mem.add_many`` into a fresh store: seconds."""
    with PersonaMem.open(folder, encoder=encoder) as mem:
        progress = Progress("add_many", len(records))
        start = time.perf_counter()
        mem.add_many(records, batch_size=batch, progress=progress)
        mem.store.flush()
        seconds = time.perf_counter() - start
        check_counts(mem, Counter(r.user_id for r in records), "add_many")
    return {"total": seconds}


def job(folder: Path, encoder: Encoder, records: list[Record], batch: int) -> dict[str, float]:
    """One import job into a fresh store, run by a server's runner in a thread: seconds, and its parts."""
    os.environ["PERSONAMEM_JOB_BATCH"] = str(batch)  # read by from_settings, as a server reads it
    with PersonaMem.open(folder, encoder=encoder) as mem:
        progress = Progress("job", len(records))
        started = time.time()  # wall clock: the job's times are time.time() stamps
        submitted = mem.jobs.submit_import(records)
        queued = time.time()
        log(f"[job] submitted {submitted.job_id}: {submitted.lines:,} lines, {queued - started:.1f} s")
        runner = from_settings(mem)
        runner.start()
        try:
            while not (state := mem.jobs.get(submitted.job_id)).ended:
                progress.at(state.processed)
                time.sleep(POLL_S)
        finally:
            runner.close()
        mem.store.flush()
        if state.state != "done" or state.stored != len(records) or state.processed != len(records):
            raise SystemExit(f"job ended {state.state}: {state.model_dump_json(exclude={'errors'})}")
        if state.skipped or state.failed or state.forgotten or state.errors:
            raise SystemExit(f"job stored some lines other than once: {state.model_dump_json()}")
        progress.at(len(records))
        check_counts(mem, Counter(r.user_id for r in records), "job")
        assert state.started_at is not None and state.finished_at is not None  # a done job has both
        claimed, finished = _epoch(state.started_at), _epoch(state.finished_at)
    return {
        "total": finished - started,
        "submit": queued - started,
        "claim": claimed - queued,
        "run": finished - claimed,
    }


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def run(args: argparse.Namespace, base: Path) -> float:
    log("[setup] loading the encoder and the pool")
    real = default_encoder()
    pool = load_pool(args.data, args.cache, real)
    records, vectors = make_records(pool, args.records, args.users, args.seed)
    n = len(records)
    encoder: Encoder = real if args.encode else LookedUp(real, [r.text for r in records], vectors)
    real.encode([r.text for r in records[:64]])  # the encoder's first call (its session) before any timing
    log(
        f"[setup] {n:,} records for {args.users} users ({len(pool.texts):,} LoCoMo turns, varied), "
        f"batch {args.batch}, vectors {'encoded' if args.encode else 'looked up'}"
    )
    sides = {"add_many": baseline, "job": job}
    spent: dict[str, list[dict[str, float]]] = {name: [] for name in sides}
    for rep in range(args.repeats):
        order = list(sides) if rep % 2 == 0 else list(reversed(sides))
        for name in order:
            folder = base / f"{name}-{rep}"
            shutil.rmtree(folder, ignore_errors=True)
            spent[name].append(sides[name](folder, encoder, records, args.batch))
            log(
                f"[rep {rep + 1}/{args.repeats}] {name}: {n / spent[name][-1]['total']:,.0f} records/s "
                f"({spent[name][-1]['total']:.1f} s; load {os.getloadavg()[0]:.2f})"
            )
            if args.store is None:
                shutil.rmtree(folder, ignore_errors=True)
    if isinstance(encoder, LookedUp) and encoder.encoded:
        log(f"[note] {encoder.encoded} texts were encoded for real (not the records')")

    def med(name: str, part: str = "total") -> float:
        return statistics.median(s[part] for s in spent[name])

    ratio = (n / med("job")) / (n / med("add_many"))
    print(f"{n:,} records, {args.users} users, {args.batch} a transaction, median of {args.repeats} run(s)")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cpus)")
    print(f"{'side':<46} {'records/s':>10} {'s':>8}")
    rows: list[tuple[str, Any, Any]] = [
        ("mem.add_many", n / med("add_many"), med("add_many")),
        ("import job, submit to done", n / med("job"), med("job")),
        ("  of which submit (validate, write job_chunks)", None, med("job", "submit")),
        ("  of which waiting for the runner's claim", None, med("job", "claim")),
        ("  of which the runner storing the lines", n / med("job", "run"), med("job", "run")),
    ]
    for label, rps, seconds in rows:
        print(f"{label:<46} {'' if rps is None else f'{rps:,.0f}':>10} {seconds:8.2f}")
    return ratio


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=100)
    parser.add_argument("--batch", type=int, default=BATCH, help="records a transaction, both sides")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--encode", action="store_true", help="encode every record (slow), not look up")
    parser.add_argument("--data", type=Path, default=Path("../shared/data/locomo"))
    parser.add_argument("--cache", type=Path, default=Path("runs/scale-cache"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--store", type=Path, help="parent folder for the stores (kept; runs overwrite)")
    args = parser.parse_args()

    if args.store is not None:
        args.store.mkdir(parents=True, exist_ok=True)
        ratio = run(args, args.store)
    else:
        base = Path(tempfile.mkdtemp(prefix="personamem-bench-import-job-"))
        try:
            ratio = run(args, base)
        finally:
            shutil.rmtree(base, ignore_errors=True)
    return gate("import_job_throughput_ratio", ratio, TARGET_RATIO, higher_is_better=True, digits=2)


if __name__ == "__main__":
    sys.exit(main())
