"""``personamem eval-pgret``: trained query towers against dense on the users they never saw."""

from __future__ import annotations

import json
import math
import shlex
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import runtime_option
from personamem.console import out, progress_bar
from personamem.datasets.table import BenchmarkName
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

__all__ = ["eval_pgret"]


def eval_pgret(
    runs: Annotated[
        Path,
        typer.Option(help="A folder of 'train pgret' runs (<run>/best/pgret.json and one split.json)."),
    ],
    benchmark: Annotated[BenchmarkName, typer.Option(help="The benchmark the towers were trained on.")],
    data: Annotated[Path, typer.Option(help="The benchmark folder in its upstream layout.")],
    k: Annotated[int, typer.Option(min=1, help="Cutoff of novelty and judged precision.")] = 5,
    novelty_depth: Annotated[
        int, typer.Option(min=1, help="L: a record in dense's top L is not novel.")
    ] = 20,
    judged_questions: Annotated[
        int, typer.Option(min=1, help="Evenly spaced questions whose top k the LLM judges.")
    ] = 60,
    judge: Annotated[str, typer.Option(help="The judge's model (packaged name or folder).")] = "smollm2-135m",
    judge_mode: Annotated[
        str, typer.Option(help="query-likelihood or yes-no (see 'train pgret --help').")
    ] = "query-likelihood",
    judge_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="The report as JSON. [default: <runs>/report.json]")
    ] = None,
) -> None:
    """Recall, nDCG, novelty@k and judged precision@k of each variant (mean ± std over its seeds)."""
    from personamem.datasets import DataSource, held_out_questions
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.judge import RelevanceJudge
    from personamem.eval.tower_eval import evaluate_towers, find_towers
    from personamem.llm.load import load_llm

    if judge_mode not in ("query-likelihood", "yes-no"):
        raise typer.BadParameter(f"--judge-mode must be query-likelihood or yes-no, got {judge_mode!r}")
    towers = find_towers(runs)
    splits = {p.read_text(encoding="utf-8") for p in runs.glob("*/split.json")}
    if not towers or len(splits) != 1:
        raise typer.BadParameter(
            f"{runs}: expected trained runs (*/best/pgret.json) sharing one split.json; found "
            f"{sum(map(len, towers.values()))} towers and {len(splits)} distinct splits"
        )
    split_file = next(runs.glob("*/split.json"))
    bench = held_out_questions(DataSource(benchmark=benchmark, data=data).questions(), split_file)
    scorer = RelevanceJudge(
        load_llm(judge, runtime=judge_runtime),
        mode=judge_mode,  # type: ignore[arg-type]  # checked above
        cache_file=runs / "judge.jsonl",
    )
    with progress_bar() as progress:
        report = evaluate_towers(
            bench,
            towers,
            scorer,
            default_encoder(),
            k=k,
            depth=novelty_depth,
            judged_questions=judged_questions,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
    report.command = shlex.join(
        [
            "personamem", "eval-pgret", "--runs", str(runs), "--benchmark", benchmark.value,
            "--data", str(data), "--k", str(k), "--novelty-depth", str(novelty_depth),
            "--judged-questions", str(judged_questions), "--judge", judge, "--judge-mode", judge_mode,
        ]
    )  # fmt: skip
    target = out_file or runs / "report.json"
    target.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    calibration = report.calibration
    table = Table(
        "method",
        *report.metrics,
        box=box.SIMPLE,
        title=f"query towers on held-out users ({len(bench.questions)} questions; p: paired t-test vs dense)",
    )
    for row in report.rows():
        cells = []
        for metric in report.metrics:
            cell = row[metric]
            text = (
                f"{cell['mean']:.3f} ± {cell['std']:.3f}"
                if not math.isnan(cell["std"])
                else f"{cell['mean']:.3f}"
            )
            if "p" in cell and not math.isnan(cell["p"]):
                text += f" (p {cell['p']:.2g})"
            cells.append(text)
        table.add_row(f"{row['method']} ({row['seeds']} seeds)", *cells)
    out.print(table)
    out.print(
        f"judge {scorer.llm.name} ({judge_mode}) against these users' gold: AUC {calibration.auc:.3f} on "
        f"{calibration.pairs} pairs; judged precision counts gold, and others at margin ≥ "
        f"{calibration.threshold:.2f} (TPR {calibration.tpr:.2f}, FPR {calibration.fpr:.2f})"
    )
    out.print(f"{len(report.examples)} novel gold finds in the towers' top {k}; report: {target}")
