"""``personamem mcp``: the memory as MCP tools over stdin/stdout, for desktop agents."""

from __future__ import annotations

from typing import Annotated

import typer

from personamem.errors import MissingExtraError
from personamem.methods import ServedMethods

__all__ = ["mcp"]


def mcp(
    ctx: typer.Context,
    tenant: Annotated[
        str | None,
        typer.Option(help="Serve only this tenant's users, as its API keys see them on the REST server."),
    ] = None,
    allow_method: Annotated[
        list[str] | None,
        typer.Option(
            help="Also let recall run this method (repeatable), as `personamem serve --allow-method` does: "
            "a checkpoint or pipeline-file method as the agent must write it, or NAME=METHOD. Without "
            "it, the agent may name the plain methods and the shipped adapters only, never a path."
        ),
    ] = None,
) -> None:
    """Serve the memory as MCP tools over stdin/stdout (for Claude Desktop, Cursor, LangGraph agents).

    Tools: remember, recall, context, report_answer, forget_record, list_records, record_history,
    preferences. The store options
    (--store, --sql-url, --chroma-url, --config) say what it opens. Stdout carries the protocol, so
    nothing else is printed there; logs and warnings go to stderr. Over HTTP, `personamem serve`
    answers the same tools at /mcp, per API key.
    """
    served = ServedMethods.allowing(allow_method or [])  # checked before the store opens
    try:  # imported here: the SDK is an extra, and other commands should not pay for loading it
        from personamem.mcp_server import run_stdio
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] != "mcp":
            raise
        raise MissingExtraError(["mcp"], "mcp") from None
    with ctx.obj.open() as mem:
        run_stdio(mem.tenant(tenant) if tenant else mem, methods=served)
