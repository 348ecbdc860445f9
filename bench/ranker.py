"""The learned ranker's cost on the read path: the default search against it without the ranker, and hybrid.

One user with ``--records`` seeded synthetic chat turns in a real store (a date and a speaker's name
before ~30 words, as LoCoMo's turns; each day's turns one session). The shipped trees' gate admits
no history since issue 57 (the score fusion beat the trees on every benchmark's validation users),
so this times the score fusion's path, session neighbours included: the same candidates and
features as the trees', without the ONNX run.
``search`` with no method (the package default: hybrid with the shipped adapter, reordered by the
shipped ranker) against the same pipeline with ``ranker = "none"`` (the default before the ranker
shipped) and against plain ``hybrid``, rotating which goes first, a different query each time; the
ratios of medians are the results.

Gates: p50(default) / p50(default without the ranker) <= 1.15, and p50(default) / p50(hybrid) <= 1.2
(issue 57). The stdout lines ``ranker_search_p50_ratio: R (target <= 1.15)`` and, last,
``default_vs_hybrid_p50_ratio: R (target <= 1.2)``; the exit status is 1 when either is missed.

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
TARGET_VS_HYBRID = 1.2
SPEAKERS = ("Caroline", "Melanie", "Joanna", "Nate")


def chat_turn(rng: random.Random, i: int) -> str:
    """A dated turn of a two-person chat, about as long as LoCoMo's (what the shipped trees serve)."""
    day = 1 + i // 40 % 28
    body = " ".join(realistic_text(rng) for _ in range(2))
    return f"[{day} May, 2023] {SPEAKERS[i % 2 + 2 * (i // 250 % 2)]}: {body}"


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--records", type=int, default=500, help="records of the user searched")
    parser.add_argument("--iters", type=int, default=300, help="timed searches per pipeline")
    args = parser.parse_args()

    from personamem import PersonaMem, PipelineConfig
    from personamem.encoder import default_encoder

    rng = random.Random(0)
    pipelines = {"without": PipelineConfig(ranker="none"), "with": PipelineConfig(), "hybrid": "hybrid"}
    with (
        tempfile.TemporaryDirectory(prefix="bench-ranker-") as tmp,
        PersonaMem.open(Path(tmp) / "store", encoder=default_encoder()) as mem,
    ):
        turns = [
            {"id": f"r{i}", "text": chat_turn(rng, i), "metadata": {"session": f"day {1 + i // 40 % 28}"}}
            for i in range(args.records)
        ]  # a day's turns are a session: the default ranks a turn with its neighbours in it
        mem.add_many(turns, user_id="u")
        ranker = mem.pipeline(PipelineConfig()).ranker
        assert ranker is not None and ranker.model.folder.name == "mixed"
        log(f"what serves the user: {ranker.decide('u').reason}")  # the score fusion, since issue 57
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
    log(
        f"search p50: default {p50['with']:.2f} ms, without the ranker {p50['without']:.2f} ms, "
        f"hybrid {p50['hybrid']:.2f} ms"
    )
    missed = gate("ranker_search_p50_ratio", median_ratio(times["with"], times["without"]), TARGET_RATIO)
    return missed | gate(
        "default_vs_hybrid_p50_ratio", median_ratio(times["with"], times["hybrid"]), TARGET_VS_HYBRID
    )


if __name__ == "__main__":
    sys.exit(main())
