"""The chat path: ``PersonaMem.add`` of one record against the bare encoder call for one text, in one run.

A chat backend stores each turn as it arrives, seconds apart, and waits for ``add`` to return. So each
iteration lets the background indexer finish the previous record (untimed), then times, in
alternating order, ``encoder.encode([text])`` and ``mem.add(user, text)`` on a fresh text; the gate
is the median of the paired ratios. Read-your-writes is checked on the way: right after ``add``
returns, a dense search for the text must find it (the vector is still pending in SQL, or indexed).

Also reported, not gated: back-to-back adds with no pause, where the indexer competes for the CPU.

Gate: median add / encode <= 1.15 (issue 46: the write path adds at most 15 % to the encoder call).
``--words 1000`` makes every turn that long (issue 57: a long record is still one vector, so its add
costs what its one encoder call does, never a call per chunk).
The last stdout line is
``single_add_ratio: R (target <= 1.15)`` and the exit status is 1 when the target is missed.

    python bench/single_add.py [--records 300] [--users 10] [--check-every 10] [--words 1000]
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import log, realistic_text
from harness import arguments, gate, paired

TARGET_RATIO = 1.15


def _turn(rng: random.Random, words: int) -> str:
    """A realistic turn, or realistic sentences run on to ``words`` words (0: one turn as it comes)."""
    text = realistic_text(rng)
    while len(text.split()) < words:
        text += " " + realistic_text(rng)
    return " ".join(text.split()[:words]) if words else text


def run(args: argparse.Namespace, root: Path) -> float:
    from personamem import PersonaMem
    from personamem.encoder import default_encoder

    encoder = default_encoder()
    rng = random.Random(args.seed)
    texts = [f"turn {i}: {_turn(rng, args.words)}" for i in range(args.records)]
    encoder.encode(texts[:32])  # warm up torch before anything is timed
    with PersonaMem.open(root, encoder=encoder) as mem:
        mem.add("warm-up", "warm up the store")

        def read_your_writes(i: int, _: object) -> None:
            if i % args.check_every == 0:
                hits = mem.search(f"user{i % args.users}", texts[i], k=1)
                if not hits or hits[0].record.text != texts[i]:
                    raise SystemExit(f"read-your-writes failed: turn {i} not found right after add")

        spent = paired(
            {
                "encode": lambda i: encoder.encode([texts[i] + " (baseline)"]),  # same length, never cached
                "add": lambda i: mem.add(f"user{i % args.users}", texts[i]),
            },
            len(texts),
            warmup=0,
            between=lambda i: mem.store.flush(),  # the previous turn is indexed between turns, as in a chat
            check=read_your_writes,
        )
        encodes, adds = spent["encode"], spent["add"]
        ratios = [a / e for a, e in zip(adds, encodes, strict=True)]
        burst_texts = [f"burst {i}: {_turn(rng, args.words)}" for i in range(args.records // 3)]
        start = time.perf_counter()
        for text in burst_texts:
            mem.add("burst-user", text)
        burst = time.perf_counter() - start
        mem.store.flush()
        drained = time.perf_counter() - start
        start = time.perf_counter()
        for text in burst_texts:
            encoder.encode([text + " (baseline)"])
        burst_encode = time.perf_counter() - start
        if not mem.store.check().ok:
            raise SystemExit("store inconsistent after the run")
    ratio = statistics.median(ratios)
    size = f"{args.words}-word" if args.words else "chat-sized"
    print(f"{args.records} single {size} adds for {args.users} users, each after the previous was indexed")
    print(f"encoder.encode([text]) median {statistics.median(encodes) * 1e3:6.1f} ms")
    print(f"mem.add(user, text)    median {statistics.median(adds) * 1e3:6.1f} ms")
    print(f"paired ratio add/encode median {ratio:.2f} (p90 {statistics.quantiles(ratios, n=10)[-1]:.2f})")
    n = len(burst_texts)
    print(
        f"back-to-back: {n} adds returned in {burst:.2f} s, all indexed after {drained:.2f} s; "
        f"{n} encoder calls alone {burst_encode:.2f} s (ratio {drained / burst_encode:.2f}, not gated)"
    )
    return ratio


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--check-every", type=int, default=10, help="search after every Nth add")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--words", type=int, default=0, help="every turn this many words (0: chat-sized)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-add-"))
    try:
        log("[setup] loading encoder")
        ratio = run(args, root / "store")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return gate("single_add_ratio", ratio, TARGET_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
