"""One-token choices on the CTranslate2 runtime: one forward pass per prompt against a row per label.

The frozen LLM scores a yes/no (conflict detection, ``eval-conflicts``) or a multiple choice's labels
(the setwise reranker, ``eval-memory``) as one-token targets after one shared prompt.
``CTranslate2LLM.loglikelihood`` runs each prompt once through ``forward_batch`` and reads every
label's log-probability from its last position; the baseline is the engine's ``score_batch`` over the
same (prompt + label) sequences, one row per label, which is what the runtime did before. Both sides
score the same ``--prompts`` conflict prompts (seeded synthetic statement pairs) with ``--labels``
labels each, alternating, ``--iters`` times; the values are checked equal to 1e-4 nats.

Gate: p50(baseline) / p50(one pass) >= 1.5 with two labels. The last stdout line is
``ct2_choices_speedup: R (target >= 1.5)``; the exit status is 1 when it is missed.

    python bench/ct2_choices.py [--prompts 48] [--labels 2] [--iters 5]
"""

from __future__ import annotations

import random
import sys

import numpy as np
from _common import log, realistic_text
from harness import arguments, gate, median_ratio, paired

from personamem.conflicts import conflict_prompt
from personamem.llm.ct2 import CTranslate2LLM
from personamem.llm.tokens import encode_pair

TARGET = 1.5
LABELS = ("Yes", "No", "Maybe", "Never", "Always")  # one token each in SmolLM2's vocabulary


def main() -> int:
    parser = arguments(__doc__)
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--labels", type=int, default=2, choices=range(2, len(LABELS) + 1))
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    llm = CTranslate2LLM.local("smollm2-135m")
    rng = random.Random(args.seed)
    labels = LABELS[: args.labels]

    def requests(i: int) -> list[tuple[object, str]]:
        prompts = [
            conflict_prompt(realistic_text(rng), f"{realistic_text(rng)} ({i})") for _ in range(args.prompts)
        ]
        return [(p, label) for p in prompts for label in labels]

    batches = {i: requests(i) for i in range(-1, args.iters)}

    def one_pass(i: int) -> list[float]:
        return list(llm.loglikelihood(batches[i]))

    def row_per_label(i: int) -> list[float]:
        pairs = [encode_pair(llm.tokenizer, llm.render(p), t, llm.context_window) for p, t in batches[i]]
        assert all(len(t) == 1 for _, t in pairs), "a label is not one token"
        results = llm.generator.score_batch(
            [llm._tokens(c + t) for c, t in pairs],
            max_batch_size=512,
            batch_type="tokens",
            max_input_length=0,
        )
        return [float(r.log_probs[-1]) for r in results]

    def check(i: int, results: dict[str, list[float]]) -> None:
        gap = float(np.max(np.abs(np.array(results["one pass"]) - np.array(results["row per label"]))))
        assert gap <= 1e-4, f"iteration {i}: the two paths disagree by {gap:.2e} nats"

    spent = paired({"one pass": one_pass, "row per label": row_per_label}, args.iters, check=check)
    log(
        f"{args.prompts} prompts x {args.labels} labels: one pass p50 "
        f"{np.median(spent['one pass']):.2f} s, a row per label p50 {np.median(spent['row per label']):.2f} s"
    )
    return gate(
        "ct2_choices_speedup",
        median_ratio(spent["row per label"], spent["one pass"]),
        TARGET,
        higher_is_better=True,
        digits=2,
    )


if __name__ == "__main__":
    sys.exit(main())
