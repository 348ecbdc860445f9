"""PG-Ret's cost: query latency with a trained tower against base dense search, and training throughput.

1. Latency: one user with ``--records`` seeded synthetic records in a real store. ``search`` with
   ``method="dense"`` (the store's encoder embeds the query) against ``method="pgret:<tower>"`` (the
   tower embeds it; the records' vectors are the stored ones). The tower is ``--tower`` or, by
   default, a checkpoint written from the base model: a trained tower has the same architecture and
   so the same cost. Both run ``--iters`` times alternately, a different query each time; the
   ratio of medians is the result.
2. Training throughput: ``--steps`` policy-gradient steps on a toy logged set, judged by the local
   LLM, once with a cold judge and once with every verdict cached (the same seed, so the same
   pairs): judged pairs per second.

Gate: p50(pgret) / p50(dense) <= 1.1. The last stdout line is
``pgret_query_latency_ratio: R (target <= 1.1)``; the exit status is 1 when the target is missed.

    python bench/pgret.py [--records 500] [--iters 200] [--steps 3] [--tower FOLDER]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 1.1


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=200, help="timed searches per method")
    parser.add_argument("--steps", type=int, default=3, help="training steps per throughput run")
    parser.add_argument("--tower", type=Path, default=None, help="a trained tower (default: the base copy)")
    args = parser.parse_args()

    from sentence_transformers import SentenceTransformer

    from personamem import PersonaMem
    from personamem.encoder import default_encoder
    from personamem.retrieval.query_tower import save_query_tower

    encoder = default_encoder()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-pgret-") as tmp:
        tower = args.tower
        if tower is None:
            tower = Path(tmp) / "tower"
            model = SentenceTransformer(str(encoder.path), device="cpu")
            save_query_tower(tower, model, record_encoder=encoder, info={"variant": "base copy"})
        with PersonaMem.open(Path(tmp) / "store", encoder=encoder) as mem:
            mem.add_many(
                [{"id": f"r{i}", "text": realistic_text(rng)} for i in range(args.records)], user_id="u"
            )
            methods = {"dense": "dense", "pgret": f"pgret:{tower}"}
            times = paired(  # the warm-up loads the tower, fills caches
                {
                    name: lambda i, method=method: mem.search(
                        "u", QUERIES[i % len(QUERIES)] + f" ({i})", k=10, method=method
                    )
                    for name, method in methods.items()
                },
                args.iters,
            )
        ratio = median_ratio(times["pgret"], times["dense"])
        log(
            f"search p50: dense {sorted(times['dense'])[args.iters // 2] * 1e3:.2f} ms, "
            f"pgret {sorted(times['pgret'])[args.iters // 2] * 1e3:.2f} ms over {args.records} records"
        )
        cold, warm = _throughput(args.steps, Path(tmp))
        speedup = warm / cold
        print(f"pgret_training_judged_pairs_per_s: cold judge {cold:.1f}, cached {warm:.1f} ({speedup:.1f}x)")
    return gate("pgret_query_latency_ratio", ratio, TARGET_RATIO)


def _throughput(steps: int, tmp: Path) -> tuple[float, float]:
    """Judged pairs per second over ``steps`` training steps: a cold judge, then a fully cached one."""
    import numpy as np

    from personamem.encoder import default_encoder
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.llm.load import load_llm
    from personamem.trainers.pgret.config import PGRetTrainConfig
    from personamem.trainers.pgret.data import LoggedQuery, PGRetData, UserCorpus
    from personamem.trainers.pgret.trainer import train_pgret

    encoder = default_encoder()
    rng = random.Random(1)
    texts = [realistic_text(rng) for _ in range(200)]
    vectors = encoder.encode(texts)
    ids = tuple(f"r{i}" for i in range(len(texts)))
    queries = []
    for i, query in enumerate(QUERIES):
        order = np.argsort(-(vectors @ encoder.encode([query])[0]))
        top = tuple(ids[j] for j in order[:20])
        queries.append(LoggedQuery(f"q{i}", "u", query, (top[3],), top, tuple(ids[j] for j in order[20:40])))
    data = PGRetData(tuple(queries), {"u": UserCorpus(ids, tuple(texts), vectors)})
    judge = RelevanceJudge(load_llm("smollm2-135m", runtime="transformers"))
    calibration = calibrate([1.0, -1.0], [True, False])
    config = PGRetTrainConfig(
        variant="conservative", steps=steps, batch_size=8, pairs_per_query=6, validate_every=steps, k=3
    )
    rates = []
    for run in ("cold", "cached"):
        judged = judge.scored + judge.hits
        start = time.perf_counter()
        train_pgret(
            data, data, judge, calibration, config, tmp / run,
            base_model_path=encoder.path, record_encoder=encoder,
        )  # fmt: skip
        rates.append((judge.scored + judge.hits - judged) / (time.perf_counter() - start))
        log(f"{run}: {judge.scored} pairs scored by the LLM so far, {judge.hits} from the cache")
    return rates[0], rates[1]


if __name__ == "__main__":
    sys.exit(main())
