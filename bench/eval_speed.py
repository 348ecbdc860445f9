"""Wall time of a full benchmark evaluation of a non-LLM method, against the bare encoder work it needs.

Runs ``run_eval`` (what ``personamem eval`` calls) on the real benchmark with one method and a fresh
vector cache, so the corpus is embedded inside the timed run; then, as the baseline in the same
process, times the bare encoder on the same corpus and questions (the irreducible model work: one
``encoder.encode`` over all record texts, one per question as the read path does). Also times a second
run with the cache warm, which is what repeated evaluations pay.

The issue's budget is absolute (a full PersonaBench or LoCoMo evaluation under 2 minutes on the 2-core
machine), so the gate is the cold run's seconds; the ratio to the encoder work is printed beside it
because absolute times on these machines are noisy. ranx's one-time numba compile is reported apart.

Last line: ``eval_cold_seconds: S (target <= 120)``; exit status 1 when missed.

    python bench/eval_speed.py [--benchmark locomo|personabench] [--data DIR] [--method dense]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

from harness import arguments, gate

TARGET_SECONDS = 120.0
DATA = Path(os.environ.get("PERSONAMEM_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--benchmark", default="locomo", choices=["locomo", "personabench"])
    parser.add_argument("--data", type=Path, default=None)
    parser.add_argument("--method", default="dense")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from personamem import default_encoder
    from personamem.errors import TruncationWarning
    from personamem.eval import BenchmarkName, EvalConfig, load_benchmark, run_eval

    warnings.simplefilter("ignore", TruncationWarning)  # PersonaBench sessions exceed the window by design
    data = args.data or DATA / args.benchmark
    if not data.exists():
        print(f"benchmark data not found at {data}", file=sys.stderr)
        return 2
    config = EvalConfig(benchmark=BenchmarkName(args.benchmark), data=data, methods=(args.method,))
    encoder = default_encoder()
    encoder.encode(["warm up"])
    with tempfile.TemporaryDirectory() as cache:
        start = time.perf_counter()
        cold = run_eval(config, encoder=encoder, cache_dir=Path(cache))
        cold_s = time.perf_counter() - start
        start = time.perf_counter()
        run_eval(config, encoder=encoder, cache_dir=Path(cache))
        warm_s = time.perf_counter() - start
    bench = load_benchmark(config)
    start = time.perf_counter()
    encoder.encode([r.text for r in bench.records])
    for question in bench.questions:
        encoder.encode([question.text])
    encoder_s = time.perf_counter() - start

    print(
        f"{bench.name}: {len(bench.records)} records, {len(bench.questions)} questions, method {args.method}"
    )
    print(f"stages of the cold run (s): {', '.join(f'{k} {v:.1f}' for k, v in cold.timings.items())}")
    print(f"cold run (embeds the corpus): {cold_s:.1f} s; warm run (cached vectors): {warm_s:.1f} s")
    print(f"bare encoder on corpus + questions: {encoder_s:.1f} s; cold / encoder = {cold_s / encoder_s:.2f}")
    return gate("eval_cold_seconds", cold_s, TARGET_SECONDS, digits=1)


if __name__ == "__main__":
    sys.exit(main())
