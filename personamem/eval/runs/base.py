"""What every evaluation's run takes and gives: a run config, and the summary its command prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = ["EvalRun", "EvalSummary"]


class EvalRun(BaseModel):
    """An evaluation command's settings: each field is an option, its docstring the option's help."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, validate_by_name=True
    )


@dataclass(frozen=True)
class EvalSummary:
    """What an evaluation reports when it is done: a table, lines under it, or its JSON instead.

    Attributes:
        title: the table's title.
        columns: the table's header (none: no table).
        rows: its rows, cells as printed.
        lines: printed after the table (comparisons, a markdown report, where it was written).
        json: printed instead of everything else when set (``eval --json``).
    """

    title: str = ""
    columns: tuple[str, ...] = ()
    rows: Sequence[tuple[str, ...]] = ()
    lines: Sequence[str] = ()
    json: Mapping[str, Any] | None = None
