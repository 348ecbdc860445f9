"""Commands built from a table row: a run config's fields as options, its run under a progress bar.

``personamem train <name>`` (the trainers' table) and the evaluation commands (the evaluations'
table) are all made here, so they report errors, show progress and take their help alike.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from pydantic import BaseModel

from personamem.cli.options import config_options
from personamem.console import progress_bar
from personamem.errors import InsufficientDataError, PersonaMemError

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["run_help", "table_command"]

R = TypeVar("R")

_SECTIONS = re.compile(r"^(?:Args|Returns|Raises):$", re.MULTILINE)
"""Where a run's docstring turns from what it does (the command's help) to its API sections."""


def run_help(run: Callable[..., Any], fallback: str = "") -> str:
    """A command's help: its run's docstring up to the API sections (``fallback`` without one)."""
    return _SECTIONS.split(inspect.getdoc(run) or fallback)[0].strip()


def table_command(
    name: str,
    config: type[BaseModel],
    run: Callable[[Any, Progress], R | None],
    show: Callable[[R], None],
    *,
    help: str,
    config_file: bool = False,
    exclude: Collection[str] = (),
) -> Callable[..., None]:
    """The command ``name``: ``config``'s fields as options, ``run(config, progress)``, ``show`` its result.

    Bad input the run finds (too few users, a foreign run folder, no runs to evaluate: a ``ValueError``)
    is a usage error (exit 2); the library's own errors (bad data files) exit 1. A run that returns None
    (a process other than the main one of a launched run) shows nothing.
    """

    def command(config: BaseModel) -> None:
        with progress_bar() as progress:
            try:
                result = run(config, progress)
            except InsufficientDataError as exc:
                raise typer.BadParameter(str(exc)) from None
            except PersonaMemError:
                raise
            except ValueError as exc:
                raise typer.BadParameter(str(exc)) from None
        if result is not None:
            show(result)

    command.__annotations__ = {"config": config, "return": None}
    command.__name__ = command.__qualname__ = name.replace("-", "_")
    command.__doc__ = help
    return config_options(config_file=config_file, exclude=exclude)(command)
