"""The evaluation commands (``eval``, ``eval-memory``, ...): one per row of the evaluations' table.

Each command's options are its run config's fields, its help its run's docstring up to the API
sections (:mod:`personamem.cli.tabled`, as ``personamem train``'s); the run evaluates and writes its
report, and the command prints the summary it returns (:data:`personamem.eval.table.EVALS`).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich import box
from rich.table import Table

from personamem.cli.options import command_line
from personamem.cli.tabled import run_help, table_command
from personamem.console import out
from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.eval.table import EVALS, EvalSpec

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["COMMANDS"]


def _command(spec: EvalSpec) -> Callable[..., None]:
    """The command for ``spec``: its run config's fields as options, its summary printed."""

    def run(config: EvalRun, progress: Progress) -> EvalSummary:
        given = shlex.join(["personamem", spec.name, *command_line(config)])
        return spec.run(config, progress=progress, command=given)

    return table_command(spec.name, spec.config, run, _show, help=run_help(spec.run), exclude=spec.exclude)


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
