"""Setwise against listwise reranking of 20 candidates on the same local model: LLM calls and time.

One user's preference memory (fixed text), a request, and 20 candidate items (seeded synthetic
sentences). The setwise reranker (:class:`~personamem.preference.SetwiseReranker`, 5-way choices by
label log-likelihood, heap sort) ranks the top 10; the listwise reranker
(:class:`~personamem.profile.listwise.ListwiseSelector`, one greedy generation over the numbered
list) orders the same 20. Both run ``--iters`` times alternately, a different request each time.
The setwise side costs several short scoring calls (at most ``ceil((N-1)/4) + 3 + k * ceil(log4 N)``
choices, each one forward pass thanks to the backend's shared-prompt scoring, over only the items,
since the backend keeps the key/value states of the prompt before them; and over only the items no
earlier choice of the ranking showed to lose, :class:`~personamem.preference.setwise.Outcomes`); the listwise
side one long decode, and its answer is often unusable on a small model (it then keeps the input order).

Also timed in the same alternation, and only printed: setwise with a 120-word memory (the prompted
extractor's ``max_words`` cap, the longest preference memory it writes; the memories in RESULTS.md's
MemRerank evaluation had 5 to 84 words, this script's ``MEMORY`` 18), which the listwise side
never sees.

Gate: p50(setwise top-10) / p50(listwise) <= 1.5, i.e. the setwise reranker, which always returns a
ranking, costs at most half again the listwise decode. The last stdout line is
``setwise_over_listwise_time: R (target <= 1.5)``; the exit status is 1 when it is missed.

    python bench/setwise_rerank.py [--iters 3] [--top 10]
"""

from __future__ import annotations

import random
import statistics
import sys
import warnings

from _common import QUERIES, log, realistic_text
from harness import arguments, gate, paired

TARGET_RATIO = 1.5
MEMORY = (
    "WITHIN everyday life:\n- enjoys outdoor sport and travel\n- cooks plant-based food\n"
    "CROSS:\n- careful with money"
)
LONG_MEMORY = (  # 120 words as memory_eval counts them (text.split())
    "WITHIN everyday life:\n- enjoys outdoor sport and travel, mostly hiking and cycling on weekends\n"
    "- cooks plant-based food at home and avoids dairy and eggs\n- prefers trains to planes for trips "
    "under six hours\n- reads historical fiction and long-form journalism before bed\n- keeps a small "
    "balcony garden with herbs and tomatoes\n- likes quiet cafes and independent bookshops\n"
    "- plays guitar with friends on Fridays\n"
    "CROSS:\n- careful with money: compares prices and waits for sales\n- values durable, repairable "
    "products over cheap ones\n- dislikes crowded tourist places and loud restaurants\n- buys gifts that "
    "are practical rather than decorative\n- avoids subscriptions and prefers paying once\n- cares "
    "about low-waste packaging and second-hand options"
)


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--iters", type=int, default=3, help="timed reranks per method")
    parser.add_argument("--top", type=int, default=10, help="setwise ranks this many of the 20")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    from personamem import Record
    from personamem.errors import ListwiseFallbackWarning
    from personamem.llm import TransformersLLM
    from personamem.preference import SetwiseReranker
    from personamem.profile.listwise import ListwiseSelector

    warnings.simplefilter(
        "ignore", ListwiseFallbackWarning
    )  # a weak model's ranking is not timed for quality
    rng = random.Random(args.seed)
    log("[setup] loading the LLM")
    llm = TransformersLLM.default()
    items = [realistic_text(rng) for _ in range(20)]
    records = [Record(user_id="alice", id=f"c{i:02d}", text=text) for i, text in enumerate(items)]
    setwise = SetwiseReranker(llm)
    listwise = ListwiseSelector(llm)
    setwise.rank(QUERIES[-1], MEMORY, items, k=args.top)  # warm up both paths
    listwise.select("alice", QUERIES[-1], records, 20)

    log(f"[time] rerank of 20 candidates, {args.iters} alternating iterations")
    calls: list[int] = []

    def query(i: int) -> str:
        return QUERIES[i % (len(QUERIES) - 1)]  # never the warm-up's

    def ranked(i: int) -> None:
        before = setwise.calls
        setwise.rank(query(i), MEMORY, items, k=args.top)
        calls.append(setwise.calls - before)

    times = paired(
        {
            "setwise": ranked,
            "listwise": lambda i: listwise.select("alice", query(i), records, 20),
            "long memory": lambda i: setwise.rank(query(i), LONG_MEMORY, items, k=args.top),
        },
        args.iters,
        warmup=0,  # warmed up above, on a query never timed
    )
    p50 = {name: statistics.median(samples) for name, samples in times.items()}
    print(f"rerank of 20 candidates, {args.iters} iterations     LLM calls   p50 s")
    label = f"setwise, top {args.top} (5-way choices)"
    print(f"{label:<41}{statistics.median(calls):9.0f} {p50['setwise']:7.2f}")
    print(f"{'listwise (one generation)':<41}{1:9d} {p50['listwise']:7.2f}")
    print(
        f"setwise_long_memory_over_listwise_time: {p50['long memory'] / p50['listwise']:.2f} "
        f"(informational: setwise {p50['long memory']:.2f} s with a {len(LONG_MEMORY.split())}-word memory)"
    )
    return gate("setwise_over_listwise_time", p50["setwise"] / p50["listwise"], TARGET_RATIO, digits=2)


if __name__ == "__main__":
    sys.exit(main())
