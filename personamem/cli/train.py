"""``personamem train``: one command per row of the trainers' table (adapter, PURPLE, MemRerank, PG-Ret)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.errors import InsufficientDataError, PersonaMemError
from personamem.trainers.run import TrainerRun
from personamem.trainers.table import TRAINERS, TrainerSpec

__all__ = ["train_app"]

train_app = typer.Typer(help="Train learned components against the frozen LLM.", no_args_is_help=True)


_SECTIONS = re.compile(r"^(?:Args|Returns|Raises):$", re.MULTILINE)
"""Where a run's docstring turns from what it does (the command's help) to its API sections."""


def _command(spec: TrainerSpec) -> Callable[..., None]:
    """The command for ``spec``: its run config's fields as options, its summary printed."""

    def command(config: TrainerRun) -> None:
        with progress_bar() as progress:
            try:
                summary = spec.run(config, progress=progress)
            except InsufficientDataError as exc:
                raise typer.BadParameter(str(exc)) from None
            except PersonaMemError:  # bad data files and the like: the library's own errors, exit 1
                raise
            except ValueError as exc:  # too few users, a foreign run in --out: what was asked is wrong
                raise typer.BadParameter(str(exc)) from None
        if summary is None:  # a process other than the main one of a launched run
            return
        table = Table("", "", box=box.SIMPLE, show_header=False, title=summary.title)
        for name, value in summary.rows:
            table.add_row(name, value)
        out.print(table)
        out.print(f"To use it, add to the pipeline table: {summary.use}")

    command.__annotations__ = {"config": spec.config, "return": None}
    command.__name__ = command.__qualname__ = spec.name
    command.__doc__ = _SECTIONS.split(inspect.getdoc(spec.run) or spec.help)[0].strip()
    return config_options(config_file=True)(command)


for _spec in TRAINERS:
    train_app.command(_spec.name, short_help=_spec.help)(_command(_spec))
