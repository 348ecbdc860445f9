"""``personamem eval-adapter`` as a function: query adapters against dense and hybrid on unseen users."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from personamem.datasets.table import BenchmarkName
from personamem.eval.runs.base import EvalRun, EvalSummary

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["AdapterEvalRun", "run"]


class AdapterEvalRun(EvalRun):
    """Which trained runs, on which benchmarks, beside which shipped adapters."""

    runs: Path
    """A folder of 'train adapter' runs named <variant>-s<seed>, sharing one split."""
    data_root: Path
    """The folder holding the benchmarks (locomo/, personabench/, ...)."""
    benchmarks: tuple[BenchmarkName, ...] = Field(default=(), alias="benchmark")
    """Benchmarks to test on (repeatable; default: every one the runs were split on)."""
    shipped: tuple[str, ...] = ()
    """Shipped adapters to test beside the runs (e.g. mixed)."""
    variants: tuple[str, ...] = Field(default=(), alias="variant")
    """Variants to test (repeatable; default: every one under --runs)."""
    fusion: bool = True
    """Also run each adapter as hybrid's dense side."""
    out_dir: Path | None = Field(default=None, alias="out")
    """report.json and report.md. [default: <runs>/report]"""


def run(config: AdapterEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Recall@5/10 and nDCG@10 of each variant (mean ± std over its training seeds) on unseen users.

    Raises:
        ValueError: no runs, runs on different splits, or a benchmark they were not split on.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.adapter_eval import evaluate_adapters, write_report

    report = evaluate_adapters(
        config.runs,
        config.data_root,
        default_encoder(),
        benchmarks=config.benchmarks,
        shipped=config.shipped,
        variants=config.variants,
        fusion=config.fusion,
        cache_dir=default_vector_cache(),
        progress=progress,
    )
    report.command = command
    write_report(report, config.out_dir or config.runs / "report")
    return EvalSummary(lines=[report.markdown()])
