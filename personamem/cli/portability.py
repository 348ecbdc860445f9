"""``personamem export`` and ``personamem import``: one user's data as JSON Lines, and back."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from personamem.console import out

__all__ = ["export_user", "import_user"]


def export_user(
    ctx: typer.Context,
    user: Annotated[str, typer.Option(help="Whose data to export.")],
    out_file: Annotated[Path, typer.Option("--out", help="The JSONL file to write.")],
    interactions: Annotated[bool, typer.Option(help="Also the user's logged search/context calls.")] = False,
) -> None:
    """Write a user's records (and logged calls) to a JSONL file that 'personamem import' reads."""
    with ctx.obj.open() as mem:
        written = mem.export(user, out_file, interactions=interactions)
    out.print(f"wrote {written} line(s) of user {user} to {out_file}")


def import_user(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A file from 'personamem export'.")],
    user: Annotated[str | None, typer.Option(help="Import as this user (default: the file's).")] = None,
) -> None:
    """Store a user's export; the file is validated whole first, and importing twice changes nothing."""
    with ctx.obj.open() as mem:
        added = mem.import_user(path, user_id=user)
    out.print(f"imported {added.records} new record(s), {added.interactions} new interaction(s) from {path}")
