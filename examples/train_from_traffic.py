"""From traffic to a trained pipeline, end to end, on LoCoMo: log → train → go live → check.

1. **Log.** LoCoMo's training conversations are replayed as an application's traffic: their turns are
   stored, every question goes through ``context()`` with ``log_interactions`` on, and the gold answer
   comes back as ``feedback(answer=..., used_record_ids=...)``, as a chatbot would report the answer
   its user accepted.
2. **Train.** ``personamem train purple --from-store STORE`` learns from that log, once per seed.
3. **Check.** ``personamem eval`` scores the trained pipelines and the untrained one (hybrid's top 5)
   on the held-out conversations, which were never replayed: the gold answer's log-likelihood and a
   generated answer's F1, mean ± std over the training seeds, with a paired t-test over questions.

Run (about an hour on 2 CPU cores with the defaults, one thread per process)::

    python examples/train_from_traffic.py --data ../shared/data/locomo --out runs/traffic
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from rich.progress import track
from scipy.stats import ttest_rel

from personamem import PersonaMem, PipelineConfig
from personamem.datasets import UserSplit, read_questions

METRICS = ("answer_loglik", "answer_f1")


def replay(data: Path, store: Path, held_out: list[str]) -> int:
    """Store the training conversations and log each of their questions with its gold answer."""
    bench = read_questions("locomo", data)
    config = PipelineConfig(log_interactions=True)  # hybrid's top 5, as the untrained app serves
    shutil.rmtree(store, ignore_errors=True)
    logged = 0
    with PersonaMem.open(store, pipeline=config) as mem:
        mem.add_many([r for r in bench.records if r.user_id not in held_out])
        asked = [q for q in bench.questions if q.user_id not in held_out and q.answer]
        for question in track(asked, description="replaying questions"):
            context = mem.context(question.user_id, question.text)
            assert context.interaction_id is not None
            mem.feedback(
                context.interaction_id, answer=str(question.answer), used_record_ids=list(question.relevant)
            )
            logged += 1
    return logged


def run(*argv: str) -> None:
    """One ``personamem`` command, echoed, failing loudly."""
    print("+ personamem", " ".join(argv), flush=True)
    subprocess.run([sys.executable, "-m", "personamem", *argv], check=True)


def summarize(report: dict, seeds: list[str], base: str) -> list[str]:
    """Markdown rows: the base, then the trained checkpoints' mean ± std and paired t-test p."""
    methods = report["methods"]
    rows = []
    for metric in METRICS:
        base_q = methods[base]["per_question"][metric]
        ids = sorted(base_q)
        per_seed = [np.mean([methods[s]["per_question"][metric][q] for q in ids]) for s in seeds]
        trained_q = [np.mean([methods[s]["per_question"][metric][q] for s in seeds]) for q in ids]
        p = ttest_rel(trained_q, [base_q[q] for q in ids]).pvalue
        rows.append(
            f"| {metric} | {np.mean([base_q[q] for q in ids]):.3f} | "
            f"{np.mean(per_seed):.3f} ± {np.std(per_seed, ddof=1):.3f} | {p:.3g} | {len(ids)} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="The LoCoMo folder.")
    parser.add_argument("--out", type=Path, default=Path("runs/traffic"))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-train", type=int, default=96)
    parser.add_argument("--max-validation", type=int, default=32)
    parser.add_argument("--max-questions", type=int, default=60, help="Held-out questions answered.")
    parser.add_argument("--llm-runtime", default="ctranslate2")
    args = parser.parse_args()

    bench = read_questions("locomo", args.data)
    # the conversations PURPLE's benchmark runs hold out (split seed 0): comparable with docs/RESULTS.md
    held_out = UserSplit.by_count(bench.users(), validation=1, test=2, seed=0).test
    args.out.mkdir(parents=True, exist_ok=True)
    split = args.out / "held_out.json"
    split.write_text(json.dumps({"test_users": held_out}) + "\n", encoding="utf-8")
    store = args.out / "store"
    print(f"logged {replay(args.data, store, held_out)} interactions; held out {held_out}")

    seeds = []
    for seed in range(args.seeds):
        folder = args.out / f"purple-s{seed}"
        run(
            "train", "purple", "--from-store", str(store), "--out", str(folder), "--seed", str(seed),
            "--steps", str(args.steps), "--batch-size", str(args.batch_size), "--samples", str(args.samples),
            "--max-train", str(args.max_train), "--max-validation", str(args.max_validation),
            "--validate-every", str(args.steps // 2),
            "--llm-runtime", args.llm_runtime,
        )  # fmt: skip
        seeds.append(f"purple:{folder / 'best'}")
    methods = [arg for name in ["hybrid", *seeds] for arg in ("--method", name)]
    run(
        "eval", "--benchmark", "locomo", "--data", str(args.data), "--held-out", str(split), *methods,
        "--answers", "--profile-k", "5", "--max-questions", str(args.max_questions),
        "--llm-runtime", args.llm_runtime, "--out", str(args.out / "eval"),
    )  # fmt: skip
    report = json.loads((args.out / "eval" / "report.json").read_text(encoding="utf-8"))
    table = [
        "| metric | untrained (hybrid top 5) | PURPLE from traffic | paired p | questions |",
        "|---|---|---|---|---|",
        *summarize(report, seeds, "hybrid"),
    ]
    (args.out / "table.md").write_text("\n".join(table) + "\n", encoding="utf-8")
    print("\n".join(table))


if __name__ == "__main__":
    main()
