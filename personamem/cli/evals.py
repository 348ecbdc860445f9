"""The evaluation commands (``eval``, ``eval-memory``, ...): one per row of the evaluations' table.

Each command's options are its run config's fields (:mod:`personamem.cli.options`), its help the
first paragraph of its run's docstring; the run evaluates and writes its report, and the command
prints the summary it returns (:data:`personamem.eval.table.EVALS`).
"""

from __future__ import annotations

import inspect
import shlex
from collections.abc import Callable

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import command_line, config_options
from personamem.console import out, progress_bar
from personamem.errors import PersonaMemError
from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.eval.table import EVALS, EvalSpec

__all__ = ["COMMANDS"]


def _command(spec: EvalSpec) -> Callable[..., None]:
    """The command for ``spec``: its run config's fields as options, its summary printed."""

    def command(config: EvalRun) -> None:
        given = shlex.join(["personamem", spec.name, *command_line(config)])
        with progress_bar() as progress:
            try:
                summary = spec.run(config, progress=progress, command=given)
            except PersonaMemError:  # bad data files and the like: the library's own errors, exit 1
                raise
            except ValueError as exc:  # no runs to evaluate, runs of other splits: what was asked is wrong
                raise typer.BadParameter(str(exc)) from None
        _show(summary)

    command.__annotations__ = {"config": spec.config, "return": None}
    command.__name__ = command.__qualname__ = spec.name.replace("-", "_")
    command.__doc__ = (inspect.getdoc(spec.run) or "").split("\n\n")[0]
    return config_options(exclude=spec.exclude)(command)


def _show(summary: EvalSummary) -> None:
    if summary.json is not None:
        out.print_json(data=summary.json)
        return
    if summary.columns:
        table = Table(*summary.columns, title=summary.title, box=box.SIMPLE_HEAD)
        for row in summary.rows:
            table.add_row(*row)
        out.print(table)
    for line in summary.lines:
        out.print(line)


COMMANDS = {spec.name: _command(spec) for spec in EVALS}
"""Every evaluation command by its name (the root group's rows load them from here)."""
