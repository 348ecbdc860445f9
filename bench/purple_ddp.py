"""PURPLE's training throughput with 2 data-parallel CPU processes against 1.

Both runs train the same steps on the same synthetic examples (``--examples`` users' questions over
20 realistic candidate records each) with the real reward, SmolLM2's log-likelihood of the answer
(ctranslate2 int8; the cores split evenly between the processes, for torch and the LLM alike):
``python`` for one process, ``accelerate launch --multi_gpu --num_processes 2`` for two (gloo on a
machine without a GPU). Throughput is profiles rewarded per second of the training call, over all
processes (model loading is not timed; encoding the candidates' token states is, in every process).

On this 2-core machine the second process competes with the first for the cores the one process
used, so the point is that the data-parallel run works and loses little; on a machine with a GPU
or more cores per process the ratio is what data parallelism buys. Gate: ratio >= 0.8. The last
stdout line is ``purple_ddp_throughput_ratio: R (target >= 0.8)``; the exit status is 1 when missed.

    python bench/purple_ddp.py [--steps 4] [--batch-size 8] [--samples 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate

TARGET = 0.8


def worker(args: argparse.Namespace) -> None:
    """Train under the launcher (or alone) and write the timing from the main process."""
    from accelerate import PartialState

    from personamem import Record
    from personamem.encoder import default_encoder
    from personamem.llm.load import load_llm
    from personamem.profile.purple import PurpleConfig
    from personamem.trainers.purple import PurpleTrainConfig, train_purple
    from personamem.trainers.purple.data import ProfileExample
    from personamem.trainers.purple.reward import LLMReward

    rng = random.Random(0)
    examples = [
        ProfileExample(
            f"q{i}",
            f"user-{i % 4}",
            QUERIES[i % len(QUERIES)],
            realistic_text(rng),
            tuple(
                Record(user_id=f"user-{i % 4}", id=f"r{i}-{j}", text=realistic_text(rng)) for j in range(20)
            ),
        )
        for i in range(args.examples)
    ]
    config = PurpleTrainConfig(
        model=PurpleConfig(layers=2),
        batch_size=args.batch_size,
        samples=args.samples,
        steps=args.steps,
        validate_every=args.steps,
        device="cpu",
    )
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))  # the cores this process may use
    reward = LLMReward(load_llm("smollm2-135m", runtime="ctranslate2", threads=threads))
    state = PartialState(cpu=True)
    start = time.perf_counter()
    result = train_purple(examples[2:], examples[:2], default_encoder(), reward, config, args.out / "run")
    seconds = time.perf_counter() - start
    if state.is_main_process:
        profiles = args.steps * args.batch_size * args.samples
        (args.out / "timing.json").write_text(
            json.dumps({"processes": result.processes, "seconds": seconds, "profiles": profiles})
        )


def run(processes: int, args: argparse.Namespace, out: Path) -> float:
    """Profiles per second of one run with ``processes`` processes."""
    own = [__file__, "--worker", "--out", str(out), "--steps", str(args.steps),
           "--batch-size", str(args.batch_size), "--samples", str(args.samples),
           "--examples", str(args.examples)]  # fmt: skip
    if processes == 1:
        command = [sys.executable, *own]
    else:
        command = [sys.executable, "-m", "accelerate.commands.accelerate_cli", "launch", "--multi_gpu",
                   "--num_processes", str(processes), "--num_machines", "1", "--mixed_precision", "no",
                   "--dynamo_backend", "no", *own]  # fmt: skip
    threads = str(max(1, (os.cpu_count() or 2) // processes))
    subprocess.run(command, check=True, env={**os.environ, "OMP_NUM_THREADS": threads})
    timing = json.loads((out / "timing.json").read_text())
    assert timing["processes"] == processes, timing
    rate = timing["profiles"] / timing["seconds"]
    log(f"{processes} process(es): {timing['profiles']} profiles in {timing['seconds']:.1f} s = {rate:.1f}/s")
    return float(rate)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--examples", type=int, default=34)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-purple-ddp-") as tmp:
        one = run(1, args, Path(tmp) / "one")
        two = run(2, args, Path(tmp) / "two")
    print(f"profiles rewarded per second: 1 process {one:.1f}, 2 processes {two:.1f}")
    return gate("purple_ddp_throughput_ratio", two / one, TARGET, higher_is_better=True, digits=2)


if __name__ == "__main__":
    sys.exit(main())
