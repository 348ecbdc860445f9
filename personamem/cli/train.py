"""``personamem train``: one command per row of the trainers' table (adapter, PURPLE, MemRerank, PG-Ret)."""

from __future__ import annotations

from collections.abc import Callable

import typer
from rich import box
from rich.table import Table

from personamem.cli.tabled import run_help, table_command
from personamem.console import out
from personamem.trainers.run import TrainSummary
from personamem.trainers.table import TRAINERS, TrainerSpec

__all__ = ["train_app"]

train_app = typer.Typer(help="Train learned components against the frozen LLM.", no_args_is_help=True)


def _show(summary: TrainSummary) -> None:
    table = Table("", "", box=box.SIMPLE, show_header=False, title=summary.title)
    for name, value in summary.rows:
        table.add_row(name, value)
    out.print(table)
    out.print(f"To use it, add to the pipeline table: {summary.use}")


def _command(spec: TrainerSpec) -> Callable[..., None]:
    """The command for ``spec``: its run config's fields as options, its summary printed."""
    return table_command(
        spec.name,
        spec.config,
        lambda config, progress: spec.run(config, progress=progress),
        _show,
        help=run_help(spec.run, spec.help),
        config_file=True,
    )


for _spec in TRAINERS:
    train_app.command(_spec.name, short_help=_spec.help)(_command(_spec))
