"""What every trainer's ``run(config)`` takes and gives: a run config and a summary to print.

A run config holds the trainer's data settings (``data``), its training settings (``train``), the
output folder and whether to resume; ``personamem train <name>`` offers all of them as options (a
nested model's fields are options of their own, see :mod:`personamem.cli.options`). The summary is
what the command prints: rows of a table and how to use the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["TrainSummary", "TrainerRun"]


class TrainerRun(BaseModel):
    """A training run: data settings, training settings, where to write, whether to resume.

    Each trainer's subclass narrows ``data`` and ``train`` to its own models and gives ``out_dir``
    (``--out``) its default and documentation; the options keep this order.
    """

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, validate_by_name=True
    )

    data: BaseModel
    train: BaseModel
    out_dir: Path = Field(alias="out")
    resume: bool = False
    """Continue from --out's last checkpoint."""

    @model_validator(mode="before")
    @classmethod
    def _data_from_defaults(cls, data: object) -> object:
        """No data option given is still a data config (whose own check names the missing source)."""
        if isinstance(data, Mapping) and "data" not in data:
            return {**data, "data": {}}
        return data


@dataclass(frozen=True)
class TrainSummary:
    """What a run reports when it is done.

    Attributes:
        title: the table's title.
        rows: (what, value) pairs.
        use: how to use the result (a line of the pipeline table).
    """

    title: str
    rows: list[tuple[str, str]] = field(default_factory=list)
    use: str = ""
