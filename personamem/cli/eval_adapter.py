"""``personamem eval-adapter``: query adapters against dense and hybrid on each benchmark's held-out users."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from personamem.console import out, progress_bar
from personamem.datasets.table import BenchmarkName

__all__ = ["eval_adapter"]


def eval_adapter(
    runs: Annotated[
        Path,
        typer.Option(help="A folder of 'train adapter' runs named <variant>-s<seed>, sharing one split."),
    ],
    data_root: Annotated[
        Path, typer.Option(help="The folder holding the benchmarks (locomo/, personabench/, ...).")
    ],
    benchmark: Annotated[
        list[BenchmarkName] | None,
        typer.Option(help="Benchmarks to test on (repeatable; default: every one the runs were split on)."),
    ] = None,
    shipped: Annotated[
        list[str] | None, typer.Option(help="Shipped adapters to test beside the runs (e.g. mixed).")
    ] = None,
    variant: Annotated[
        list[str] | None, typer.Option(help="Variants to test (repeatable; default: every one under --runs).")
    ] = None,
    fusion: Annotated[bool, typer.Option(help="Also run each adapter as hybrid's dense side.")] = True,
    out_dir: Annotated[
        Path | None, typer.Option("--out", help="report.json and report.md. [default: <runs>/report]")
    ] = None,
) -> None:
    """Recall@5/10 and nDCG@10 of each variant (mean ± std over its training seeds) on unseen users."""
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.eval.adapter_eval import evaluate_adapters, write_report

    with progress_bar() as progress:
        try:
            report = evaluate_adapters(
                runs,
                data_root,
                default_encoder(),
                benchmarks=benchmark or (),
                shipped=shipped or (),
                variants=variant or (),
                fusion=fusion,
                cache_dir=default_vector_cache(),
                progress=progress,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    given = ["--runs", str(runs), "--data-root", str(data_root)]
    given += [arg for b in benchmark or () for arg in ("--benchmark", b.value)]
    given += [arg for name in shipped or () for arg in ("--shipped", name)]
    given += [arg for name in variant or () for arg in ("--variant", name)]
    given += [] if fusion else ["--no-fusion"]
    report.command = shlex.join(["personamem", "eval-adapter", *given])
    write_report(report, out_dir or runs / "report")
    out.print(report.markdown())
