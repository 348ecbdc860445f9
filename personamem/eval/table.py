"""Every evaluation by one name: the table the ``personamem eval*`` commands are built from.

A row names a run config (its fields, nested models' included, are the command's options, each
documented once under the field) and a ``run(config, progress=...)`` in :mod:`personamem.eval.runs`
that reads the data, evaluates, writes its report and returns the summary the command prints. A new
evaluation is one module there and one row here, with no command-line code (as a trainer is, in
:mod:`personamem.trainers.table`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel

from personamem.eval.runs import adapters, conflicts, memory, retrieval, rewriting, towers
from personamem.eval.runs.base import EvalSummary

__all__ = ["EVALS", "EvalSpec"]


@dataclass(frozen=True)
class EvalSpec:
    """One row of the table.

    Attributes:
        name: the command, ``personamem <name>``.
        config: the run config the command's options build.
        run: evaluates and writes the report; returns the summary. The command's help is the first
            paragraph of its docstring.
        exclude: the config's field paths that are not options (they keep their defaults).
    """

    name: str
    config: type[BaseModel]
    run: Callable[..., EvalSummary]
    exclude: tuple[str, ...] = ()


EVALS: tuple[EvalSpec, ...] = (
    EvalSpec("eval", retrieval.RetrievalEvalRun, retrieval.run),
    EvalSpec("eval-rewriting", rewriting.RewritingEvalRun, rewriting.run),
    EvalSpec("eval-memory", memory.MemoryEvalRun, memory.run, exclude=memory.NOT_OPTIONS),
    EvalSpec("eval-pgret", towers.TowerEvalRun, towers.run),
    EvalSpec("eval-adapter", adapters.AdapterEvalRun, adapters.run),
    EvalSpec("eval-conflicts", conflicts.ConflictEvalRun, conflicts.run),
)
"""Every evaluation command, in ``personamem --help``'s order."""
