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
    path: Annotated[
        Path,
        typer.Argument(
            help="A user's export (from 'personamem export'); with --server, also a records JSONL "
            "(one record per line, as 'personamem ingest' reads)."
        ),
    ],
    user: Annotated[
        str | None,
        typer.Option(
            help="Import as this user (default: the file's); in a records JSONL, the owner of lines "
            "that name none."
        ),
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="A personamem server (http://host:port) to send the file to, instead of the local store."
        ),
    ] = None,
    key: Annotated[
        str | None,
        typer.Option(envvar="PERSONAMEM_API_KEY", help="The server's API key (write scope or above)."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option("--follow", help="With --server: wait for the import job, showing its progress."),
    ] = False,
) -> None:
    """Store a user's export locally, or send records to a server as a resumable import job (--server).

    Without --server, the file is a user's export, validated whole first; importing twice changes
    nothing. With --server URL, a records JSONL goes up as one background job (in chunks under the
    server's body limit, every line validated before any record is stored) and the command prints
    its id; --follow then shows its progress and exits 1 unless it ends done with no failed line.
    A user's export sent to a server is stored in one request, as without --server.
    """
    if server is None:
        if follow or key:
            raise typer.BadParameter("--follow and --key go with --server URL")
        with ctx.obj.open() as mem:
            added = mem.import_user(path, user_id=user)
        out.print(
            f"imported {added.records} new record(s), {added.interactions} new interaction(s) from {path}"
        )
        return
    if not key:
        raise typer.BadParameter("a server needs an API key: --key KEY or $PERSONAMEM_API_KEY")
    from personamem.cli.jobs import send_export, send_records, user_export

    if user_export(path):
        send_export(path, server, key, user)
        return
    if not send_records(path, server, key, user, follow=follow):
        raise typer.Exit(1)
