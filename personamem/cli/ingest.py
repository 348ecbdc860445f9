"""``personamem ingest``: store records from a JSONL file or a benchmark's own files."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from personamem.console import out, progress_bar
from personamem.records import Record


class IngestFormat(StrEnum):
    """Input formats ``ingest`` understands."""

    JSONL = "jsonl"
    PERSONABENCH = "personabench"
    LOCOMO = "locomo"
    IKAT = "ikat"


def _load(path: Path, fmt: IngestFormat, user: str | None, noise: float, user_prefix: str) -> list[Record]:
    if fmt is IngestFormat.JSONL:
        from personamem.ingest.jsonl import read_jsonl

        return read_jsonl(path, user_id=user)
    if user is not None:
        raise typer.BadParameter(f"--user applies to jsonl only; {fmt.value} files name their own users")
    if fmt is IngestFormat.PERSONABENCH:
        from personamem.ingest.personabench import load_personabench

        return load_personabench(path, noise=noise)
    if fmt is IngestFormat.LOCOMO:
        from personamem.ingest.locomo import load_locomo

        return load_locomo(path)
    from personamem.ingest.ikat import load_ikat

    return load_ikat(path, user_prefix=user_prefix)


def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A JSONL file, or a benchmark file/folder with --format.")],
    user: Annotated[str | None, typer.Option(help="Owner of JSONL lines that name no user_id.")] = None,
    fmt: Annotated[IngestFormat, typer.Option("--format", help="Input format.")] = IngestFormat.JSONL,
    noise: Annotated[float, typer.Option(help="PersonaBench noise level (0.0, 0.3, 0.5, 0.7).")] = 0.0,
    user_prefix: Annotated[str, typer.Option(help="Prefix for iKAT user ids (topic numbers).")] = "",
) -> None:
    """Store records from a file; everything is validated before anything is written."""
    records = _load(path, fmt, user, noise, user_prefix)
    with ctx.obj.open() as mem, progress_bar() as bar:
        task = bar.add_task(f"ingesting {path.name}", total=len(records))
        advance: Callable[[int], None] = lambda n: bar.advance(task, n)  # noqa: E731
        mem.add_many(records, progress=advance)
    stored = len({(r.user_id, r.id) for r in records})  # a repeated id is one record, stored once
    users = len({r.user_id for r in records})
    out.print(f"stored {stored} record(s) for {users} user(s)")
