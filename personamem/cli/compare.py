"""``personamem compare``: a paired t-test between two written evaluation reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from personamem.console import out

__all__ = ["compare"]


def compare(
    ours: Annotated[Path, typer.Argument(help="report.json of the run to test.")],
    theirs: Annotated[Path, typer.Argument(help="report.json of the run to test against.")],
    method: Annotated[str, typer.Option(help="Method in the first report.")] = "dense",
    metric: Annotated[
        str, typer.Option(help="Metric key, e.g. recall@5, ndcg@10, pb_recall@5.")
    ] = "recall@5",
    baseline: Annotated[
        str | None, typer.Option(help="Method in the second report. [default: --method]")
    ] = None,
) -> None:
    """Paired t-test between two written reports over their common questions (e.g. two renderings)."""
    from personamem.eval.report import metric_label
    from personamem.eval.stats import compare_reports

    reports = []
    for path in (ours, theirs):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            raise typer.BadParameter(f"{path}: not a readable report.json ({exc})") from None
    try:
        c = compare_reports(reports[0], reports[1], method, metric, baseline=baseline)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    p = "identical" if c.p != c.p else f"p = {c.p:.3g}"
    out.print(
        f"{metric_label(metric)}: {c.method} ({ours}) vs {c.baseline} ({theirs}): {c.difference:+.4f} "
        f"over {c.questions} questions (t = {c.t:.2f}, {p})",
        soft_wrap=True,
    )
