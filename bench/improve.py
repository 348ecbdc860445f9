"""``personamem improve`` on a store of ``--users`` x ``--records`` (1,000 x 200 by default), timed whole.

The store is filled with seeded synthetic records drawn from a pool of ``--pool`` distinct texts
(embedded once, the vectors passed to ``add_many``), then ``personamem --store DIR improve`` runs as
a user would run it, in its own process, with its defaults: synthetic questions from the packaged
LLM for sampled records, the adapter fit, the dense weight chosen, the live and candidate pipelines
validated. Building the store is not timed. ``--long`` builds instead a store like a chat
application's with long assistant replies: 23 users x 300 records of about 150 words (issue 44's
6,852-record store), whose target is 15 minutes.

Gate: the improve command's wall-clock seconds <= 1800 (30 minutes on this 2-core machine; 900 with
``--long``). The last stdout line is ``improve_seconds: S (target <= T)``; the exit status is 1 when the
target is missed or the command fails. Its progress lines (stderr is not a terminal here) are shown.

    python bench/improve.py [--users 1000] [--records 200] [--store DIR] [--long]
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import log, realistic_text
from harness import arguments, gate

TARGET_SECONDS = 1800
LONG_TARGET_SECONDS = 900
LONG_WORDS = 150


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--records", type=int, default=200, help="records per user")
    parser.add_argument("--pool", type=int, default=4000, help="distinct record texts drawn from")
    parser.add_argument("--store", type=Path, default=None, help="keep the store here (default: temporary)")
    parser.add_argument("--long", action="store_true", help="23 users x 300 records of ~150 words each")
    args = parser.parse_args()
    target = LONG_TARGET_SECONDS if args.long else TARGET_SECONDS
    if args.long:
        args.users, args.records, args.pool = 23, 300, 7000

    import numpy as np

    from personamem import PersonaMem, Record
    from personamem.encoder import default_encoder

    with tempfile.TemporaryDirectory(prefix="bench-improve-") as tmp:
        root = args.store or Path(tmp)
        store = root / "store"
        if not store.exists():
            encoder = default_encoder()
            rng = random.Random(0)
            # records drawn from a pool of distinct texts: embedding 200,000 texts would take longer
            # than the run it sets up, and improve's cost does not depend on how varied they are
            pool = sorted({_text(rng, LONG_WORDS if args.long else 0) for _ in range(args.pool)})
            log(f"[setup] embedding {len(pool)} distinct texts for {args.users} x {args.records} records")
            vectors = dict(zip(pool, encoder.encode(pool), strict=True))
            texts = [[rng.choice(pool) for _ in range(args.records)] for _ in range(args.users)]
            started = time.perf_counter()
            with PersonaMem.open(store, encoder=encoder) as mem:
                for u, user_texts in enumerate(texts):
                    records = [
                        Record(user_id=f"user-{u:04d}", id=f"r{i}", text=t) for i, t in enumerate(user_texts)
                    ]
                    mem.store.add_many(records, vectors=np.stack([vectors[t] for t in user_texts]))
            log(f"[setup] store filled in {time.perf_counter() - started:.0f} s")
        command = [
            sys.executable,
            "-m",
            "personamem",
            "--store",
            str(store),
            "improve",
        ]
        log("[run] " + " ".join(command))
        started = time.perf_counter()
        done = subprocess.run(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        log(f"improve exited {done.returncode}")
    return max(gate("improve_seconds", seconds, target, digits=0), int(done.returncode != 0))


def _text(rng: random.Random, words: int) -> str:
    """A realistic record; with ``words``, sentences added until it is that long (an assistant's reply)."""
    text = realistic_text(rng)
    while len(text.split()) < words:
        text += " " + realistic_text(rng)
    return text


if __name__ == "__main__":
    sys.exit(main())
