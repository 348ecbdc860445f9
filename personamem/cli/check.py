"""``personamem check``: find, and with ``--repair`` fix, what a crash left between SQL and the index."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from personamem.console import err, out, progress_bar
from personamem.store import ConsistencyReport
from personamem.store.tenants import SEPARATOR

__all__ = ["check"]

_PROBLEMS = (
    ("unreadable_vectors", "vectors the index lists but cannot read back"),
    ("missing_vectors", "indexed rows without a vector"),
    ("orphan_vectors", "vectors without a row"),
    ("pending", "rows waiting to be indexed"),
)


def _who(key: str) -> str:
    """``tenant/user`` for a tenant's user, the user id for the store's own."""
    if key.startswith(SEPARATOR):
        tenant, _, user = key[1:].partition(SEPARATOR)
        return f"{tenant}/{user}"
    return key


def _show(report: ConsistencyReport) -> None:
    table = Table("user", "problem", "records")
    for name, what in _PROBLEMS:
        for key, ids in sorted(getattr(report, name).items()):
            table.add_row(_who(key), what, str(len(ids)))
    if report.orphan_collections:
        table.add_row("(none)", "collections of no user", str(len(report.orphan_collections)))
    out.print(table)


def check(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Rebuild damaged users from SQL and index pending rows.")
    ] = False,
) -> None:
    """Check that SQL and the vector index agree and every vector reads back; --repair fixes it.

    Reads every user's vectors (a full scan: minutes on a large store). Exits 1 when a problem is
    left, so a scheduler can alert on it. Searches heal a damaged user by themselves; this finds
    them all at once, offline.
    """
    with ctx.obj.open() as mem:
        with progress_bar() as bar:
            task = bar.add_task("reading every user's vectors back", total=None)
            report = mem.store.check(lambda done, total: bar.update(task, completed=done, total=total))
        if report.ok:
            out.print(f"consistent: {len(mem.store.catalog.all_users())} user(s), every vector reads back")
            return
        _show(report)
        if not repair:
            err.print("[yellow]problems found[/yellow]: run `personamem check --repair` to fix them")
            raise typer.Exit(1)
        rebuilt = mem.store.heal(report)
        after = mem.store.check()
    out.print(f"rebuilt {len(rebuilt)} user(s) from SQL: {', '.join(_who(k) for k in rebuilt) or '-'}")
    if not after.ok:
        _show(after)
        err.print("[red]error:[/red] problems remain after the repair")
        raise typer.Exit(1)
    out.print("consistent now")
