"""``personamem eval-conflicts``: precision of conflict detection on the labelled PrefEval pairs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from personamem.cli.options import runtime_option
from personamem.console import out
from personamem.llm.load import Runtime

__all__ = ["eval_conflicts"]


def eval_conflicts(
    data: Annotated[Path, typer.Option(help="The PrefEval folder (benchmark_dataset/explicit_preference).")],
    llm: Annotated[
        str, typer.Option(help="The frozen LLM (packaged name or folder).")
    ] = "qwen2.5-coder-0.5b",
    llm_runtime: Annotated[Runtime | None, runtime_option()] = None,
    margin: Annotated[
        float, typer.Option(help="log P(Yes) - log P(No) above which a pair is a conflict.")
    ] = 0.0,
    out_file: Annotated[Path | None, typer.Option("--out", help="Also write the scores as JSON.")] = None,
) -> None:
    """Precision and recall (95 % bootstrap intervals) of the LLM's verdicts and of the cosine alone."""
    from personamem.conflicts import ConflictDetector
    from personamem.encoder import default_encoder
    from personamem.eval.conflicts import load_conflict_pairs, score_conflicts
    from personamem.llm.load import load_llm

    pairs = load_conflict_pairs(data)
    model = load_llm(llm) if llm_runtime is None else load_llm(llm, runtime=llm_runtime)
    detector = ConflictDetector(model, margin=margin)
    scores, margins, cosines = score_conflicts(pairs, detector, default_encoder())
    replacing = sum(p.replaces for p in pairs)
    title = f"{len(pairs)} pairs ({replacing} replace), {llm}"
    table = Table("decided by", "said yes", "AUC", "precision", "recall", "F1", title=title)
    for s in scores:
        table.add_row(
            s.name,
            str(s.said_yes),
            f"{s.auc:.2f}",
            f"{s.precision:.2f} [{s.precision_ci[0]:.2f}, {s.precision_ci[1]:.2f}]" if s.said_yes else "–",
            f"{s.recall:.2f} [{s.recall_ci[0]:.2f}, {s.recall_ci[1]:.2f}]",
            f"{s.f1:.2f}",
        )
    out.print(table)
    if out_file is not None:
        body = {"llm": llm, "margin": margin, "scores": [asdict(s) for s in scores]}
        body["pairs"] = [
            {**asdict(p), "margin": m, "cosine": c} for p, m, c in zip(pairs, margins, cosines, strict=True)
        ]
        out_file.write_text(json.dumps(body, indent=1), encoding="utf-8")
