"""``personamem get``, ``records``, ``update`` and ``delete``: one user's records, one at a time."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from personamem.console import err, out
from personamem.contract import record_json
from personamem.records import Record

__all__ = ["delete", "get", "records", "update"]

_JSON = typer.Option("--json", help="Print the REST answer's JSON instead of lines.")


def _line(record: Record) -> str:
    category = f" [{record.category}]" if record.category else ""
    return f"{record.id}  {record.kind.value}{category}  {record.text}"


def _show(record: Record, as_json: bool) -> None:
    """One record: its REST JSON on a line, or id, kind, category and text."""
    if as_json:
        typer.echo(json.dumps(record_json(record)))
    else:
        out.print(_line(record), highlight=False, markup=False)


def get(
    ctx: typer.Context,
    record: Annotated[str, typer.Argument(help="The record's id.")],
    user: Annotated[str, typer.Option(help="Whose record.")],
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Show one record of a user (exit 1 when the user has no such record)."""
    with ctx.obj.open() as mem:
        found = mem.get(user, record)
    if found is None:
        err.print(f"user {user} has no record {record}", highlight=False, markup=False)
        raise typer.Exit(1)
    _show(found, as_json)


def records(
    ctx: typer.Context,
    user: Annotated[str, typer.Option(help="Whose records.")],
    as_json: Annotated[bool, typer.Option("--json", help="One record's JSON a line.")] = False,
) -> None:
    """List a user's records, oldest first: id, kind, category and text."""
    with ctx.obj.open() as mem:
        found = mem.records(user)
    for record in found:
        _show(record, as_json)


def update(
    ctx: typer.Context,
    record: Annotated[str, typer.Argument(help="The record's id.")],
    user: Annotated[str, typer.Option(help="Whose record.")],
    text: Annotated[str | None, typer.Option(help="The new text (re-encoded).")] = None,
    kind: Annotated[str | None, typer.Option(help="The new kind.")] = None,
    category: Annotated[str | None, typer.Option(help="The new category.")] = None,
    metadata: Annotated[
        str | None, typer.Option(help='The new metadata, a JSON object such as \'{"source": "chat"}\'.')
    ] = None,
) -> None:
    """Replace fields of one record; it keeps its id, and its history records the update."""
    changes: dict[str, Any] = {"text": text, "kind": kind, "category": category}
    if metadata is not None:
        try:
            changes["metadata"] = json.loads(metadata)
        except json.JSONDecodeError as error:
            raise typer.BadParameter(f"not JSON ({error})", param_hint="--metadata") from None
    changes = {field: value for field, value in changes.items() if value is not None}
    if not changes:
        raise typer.BadParameter("give at least one of --text, --kind, --category, --metadata")
    with ctx.obj.open() as mem:
        updated = mem.update(user, record, **changes)
    out.print(f"updated {_line(updated)}", highlight=False, markup=False)


def delete(
    ctx: typer.Context,
    ids: Annotated[list[str], typer.Argument(help="The ids of the records to delete.")],
    user: Annotated[str, typer.Option(help="Whose records.")],
) -> None:
    """Delete records of a user, leaving no trace of their text (exit 1 when none was found)."""
    with ctx.obj.open() as mem:
        deleted = mem.delete(user, ids)
    missing = [rid for rid in ids if rid not in deleted]
    if deleted:
        out.print(f"deleted {len(deleted)} record(s): {', '.join(deleted)}", highlight=False, markup=False)
    if missing:
        err.print(f"user {user} has no record {', '.join(missing)}", highlight=False, markup=False)
    if not deleted:
        raise typer.Exit(1)
