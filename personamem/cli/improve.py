"""``personamem improve``: fit the first stage to this store's data; live only when it validates better."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.trainers.adapter.config import ImproveConfig

__all__ = ["improve"]


@config_options()
def improve(
    ctx: typer.Context,
    *,
    settings: ImproveConfig,
    rollback: Annotated[
        bool, typer.Option("--rollback", help="Put back the pipeline file the last improve replaced.")
    ] = False,
    status: Annotated[
        bool, typer.Option("--status", help="Show the candidate on trial, its count, and past decisions.")
    ] = False,
) -> None:
    """Fit the adapter, hybrid's weight and the ranker to this store; live only if validation improves.

    Learns from feedback on logged calls where there is enough, else from questions the packaged LLM
    writes for sampled records (cached in the store, so an interrupted run resumes). The store's
    live pipeline and the candidate are compared on users held out of the fit; a candidate that wins
    is put on trial: served interleaved with the live pipeline on a share of calls, it becomes the
    live pipeline (kept in the store, so every process and server worker serves it) when the answers
    there prefer it, and the one it replaced is kept for --rollback (--go-live now skips the trial).
    Schedule it (cron, a job runner) as the store grows.
    """
    from personamem.errors import ConfigError, InsufficientDataError
    from personamem.trainers.adapter import improve as improving

    with ctx.obj.open_live() as mem:
        if status:
            _print_status(mem.trials.status())
            return
        if rollback:
            try:
                improving.rollback(mem)
            except ConfigError as exc:
                raise typer.BadParameter(str(exc)) from None
            out.print("the previous live pipeline is back, for every process serving this store")
            return
        with progress_bar() as progress:
            try:
                result = improving.improve(mem, settings, progress=progress)
            except (InsufficientDataError, ConfigError) as exc:
                raise typer.BadParameter(str(exc)) from None
    table = Table(
        "", "live pipeline", "candidate", box=box.SIMPLE, title=f"personamem improve ({result.signal})"
    )
    for key in result.after:
        table.add_row(key, _cell(result.before.get(key, "")), _cell(result.after[key]))
    out.print(table)
    for name, value in result.counts.items():
        out.print(f"  {name.replace('_', ' ')}: {value}")
    for note in result.notes:
        out.print(f"  {note}")
    if result.trial is not None:
        out.print(f"[bold]on trial[/] ({result.trial}): 'personamem improve --status' shows its count")
    elif result.live:
        out.print("[bold]live[/]: the store serves the candidate ('personamem improve --rollback' undoes it)")
        pinned = ctx.obj.config_file
        if pinned is not None and pinned.is_file():
            out.print(
                f"  note: {pinned} pins a pipeline: processes started with it serve that file, not the store"
            )
    else:
        left = f"adapter left in {result.adapter}" + (f", ranker in {result.ranker}" if result.ranker else "")
        out.print(f"kept the live pipeline: the candidate did not validate better ({left})")


def _cell(value: object) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _print_status(status: dict[str, Any]) -> None:
    """The running trial's count and the decided trials, one line each."""
    running = status["running"]
    if running is None:
        out.print("no candidate on trial")
    else:
        out.print(
            f"on trial ({running['role']}, {running['share']:.0%} of calls since {running['started']}): "
            f"wins {running['wins']}, losses {running['losses']}, ties {running['ties']} "
            f"(sign test p better {running['p_better']:.3g}, p worse {running['p_worse']:.3g})"
        )
    for decided in status["decided"]:
        out.print(
            f"  {decided['started']}: {decided['role']} {decided['action']} "
            f"({decided['wins']} wins, {decided['losses']} losses, {decided['ties']} ties)"
        )
