"""``personamem improve``: fit the first stage to this store's data; live only when it validates better."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.trainers.adapter.config import ImproveConfig

__all__ = ["improve"]


@config_options()
def improve(
    ctx: typer.Context,
    *,
    settings: ImproveConfig,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Put back the pipeline file the last improve replaced.")
    ] = False,
) -> None:
    """Fit the query adapter and hybrid's weights to this store; go live only if validation improves.

    Learns from feedback on logged calls where there is enough, else from questions the packaged LLM
    writes for sampled records (cached in the store, so an interrupted run resumes). The live
    pipeline and the candidate are compared on users held out of the fit; the pipeline file
    (--config, else ./personamem.toml) is rewritten only when the candidate wins, and the previous
    file is kept for --rollback. Schedule it (cron, a job runner) as the store grows.
    """
    from personamem.errors import ConfigError, InsufficientDataError
    from personamem.trainers.adapter import improve as improving

    config_file: Path = ctx.obj.pipeline_file
    if rollback:
        try:
            improving.rollback(config_file)
        except ConfigError as exc:
            raise typer.BadParameter(str(exc)) from None
        out.print(f"{config_file}: the previous pipeline is back")
        return
    # a pipeline file improve has not written yet is the package default, not an error
    opened = ctx.obj.open() if config_file.is_file() else ctx.obj.open_default()
    with opened as mem, progress_bar() as progress:
        try:
            result = improving.improve(mem, config_file, settings, progress=progress)
        except (InsufficientDataError, ConfigError) as exc:
            raise typer.BadParameter(str(exc)) from None
    table = Table(
        "", "live pipeline", "candidate", box=box.SIMPLE, title=f"personamem improve ({result.signal})"
    )
    for key in result.after:
        table.add_row(key, _cell(result.before.get(key, "")), _cell(result.after[key]))
    out.print(table)
    for name, value in result.counts.items():
        out.print(f"  {name.replace('_', ' ')}: {value}")
    for note in result.notes:
        out.print(f"  {note}")
    if result.live:
        out.print(
            f"[bold]live[/]: {config_file} now serves the candidate (previous kept as {result.previous})"
        )
    else:
        out.print(
            "kept the live pipeline: the candidate did not validate better "
            f"(adapter left in {result.adapter})"
        )


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
