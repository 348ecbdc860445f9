"""PURPLE's cost: reranking 20 candidates against a listwise LLM rerank, and training throughput.

1. Rerank: one user's 20 candidate records (seeded synthetic sentences) and a question. PURPLE's
   ``PurpleSelector.select`` (the query's token states from the frozen encoder, the records' from
   its cache, one scorer forward pass; a 2-layer scorer, untrained weights cost the same) against
   ``ListwiseSelector.select`` with the local LLM (one greedy generation over the numbered list).
   The records were seen in an earlier query, as a user's records are; PURPLE without the record
   cache (every record re-encoded) is timed too and printed. All run ``--iters`` times alternately,
   a different question each iteration; the ratio of medians is the result.
2. Training throughput: ``--steps`` REINFORCE steps of B x M sampled profiles rewarded by the LLM,
   once with the reward cache and once without, from the same seed: profiles rewarded per second.

Gate: p50(listwise) / p50(PURPLE) >= 50. The last stdout line is
``purple_vs_listwise_speedup: R (target >= 50)``; the exit status is 1 when the target is missed.

    python bench/purple_rerank.py [--iters 5] [--steps 4] [--batch-size 4] [--samples 8]
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import warnings
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, paired

TARGET_SPEEDUP = 50.0


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--iters", type=int, default=5, help="timed reranks per method")
    parser.add_argument("--steps", type=int, default=4, help="training steps per throughput run")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from personamem import Record
    from personamem.encoder import default_encoder
    from personamem.errors import ListwiseFallbackWarning
    from personamem.llm import TransformersLLM
    from personamem.profile.listwise import ListwiseSelector
    from personamem.profile.purple import PurpleConfig
    from personamem.profile.purple.model import RecordScorer
    from personamem.profile.purple.selector import PurpleSelector
    from personamem.trainers.purple import PurpleTrainConfig, train_purple
    from personamem.trainers.purple.data import ProfileExample
    from personamem.trainers.purple.reward import LLMReward

    warnings.simplefilter(
        "ignore", ListwiseFallbackWarning
    )  # a weak model's ranking is not timed for quality
    rng = random.Random(args.seed)
    log("[setup] loading the encoder and the LLM")
    encoder = default_encoder()
    llm = TransformersLLM.default()
    candidates = [Record(user_id="alice", id=f"m{i:02d}", text=realistic_text(rng)) for i in range(20)]
    torch.manual_seed(args.seed)
    scorer = RecordScorer(PurpleConfig())
    selectors = {
        "purple": PurpleSelector(scorer, encoder),
        "purple, no record cache": PurpleSelector(scorer, encoder, record_cache=0),
        "listwise": ListwiseSelector(llm),
    }
    for selector in selectors.values():  # warm up every path; PURPLE's cache now holds the records
        selector.select("alice", QUERIES[-1], candidates, 5)

    log(f"[time] rerank of 20 candidates, {args.iters} alternating iterations")
    times = paired(
        {
            name: lambda i, selector=selector: selector.select(
                "alice", QUERIES[i % (len(QUERIES) - 1)], candidates, 5
            )
            for name, selector in selectors.items()
        },
        args.iters,
        warmup=0,  # warmed up above, on QUERIES[-1], which is never timed
    )
    p50 = {name: statistics.median(samples) for name, samples in times.items()}
    speedup = p50["listwise"] / p50["purple"]

    log(f"[time] training throughput: {args.steps} steps of {args.batch_size} x {args.samples} profiles")
    examples = [
        ProfileExample(f"e{i}", "alice", QUERIES[i % len(QUERIES)], "Yes.", tuple(rng.sample(candidates, 20)))
        for i in range(8)
    ]
    config = PurpleTrainConfig(
        model=PurpleConfig(),
        batch_size=args.batch_size,
        samples=args.samples,
        steps=args.steps,
        validate_every=args.steps,
        seed=args.seed,
    )
    throughput = {}
    for cached in (True, False):
        reward = LLMReward(llm, cache=cached)
        with tempfile.TemporaryDirectory(prefix="personamem-bench-purple-") as tmp:
            result = train_purple(examples[:6], examples[6:], encoder, reward, config, Path(tmp))
        throughput[cached] = (result.profiles_rewarded / result.seconds, reward.scored, reward.hits)

    print(f"rerank of 20 candidates, {args.iters} iterations       p50 ms")
    for name, value in p50.items():
        print(f"{name:<42} {value * 1e3:9.1f}")
    print(f"training, {args.steps} steps of {args.batch_size} x {args.samples} profiles (K=5 of 20):")
    for cached, (rate, scored, hits) in throughput.items():
        label = "with the reward cache" if cached else "without the reward cache"
        print(f"  {label:<28} {rate:6.2f} profiles/s ({scored} LLM-scored, {hits} cache hits)")
    print(f"cache speed-up on training throughput: {throughput[True][0] / throughput[False][0]:.2f}x")
    print(
        f"listwise / PURPLE without the record cache: {p50['listwise'] / p50['purple, no record cache']:.1f}x"
    )
    return gate("purple_vs_listwise_speedup", speedup, TARGET_SPEEDUP, higher_is_better=True, digits=1)


if __name__ == "__main__":
    sys.exit(main())
