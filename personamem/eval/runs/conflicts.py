"""``personamem eval-conflicts`` as a function: precision of conflict detection on PrefEval's pairs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.llm.load import DEFAULT_RUNTIME, Runtime

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["ConflictEvalRun", "run"]


class ConflictEvalRun(EvalRun):
    """Which pairs, which LLM, and where its verdicts go."""

    data: Path
    """The PrefEval folder (benchmark_dataset/explicit_preference)."""
    llm: str = "qwen2.5-coder-0.5b"
    """The frozen LLM (packaged name or folder)."""
    llm_runtime: Runtime = DEFAULT_RUNTIME
    """The local LLM engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the reference)."""
    margin: float = 0.0
    """log P(Yes) - log P(No) above which a pair is a conflict."""
    max_pairs: int | None = Field(default=None, ge=1)
    """Score an evenly spaced subset of this many pairs."""
    out_file: Path | None = Field(default=None, alias="out")
    """Also write the scores as JSON."""


def run(config: ConflictEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Precision and recall (95 % bootstrap intervals) of the LLM's verdicts and of the cosine alone."""
    from personamem.conflicts import ConflictDetector
    from personamem.datasets.benchmark import evenly_spaced
    from personamem.encoder import default_encoder
    from personamem.eval.conflicts import load_conflict_pairs, score_conflicts
    from personamem.llm.load import load_llm

    del progress, command  # one pass over a few hundred pairs; the JSON names its settings
    pairs = evenly_spaced(load_conflict_pairs(config.data), config.max_pairs)
    detector = ConflictDetector(load_llm(config.llm, runtime=config.llm_runtime), margin=config.margin)
    scores, margins, cosines = score_conflicts(pairs, detector, default_encoder())
    replacing = sum(p.replaces for p in pairs)
    rows = [
        (
            s.name,
            str(s.said_yes),
            f"{s.auc:.2f}",
            f"{s.precision:.2f} [{s.precision_ci[0]:.2f}, {s.precision_ci[1]:.2f}]" if s.said_yes else "–",
            f"{s.recall:.2f} [{s.recall_ci[0]:.2f}, {s.recall_ci[1]:.2f}]",
            f"{s.f1:.2f}",
        )
        for s in scores
    ]
    if config.out_file is not None:
        body = {"llm": config.llm, "margin": config.margin, "scores": [asdict(s) for s in scores]}
        body["pairs"] = [
            {**asdict(p), "margin": m, "cosine": c} for p, m, c in zip(pairs, margins, cosines, strict=True)
        ]
        config.out_file.write_text(json.dumps(body, indent=1), encoding="utf-8")
    return EvalSummary(
        title=f"{len(pairs)} pairs ({replacing} replace), {config.llm}",
        columns=("decided by", "said yes", "AUC", "precision", "recall", "F1"),
        rows=rows,
    )
