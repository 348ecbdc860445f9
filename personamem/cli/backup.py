"""``personamem backup`` and ``personamem restore``: a consistent copy of a local store while it serves."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from personamem.cli.store import StoreOptions
from personamem.console import err, out
from personamem.errors import ConfigError, InvalidInputError

__all__ = ["backup", "restore"]

ON_A_DATABASE = (
    "backup and restore copy a local store (--store DIR), and this one is on a database server "
    "(--sql-url). Back up PostgreSQL with pg_dump or point-in-time recovery; with pgvector the vectors "
    "are in the same database, with a Chroma server snapshot it after the database and run "
    "`personamem check --repair` after a restore. See docs/DEPLOY.md, section 'Backups'."
)


def _folder(options: StoreOptions) -> Path:
    """The local store's folder; a store on a database server is refused, saying what to do instead."""
    if options.sql_url or options.chroma_url:
        raise ConfigError(ON_A_DATABASE)
    return options.path


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False)


def backup(
    ctx: typer.Context,
    dest: Annotated[Path, typer.Argument(help="A new (or empty) folder to write the backup to.")],
) -> None:
    """Copy the local store into DEST while it serves; 'personamem restore DEST' brings it back.

    The copy holds every record acknowledged before the backup began, and is checked clean before it
    gets its name; other processes go on reading and writing meanwhile. A store on PostgreSQL is
    backed up with the database's own tools (docs/DEPLOY.md, "Backups").
    """
    from personamem.store.backup import backup as take

    try:
        summary = take(_folder(ctx.obj), dest, progress=_say)
    except InvalidInputError as error:
        raise typer.BadParameter(str(error)) from error
    out.print(
        f"backed up {summary.users} user(s), {summary.records} record(s) of {summary.source} "
        f"to {summary.folder} ({summary.size_bytes / 1e6:.1f} MB, taken {summary.taken_at})"
    )


def restore(
    ctx: typer.Context,
    src: Annotated[Path, typer.Argument(help="A folder 'personamem backup' wrote.")],
    force: Annotated[
        bool,
        typer.Option("--force", help="Replace the store in the folder (stop every process using it first)."),
    ] = False,
) -> None:
    """Bring a backup back as the local store (--store), checked first; replacing a store needs --force.

    The backup is copied beside the store's folder and checked clean (SQL and every vector agree)
    before it takes the folder's place, so a failed restore changes nothing. A folder of other files
    is never replaced, and --force replaces only the store's own files.
    """
    from personamem.store.backup import restore as bring_back

    try:
        summary = bring_back(src, _folder(ctx.obj), force=force, progress=_say)
    except InvalidInputError as error:
        raise typer.BadParameter(str(error)) from error
    out.print(
        f"restored {summary.users} user(s), {summary.records} record(s) into {summary.folder}: "
        f"the backup of {summary.source} taken {summary.taken_at}"
    )
