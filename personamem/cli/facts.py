"""``personamem supersede``, ``history``, ``purge`` and ``ttl``: facts that change and records that expire."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Annotated

import typer

from personamem.console import out
from personamem.contract import RecordHistory

__all__ = ["history", "parse_duration", "purge", "supersede", "ttl"]

_ERASURES = ("deleted", "expired", "forgotten")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s`` or plain seconds, as a timedelta.

    Raises:
        typer.BadParameter: anything else, or zero.
    """
    match = _DURATION.fullmatch(text.strip().lower())
    seconds = float(match.group(1)) * _UNIT_S[match.group(2)] if match else 0.0
    if seconds <= 0:
        raise typer.BadParameter(f"expected a positive duration such as 30d, 12h, 90m or 3600, got {text!r}")
    return timedelta(seconds=seconds)


def supersede(
    ctx: typer.Context,
    text: Annotated[str, typer.Argument(help="The new fact, e.g. 'My name is Bob.'")],
    user: Annotated[str, typer.Option(help="Whose fact changes.")],
    old: Annotated[str, typer.Option(help="The id of the record the new fact replaces.")],
    kind: Annotated[str, typer.Option(help="The new record's kind.")] = "knowledge",
    valid_from: Annotated[
        datetime | None, typer.Option(help="When the new fact starts to hold (default: now; UTC if naive).")
    ] = None,
) -> None:
    """Store a fact that replaces an older one; the old one stays in the history, no longer current."""
    with ctx.obj.open() as mem:
        record = mem.supersede(user, old, text, kind=kind, valid_from=valid_from)
    start = record.valid_from.isoformat() if record.valid_from else "now"
    out.print(f"stored {record.id}, current from {start}; {old} is history from then", highlight=False)


def history(
    ctx: typer.Context,
    record: Annotated[str, typer.Argument(help="The record's id.")],
    user: Annotated[str, typer.Option(help="Whose record.")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the REST answer's JSON (GET /v1/history) instead of lines.")
    ] = False,
) -> None:
    """Show what happened to one record: when, by whom, and its text while it exists."""
    with ctx.obj.open() as mem:
        events = mem.history(user, record)
    if as_json:
        typer.echo(RecordHistory(events=events).model_dump_json())
        return
    if not events:
        out.print(f"user {user} has no history of a record {record}", highlight=False, markup=False)
    for event in events:
        text = event.text if event.text is not None else ("" if event.event in _ERASURES else "(erased)")
        line = f"{event.at:%Y-%m-%d %H:%M:%S}  {event.event:<10}  {event.actor}  {text}"
        out.print(line.rstrip(), highlight=False, markup=False)


def purge(ctx: typer.Context) -> None:
    """Erase every expired record now, of every tenant (the server's background sweep does it too)."""
    with ctx.obj.open() as mem:
        purged = mem.purge(all_tenants=True)
    out.print(f"erased {purged} expired record(s)")


def ttl(
    ctx: typer.Context,
    duration: Annotated[
        str | None, typer.Argument(help="30d, 12h, 90m, seconds, or 'off'; omit to show the current one.")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Set or show this tenant's own default.")] = None,
) -> None:
    """Show or set the default time-to-live of new records (of the store, or of one tenant)."""
    with ctx.obj.open() as mem:
        view = mem.tenant(tenant) if tenant else mem
        if duration is not None:
            view.set_ttl(None if duration.strip().lower() == "off" else parse_duration(duration))
        current = view.ttl()
    whose = f"tenant {tenant}" if tenant else "the store"
    shown = "off (records do not expire)" if current is None else str(current)
    out.print(f"default time-to-live of {whose}: {shown}", highlight=False)
