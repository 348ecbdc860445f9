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

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from _common import QUERIES, log, median_ratio, realistic_text

TARGET_RATIO = 1.15


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=300, help="timed searches per pipeline")
    args = parser.parse_args()

    from personamem import PersonaMem, PipelineConfig
    from personamem.encoder import default_encoder

    rng = random.Random(0)
    pipelines = {"with": PipelineConfig(), "without": PipelineConfig(ranker="none")}
    times: dict[str, list[float]] = {name: [] for name in pipelines}
    with (
        tempfile.TemporaryDirectory(prefix="bench-ranker-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        mem.add_many([{"id": f"r{i}", "text": realistic_text(rng)} for i in range(args.records)], user_id="u")
        assert mem.pipeline(pipelines["with"]).ranker_name == "mixed"
        for config in pipelines.values():  # warm up: load the adapter and the ranker, build BM25, fill caches
            mem.search("u", QUERIES[0], k=10, method=config)
        for i in range(args.iters):
            query = QUERIES[i % len(QUERIES)] + f" ({i})"
            for name in ("with", "without") if i % 2 else ("without", "with"):
                start = time.perf_counter()
                mem.search("u", query, k=10, method=pipelines[name])
                times[name].append(time.perf_counter() - start)
    p50 = {name: sorted(found)[args.iters // 2] * 1e3 for name, found in times.items()}
    log(f"search p50: default {p50['with']:.2f} ms, without the ranker {p50['without']:.2f} ms")
    ratio = median_ratio(times["with"], times["without"])
    print(f"ranker_search_p50_ratio: {ratio:.3f} (target <= {TARGET_RATIO})")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
