"""``personamem ingest``: store records from a JSONL file or a benchmark's own files."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.datasets.table import RecordFormat, RecordOptions, dataset, read_records, stray_options

_JSONL = RecordFormat("jsonl")


@config_options()
def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A JSONL file, or a benchmark file/folder with --format.")],
    fmt: Annotated[RecordFormat, typer.Option("--format", help="Input format.")] = _JSONL,
    *,
    options: RecordOptions,
) -> None:
    """Store records from a file; everything is validated before anything is written."""
    stray = stray_options(dataset(fmt.value), options)
    if stray:
        raise typer.BadParameter(f"{', '.join(stray)} do(es) not apply to {fmt.value}")
    records = read_records(fmt.value, path, options)
    with ctx.obj.open() as mem, progress_bar() as bar:
        task = bar.add_task(f"ingesting {path.name}", total=len(records))
        advance: Callable[[int], None] = lambda n: bar.advance(task, n)  # noqa: E731
        mem.add_many(records, progress=advance)
    stored = len({(r.user_id, r.id) for r in records})  # a repeated id is one record, stored once
    users = len({r.user_id for r in records})
    out.print(f"stored {stored} record(s) for {users} user(s)")
