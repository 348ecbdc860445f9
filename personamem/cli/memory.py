"""``personamem memory``: show a user's preference memory, and build memories ahead of time.

Both read the memory settings as ``personamem context`` does: the ``[pipeline]`` table of --config (or
./personamem.toml), with the pipeline options given here on top (``--preference-memory atomic --llm
smollm2-135m``). Only the options a memory depends on are offered.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.pipeline import PipelineConfig
from personamem.preference import PreferenceMemory

__all__ = ["memory_app"]

_MEMORY_FIELDS = {
    "preference_memory",
    "memory_words",
    "memory_timeout_s",
    "llm",
    "llm_runtime",
    "llm_threads",
    "llm_url",
}
_NOT_MEMORY = tuple(name for name in PipelineConfig.model_fields if name not in _MEMORY_FIELDS)

memory_app = typer.Typer(
    help="Users' preference memories (MemRerank), put before the records in a context: --user U shows "
    "one, refresh builds them ahead of time.",
    no_args_is_help=True,
)


@memory_app.callback(invoke_without_command=True)
@config_options(exclude=_NOT_MEMORY)
def show(
    ctx: typer.Context,
    user: Annotated[str | None, typer.Option(help="Whose memory to show.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the memory as JSON.")] = False,
    *,
    pipeline: PipelineConfig,
) -> None:
    """Show a user's preference memory, with the records each statement was drawn from.

    A memory older than the user's history is rebuilt first (up to --memory-timeout-s).
    """
    if ctx.invoked_subcommand is not None:
        if user is not None or as_json or pipeline.model_fields_set:
            raise typer.BadParameter(
                f"options go after the command: personamem memory {ctx.invoked_subcommand} ..."
            )
        return
    if user is None:
        raise typer.BadParameter("name a user (--user U), or run 'personamem memory refresh'")
    given = pipeline.model_dump(include=pipeline.model_fields_set)  # options given override the file
    with ctx.obj.open(**given) as mem:
        memory = mem.memory(user)
    if as_json:
        typer.echo(json.dumps(memory.to_json(), ensure_ascii=False))
        return
    out.print(_summary(memory), highlight=False, soft_wrap=True)
    out.print(memory.audit_text() or "(empty memory)", markup=False, highlight=False)
    for note in memory.notes:
        out.print(f"note: {note}", markup=False, highlight=False, soft_wrap=True)


def _summary(memory: PreferenceMemory) -> str:
    state = "[yellow]stale[/yellow] (the history changed and the rebuild failed or is late)"
    return (
        f"user {memory.user_id}: {memory.words} words, extractor {memory.extractor}, "
        f"revision {memory.revision}, {state if memory.stale else 'current'}"
    )


@memory_app.command("refresh")
@config_options(exclude=_NOT_MEMORY)
def refresh(
    ctx: typer.Context,
    user: Annotated[
        list[str] | None, typer.Option(help="A user whose memory to build; repeat for more.")
    ] = None,
    all_users: Annotated[bool, typer.Option("--all", help="Every user in the store.")] = False,
    batch_size: Annotated[int, typer.Option(min=1, help="Users per LLM call.")] = 8,
    *,
    pipeline: PipelineConfig,
) -> None:
    """Build missing or stale memories ahead of time; current ones are skipped, so a rerun resumes."""
    if bool(user) == all_users:
        raise typer.BadParameter("name users (--user U, repeatable) or --all, not both")
    given = pipeline.model_dump(include=pipeline.model_fields_set)
    with ctx.obj.open(**given) as mem, progress_bar() as bar:
        users = mem.users() if all_users else list(user or [])
        task = bar.add_task("building preference memories", total=len(users))
        built = mem.refresh_memories(users, progress=lambda n: bar.advance(task, n), batch_size=batch_size)
    out.print(f"built {built} memory(s); skipped {len(users) - built} already current or without records")
