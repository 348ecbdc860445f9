"""The ``personamem`` command line: a thin layer over the library (typer + rich)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from personamem.cli.analyze import analyze_app
from personamem.cli.eval import compare, eval_, eval_rewriting
from personamem.cli.eval_adapter import eval_adapter
from personamem.cli.eval_conflicts import eval_conflicts
from personamem.cli.eval_memory import eval_memory
from personamem.cli.eval_pgret import eval_pgret
from personamem.cli.facts import purge, supersede, ttl
from personamem.cli.improve import improve
from personamem.cli.ingest import ingest
from personamem.cli.log import feedback, log_app
from personamem.cli.mcp import mcp
from personamem.cli.memory import memory_app
from personamem.cli.models import models_app
from personamem.cli.portability import export_user, import_user
from personamem.cli.read import context, forget, search, users
from personamem.cli.server import keys_app, serve
from personamem.cli.store import StoreOptions, default_store
from personamem.cli.train import train_app
from personamem.console import err, out
from personamem.errors import CheckpointError, ConfigError, MethodError, PersonaMemError
from personamem.memory import PersonaMem

__all__ = ["app", "main"]

app = typer.Typer(
    name="personamem",
    help="Per-user memory for LLM applications: ingest history, search it per user, forget users.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command()(ingest)
app.command()(search)
app.command()(context)
app.command()(users)
app.command()(forget)
app.command("eval")(eval_)
app.command("eval-rewriting")(eval_rewriting)
app.command()(compare)
app.add_typer(train_app, name="train")
app.add_typer(analyze_app, name="analyze")
app.add_typer(keys_app, name="keys")
app.add_typer(models_app, name="models")
app.add_typer(memory_app, name="memory")
app.add_typer(log_app, name="log")
app.command()(feedback)
app.command()(serve)
app.command("eval-memory")(eval_memory)
app.command("eval-pgret")(eval_pgret)
app.command("eval-adapter")(eval_adapter)
app.command("eval-conflicts")(eval_conflicts)
app.command("improve")(improve)
app.command("export")(export_user)
app.command("import")(import_user)
app.command("mcp")(mcp)
app.command("supersede")(supersede)
app.command("purge")(purge)
app.command("ttl")(ttl)


@app.callback()
def _global(
    ctx: typer.Context,
    store: Annotated[
        Path | None,
        typer.Option(
            envvar="PERSONAMEM_STORE",
            help="Folder of the local store (SQLite + Chroma). [default: ~/.local/share/personamem]",
        ),
    ] = None,
    sql_url: Annotated[
        str | None,
        typer.Option(envvar="PERSONAMEM_SQL_URL", help="SQLAlchemy URL, e.g. postgresql+psycopg://..."),
    ] = None,
    chroma_url: Annotated[
        str | None,
        typer.Option(envvar="PERSONAMEM_CHROMA_URL", help="Chroma server, e.g. http://127.0.0.1:8000"),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            envvar="PERSONAMEM_CONFIG",
            help="TOML file whose pipeline table configures search and context. [default: personamem.toml]",
        ),
    ] = None,
) -> None:
    ctx.obj = StoreOptions(store or default_store(), sql_url, chroma_url, config)


@app.command()
def demo(
    store: Annotated[
        Path | None, typer.Option(help="Keep the demo store here (default: a temporary folder).")
    ] = None,
) -> None:
    """Three users, the same questions, different answers from their memories."""
    from personamem.demo import relevant_top_hits, run_demo

    with tempfile.TemporaryDirectory(prefix="personamem-demo-") as tmp, PersonaMem.open(store or tmp) as mem:
        results = run_demo(mem)
        for query, by_user in results.items():
            table = Table("user", "cosine  what personamem recalls", title=query, show_lines=True)
            for user_id, hits in by_user.items():
                table.add_row(user_id, "\n".join(f"{h.score:.3f}  {h.record.text}" for h in hits))
            out.print(table)
        good, total = relevant_top_hits(results)
        out.print(f"{good} of {total} top records are ones labelled relevant to the question for that user.")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it with argv."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the model-loading bar is noise in a CLI
    try:
        result = app(args=argv, prog_name="personamem", standalone_mode=False)
    except typer.Abort:
        err.print("aborted")
        return 1
    except typer.TyperException as exc:  # usage errors (exit code 2) and other command-line mistakes
        err.print(f"Error: {exc.format_message()}", highlight=False, markup=False, soft_wrap=True)
        return exc.exit_code
    except (MethodError, ConfigError, CheckpointError) as exc:  # the command line named something wrong
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 2
    except PersonaMemError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 1
    return result if isinstance(result, int) else 0
