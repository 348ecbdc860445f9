"""``personamem eval`` as a function: retrieval methods on a benchmark, with a written report."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from personamem.eval.evaluate import EvalConfig
from personamem.eval.runs.base import EvalRun, EvalSummary

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["RetrievalEvalRun", "run"]

SHOWN_METRICS = (
    "recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10", "mrr", "pb_recall@5", "pb_ndcg@5",
    "answer_judged", "answer_f1", "answer_prompt_tokens",
)  # fmt: skip
"""The printed table's columns where the run has them (PersonaBench protocol, answers); the report has all."""


class RetrievalEvalRun(EvalRun):
    """What to evaluate (:class:`~personamem.eval.evaluate.EvalConfig`) and where the report goes."""

    evaluation: EvalConfig
    out_dir: Path | None = Field(default=None, alias="out")
    """Folder for report.json, report.md and plots. [default: ./personamem-eval/<name>]"""
    as_json: bool = Field(default=False, alias="json")
    """Print the JSON report instead of tables."""


def run(config: RetrievalEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Score retrieval methods on a benchmark: mean ± std over seeds, paired t-tests, a written report."""
    from personamem.datasets.vectors import default_vector_cache
    from personamem.eval.evaluate import run_eval
    from personamem.eval.report import metric_label
    from personamem.eval.stats import summarize
    from personamem.user_cache import default_cache_dir

    report = run_eval(
        config.evaluation,
        cache_dir=default_vector_cache(),
        store_dir=default_cache_dir() / "eval-stores",
        progress=progress,
        command=command,
    )
    written = report.write(config.out_dir or Path("personamem-eval") / report.benchmark.name)
    if config.as_json:
        return EvalSummary(json=report.to_json())
    shown = [m for m in SHOWN_METRICS if m in report.runs[0].scores]
    rows = []
    for method_run in report.runs:
        cells = []
        for metric in shown:
            s = summarize(method_run, metric)
            if s.mean != s.mean:  # NaN: an answer baseline ranks nothing
                cells.append("—")
            elif metric == "answer_prompt_tokens":
                cells.append(f"{s.mean:.0f}")
            else:
                cells.append(f"{s.mean:.3f}" if s.seeds < 2 else f"{s.mean:.3f}±{s.std:.3f}")
        rows.append((method_run.method, *cells))
    lines = []
    for c in report.comparisons():
        if c.metric in ("recall@5", "ndcg@5", "answer_judged"):
            p = "identical" if c.p != c.p else f"p = {c.p:.3g}"
            lines.append(f"{c.method} vs {c.baseline}, {metric_label(c.metric)}: {c.difference:+.4f} ({p})")
    if report.benchmark.skipped:
        reasons = dict(report.benchmark.skip_reasons())
        lines.append(f"skipped {len(report.benchmark.skipped)} questions: {reasons}")
    lines.append(f"report: {written[1]}")
    seeds = config.evaluation.seeds
    return EvalSummary(
        title=f"{report.benchmark.name} (mean ± std over {seeds} seeds for stochastic methods)",
        columns=("method", *map(metric_label, shown)),
        rows=rows,
        lines=lines,
    )
