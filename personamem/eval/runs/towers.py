"""``personamem eval-pgret`` as a function: trained query towers against dense on unseen users."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from personamem.datasets.table import BenchmarkName
from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["TowerEvalRun", "run"]


class TowerEvalRun(EvalRun):
    """Which towers, on which benchmark, judged by which LLM."""

    runs: Path
    """A folder of 'train pgret' runs (<run>/best/pgret.json and one split.json)."""
    benchmark: BenchmarkName
    """The benchmark the towers were trained on."""
    data: Path
    """The benchmark folder in its upstream layout."""
    k: int = Field(default=5, ge=1)
    """Cutoff of novelty and judged precision."""
    novelty_depth: int = Field(default=20, ge=1)
    """L: a record in dense's top L is not novel."""
    judged_questions: int = Field(default=60, ge=1)
    """Evenly spaced questions whose top k the LLM judges."""
    judge: str = "smollm2-135m"
    """The judge's model (packaged name or folder)."""
    judge_mode: Literal["query-likelihood", "yes-no"] = "query-likelihood"
    """query-likelihood or yes-no (see 'train pgret --help')."""
    judge_runtime: Runtime = REFERENCE_RUNTIME
    """The local LLM engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the reference)."""
    out_file: Path | None = Field(default=None, alias="out")
    """The report as JSON. [default: <runs>/report.json]"""


def run(config: TowerEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Recall, nDCG, novelty@k and judged precision@k of each variant (mean ± std over its seeds).

    Raises:
        ValueError: ``runs`` holds no trained towers, or towers of different splits.
    """
    from personamem.datasets import DataSource, held_out_questions
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.judge import RelevanceJudge
    from personamem.eval.tower_eval import evaluate_towers, find_towers
    from personamem.llm.load import load_llm

    towers = find_towers(config.runs)
    splits = {p.read_text(encoding="utf-8") for p in config.runs.glob("*/split.json")}
    if not towers or len(splits) != 1:
        raise ValueError(
            f"{config.runs}: expected trained runs (*/best/pgret.json) sharing one split.json; found "
            f"{sum(map(len, towers.values()))} towers and {len(splits)} distinct splits"
        )
    split_file = next(config.runs.glob("*/split.json"))
    source = DataSource(benchmark=config.benchmark, data=config.data)
    bench = held_out_questions(source.questions(), split_file)
    scorer = RelevanceJudge(
        load_llm(config.judge, runtime=config.judge_runtime),
        mode=config.judge_mode,
        cache_file=config.runs / "judge.jsonl",
    )
    report = evaluate_towers(
        bench,
        towers,
        scorer,
        default_encoder(),
        k=config.k,
        depth=config.novelty_depth,
        judged_questions=config.judged_questions,
        cache_dir=default_vector_cache(),
        progress=progress,
    )
    report.command = command
    target = config.out_file or config.runs / "report.json"
    target.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    rows = [
        (f"{row['method']} ({row['seeds']} seeds)", *(_cell(row[metric]) for metric in report.metrics))
        for row in report.rows()
    ]
    calibration = report.calibration
    return EvalSummary(
        title=f"query towers on held-out users ({len(bench.questions)} questions; p: paired t-test vs dense)",
        columns=("method", *report.metrics),
        rows=rows,
        lines=[
            f"judge {scorer.llm.name} ({config.judge_mode}) against these users' gold: AUC "
            f"{calibration.auc:.3f} on {calibration.pairs} pairs; judged precision counts gold, and others "
            f"at margin ≥ {calibration.threshold:.2f} (TPR {calibration.tpr:.2f}, FPR {calibration.fpr:.2f})",
            f"{len(report.examples)} novel gold finds in the towers' top {config.k}; report: {target}",
        ],
    )


def _cell(cell: dict[str, float]) -> str:
    """``mean ± std`` (the mean alone for one seed), and the paired test's p where there is one."""
    text = f"{cell['mean']:.3f} ± {cell['std']:.3f}" if not math.isnan(cell["std"]) else f"{cell['mean']:.3f}"
    if "p" in cell and not math.isnan(cell["p"]):
        text += f" (p {cell['p']:.2g})"
    return text
