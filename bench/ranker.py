"""The learned ranker's cost on the read path: the default search against the same search without it.

One user with ``--records`` seeded synthetic records in a real store. ``search`` with no method (the
package default: hybrid with the shipped adapter, reordered by the shipped ranker) against the same
pipeline with ``ranker = "none"`` (the default before the ranker shipped), alternating which goes
first, a different query each time; the ratio of medians is the result.

Gate: p50(default) / p50(default without the ranker) <= 1.15. The last stdout line is
``ranker_search_p50_ratio: R (target <= 1.15)``; the exit status is 1 when the target is missed.

    python bench/ranker.py [--records 500] [--iters 300]
"""

from __future__ import annotations

import random
import sys
import tempfile
from pathlib import Path

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, median_ratio, paired

TARGET_RATIO = 1.15


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=300, help="timed searches per pipeline")
    args = parser.parse_args()

    from personamem import PersonaMem, PipelineConfig
    from personamem.encoder import default_encoder

    rng = random.Random(0)
    pipelines = {"without": PipelineConfig(ranker="none"), "with": PipelineConfig()}
    with (
        tempfile.TemporaryDirectory(prefix="bench-ranker-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        mem.add_many([{"id": f"r{i}", "text": realistic_text(rng)} for i in range(args.records)], user_id="u")
        assert mem.pipeline(pipelines["with"]).ranker_name == "mixed"
        times = paired(  # the warm-up loads the adapter and the ranker, builds BM25, fills caches
            {
                name: lambda i, config=config: mem.search(
                    "u", QUERIES[i % len(QUERIES)] + f" ({i})", k=10, method=config
                )
                for name, config in pipelines.items()
            },
            args.iters,
        )
    p50 = {name: sorted(found)[args.iters // 2] * 1e3 for name, found in times.items()}
    log(f"search p50: default {p50['with']:.2f} ms, without the ranker {p50['without']:.2f} ms")
    return gate("ranker_search_p50_ratio", median_ratio(times["with"], times["without"]), TARGET_RATIO)


if __name__ == "__main__":
    sys.exit(main())
