"""``personamem log`` and ``personamem feedback``: the interaction log, the training data of ``--from-store``.

The log is written by ``search`` and ``context`` calls of a pipeline with ``log_interactions = true``
and by :meth:`PersonaMem.feedback <personamem.memory.PersonaMem.feedback>`; its JSON Lines form is
documented in :mod:`personamem.interactions`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from personamem.console import out
from personamem.interactions import read_interactions, write_interactions

__all__ = ["feedback", "log_app"]

log_app = typer.Typer(
    help="The interaction log: logged search/context calls and their feedback, as JSON Lines.",
    no_args_is_help=True,
)


@log_app.command("export")
def export(
    ctx: typer.Context,
    out_file: Annotated[Path, typer.Option("--out", help="The JSONL file to write.")],
    user: Annotated[list[str] | None, typer.Option(help="Only this user (repeat for several).")] = None,
) -> None:
    """Write the logged interactions (oldest first), with their feedback, to a JSONL file."""
    with ctx.obj.open() as mem:
        written = write_interactions(out_file, mem.store.interactions.export(user or None))
    out.print(f"wrote {written} interaction(s) to {out_file}")


@log_app.command("import")
def import_(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A JSONL export ('personamem log export').")],
) -> None:
    """Store interactions from a JSONL export; the file is validated whole first, known ids are skipped.

    The users must have records in this store already (ingest them first).
    """
    interactions = read_interactions(path)
    with ctx.obj.open() as mem:
        new = mem.store.interactions.import_(interactions)
    out.print(f"imported {new} new interaction(s) of {len(interactions)} in {path}")


def feedback(
    ctx: typer.Context,
    interaction_id: Annotated[str, typer.Argument(help="The id a logged search or context returned.")],
    answer: Annotated[str | None, typer.Option(help="The answer the user accepted.")] = None,
    rating: Annotated[float | None, typer.Option(help="The user's rating, higher is better.")] = None,
    used: Annotated[
        list[str] | None, typer.Option(help="A record the answer used (repeat for several).")
    ] = None,
) -> None:
    """Report what happened after a logged call (PersonaMem.feedback)."""
    with ctx.obj.open() as mem:
        mem.feedback(interaction_id, answer=answer, rating=rating, used_record_ids=used)
    out.print(f"feedback stored for {interaction_id}")
