"""The ``personamem`` command line: a thin layer over the library (typer + rich).

The commands are rows of :data:`COMMANDS`, in the order and help panels ``--help`` shows them. The
root group imports a command's module only when that command runs or prints its own help: the
command modules pull in the store, Chroma, the pipeline and, for some, torch (seconds together),
so ``personamem --help`` loads none of them and ``personamem search`` only what a search needs.
A row names its module as a string for that reason alone: it is one of this package's modules, not
a plugin, and ``tests/cli/test_cli_imports.py`` builds every row.
"""

from __future__ import annotations

import gc
import importlib
import os
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from personamem.cli.store import StoreOptions, default_store
from personamem.console import err, out
from personamem.errors import CheckpointError, ConfigError, MethodError, PersonaMemError

__all__ = ["COMMANDS", "Command", "app", "main"]

MEMORY = "Memory"
SERVE = "Serve"
EVALUATE = "Evaluate"
TRAIN = "Train & improve"
TRY = "Try it"


@dataclass(frozen=True)
class Command:
    """One command of the root group, importable by name without importing it."""

    name: str
    module: str
    """The module under ``personamem.cli`` that defines it."""
    attr: str
    """The command function, or the ``typer.Typer`` of a command group, in that module; or a mapping
    of commands by name, for a module that builds its commands from a table (``evals``)."""
    panel: str
    """The ``--help`` panel that lists it."""
    summary: str
    """What ``--help`` lists: the first paragraph of the command's own help (``tests/cli/test_cli_imports.py``
    checks that the two agree)."""
    one_shot_read: bool = False
    """A read of a query that ends with the process (``search``, ``context``): the default encoder
    loads beside its imports, and it runs without the cycle collector :func:`main` turned off."""

    def load(self) -> Any:
        """The command function or group, importing its module (and the encoder beside it, for a read)."""
        if self.one_shot_read:
            _load_encoder_aside()
        found = getattr(importlib.import_module(f"personamem.cli.{self.module}"), self.attr)
        if not self.one_shot_read:
            gc.enable()  # ingest, train, serve: long runs keep collecting cycles
        return found[self.name] if isinstance(found, Mapping) else found


def _load_encoder_aside() -> None:
    """Load the default encoder on a thread while the command's modules import on this one.

    A cold ``personamem search`` spends 0.17 s building the encoder's onnxruntime session, which
    holds no lock Python's imports need, and 0.6 s importing: side by side they overlap on a second
    core. The thread is not a daemon, so the process never exits while onnxruntime is mid-load. A
    store that names another encoder has loaded the default for nothing; a load that fails is left
    for the read that needs the encoder, which raises the same error itself.
    """

    def load() -> None:
        try:
            from personamem.encoder import default_encoder

            default_encoder()
        except Exception:  # raised again, where it matters, by the read
            pass

    threading.Thread(target=load, name="personamem-encoder-load").start()


COMMANDS = (
    Command(
        "ingest",
        "ingest",
        "ingest",
        MEMORY,
        "Store records from a file; everything is validated before anything is written.",
    ),
    Command(
        "search",
        "read",
        "search",
        MEMORY,
        "Search one user's memory with any method (the facts current now, unless --as-of says when).",
        one_shot_read=True,
    ),
    Command(
        "context",
        "read",
        "context",
        MEMORY,
        "The context an LLM should see for a query: the pipeline's profile, within a token budget.",
        one_shot_read=True,
    ),
    Command("users", "read", "users", MEMORY, "List users and how many records each has."),
    Command(
        "records",
        "records",
        "records",
        MEMORY,
        "List a user's records, oldest first: id, kind, category and text.",
    ),
    Command(
        "get",
        "records",
        "get",
        MEMORY,
        "Show one record of a user (exit 1 when the user has no such record).",
    ),
    Command(
        "update",
        "records",
        "update",
        MEMORY,
        "Replace fields of one record; it keeps its id, and its history records the update.",
    ),
    Command(
        "delete",
        "records",
        "delete",
        MEMORY,
        "Delete records of a user, leaving no trace of their text (exit 1 when none was found).",
    ),
    Command(
        "forget",
        "read",
        "forget",
        MEMORY,
        "Erase a user: records, vectors and cached data, with no soft-deleted copy.",
    ),
    Command(
        "supersede",
        "facts",
        "supersede",
        MEMORY,
        "Store a fact that replaces an older one; the old one stays in the history, no longer current.",
    ),
    Command(
        "history",
        "facts",
        "history",
        MEMORY,
        "Show what happened to one record: when, by whom, and its text while it exists.",
    ),
    Command(
        "ttl",
        "facts",
        "ttl",
        MEMORY,
        "Show or set the default time-to-live of new records (of the store, or of one tenant).",
    ),
    Command(
        "purge",
        "facts",
        "purge",
        MEMORY,
        "Erase every expired record now, of every tenant (the server's background sweep does it too).",
    ),
    Command(
        "check",
        "check",
        "check",
        MEMORY,
        "Check that SQL and the vector index agree and every vector reads back; --repair fixes it.",
    ),
    Command(
        "export",
        "portability",
        "export_user",
        MEMORY,
        "Write a user's records (and logged calls) to a JSONL file that 'personamem import' reads.",
    ),
    Command(
        "import",
        "portability",
        "import_user",
        MEMORY,
        "Store a user's export locally, or send records to a server as a resumable import job (--server).",
    ),
    Command(
        "backup",
        "backup",
        "backup",
        MEMORY,
        "Copy the local store into DEST while it serves; 'personamem restore DEST' brings it back.",
    ),
    Command(
        "restore",
        "backup",
        "restore",
        MEMORY,
        "Bring a backup back as the local store (--store), checked first; replacing a store needs --force.",
    ),
    Command(
        "feedback",
        "log",
        "feedback",
        MEMORY,
        "Report what happened after a logged call (PersonaMem.feedback).",
    ),
    Command(
        "log",
        "log",
        "log_app",
        MEMORY,
        "The interaction log: logged search/context calls and their feedback, as JSON Lines.",
    ),
    Command(
        "memory",
        "memory",
        "memory_app",
        MEMORY,
        "Users' preference memories (MemRerank), put before the records in a context: --user U shows one, "
        "refresh builds them ahead of time.",
    ),
    Command(
        "serve",
        "server",
        "serve",
        SERVE,
        "Serve the memory over HTTP (JSON routes under /v1, OpenAPI docs at /docs, the inspector at /ui).",
    ),
    Command(
        "mcp",
        "mcp",
        "mcp",
        SERVE,
        "Serve the memory as MCP tools over stdin/stdout (for Claude Desktop, Cursor, LangGraph agents).",
    ),
    Command(
        "keys",
        "server",
        "keys_app",
        SERVE,
        "API keys of the REST server: each key names one tenant, a scope and an optional rate.",
    ),
    Command(
        "eval",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Score retrieval methods on a benchmark: mean ± std over seeds, paired t-tests, a written report.",
    ),
    Command(
        "eval-rewriting",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Score query rewriting with the user's PTKB (None/All/STR/SAR) on iKAT: mean ± std over seeds.",
    ),
    Command(
        "eval-memory",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Accuracy and MRR of the user's item among five, per kind of memory, on held-out users or topics.",
    ),
    Command(
        "eval-pgret",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Recall, nDCG, novelty@k and judged precision@k of each variant (mean ± std over its seeds).",
    ),
    Command(
        "eval-adapter",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Recall@5/10 and nDCG@10 of each variant (mean ± std over its training seeds) on unseen users.",
    ),
    Command(
        "eval-conflicts",
        "evals",
        "COMMANDS",
        EVALUATE,
        "Precision and recall (95 % bootstrap intervals) of the LLM's verdicts and of the cosine alone.",
    ),
    Command(
        "compare",
        "compare",
        "compare",
        EVALUATE,
        "Paired t-test between two written reports over their common questions (e.g. two renderings).",
    ),
    Command(
        "analyze", "analyze", "analyze_app", EVALUATE, "Analyses of a user's memory against the frozen LLM."
    ),
    Command("train", "train", "train_app", TRAIN, "Train learned components against the frozen LLM."),
    Command(
        "improve",
        "improve",
        "improve",
        TRAIN,
        "Fit the adapter, hybrid's weight and the ranker to this store; live only if validation improves.",
    ),
    Command(
        "models",
        "models",
        "models_app",
        TRAIN,
        "The local LLMs: what is installed and converted, and installing more.",
    ),
    Command(
        "demo", "app", "demo", TRY, "Three users, the same questions, different answers from their memories."
    ),
)


_ROWS = {row.name: row for row in COMMANDS}


class _Commands(Mapping[str, Any]):
    """The root group's commands by name, in the table's order, each built from its row on first access.

    A plain mapping to click (``group.commands[name]`` is the real command, options and all), so only
    the commands a call touches are imported.
    """

    def __init__(self) -> None:
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            self._built[name] = _build(_ROWS[name])
        return self._built[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_ROWS)

    def __len__(self) -> int:
        return len(_ROWS)


def _build(row: Command) -> Any:
    """The click command typer makes of the row's function or group."""
    target = row.load()
    if isinstance(target, typer.Typer):
        return typer.main.get_group(target)
    single = typer.Typer(add_completion=False)
    single.command(row.name)(target)
    return typer.main.get_command(single)


class _LazyGroup(TyperGroup):
    """The root group: :data:`COMMANDS` as its commands, its own help listed from the table."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = _Commands()  # type: ignore[assignment]  # read-only: the table adds commands
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """The names, without building the commands (click's default goes through their values)."""
        return list(self.commands)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command; while the root's help is written, a stand-in made of the row's summary."""
        if self._listing:
            row = _ROWS.get(cmd_name)
            return row and TyperCommand(row.name, help=row.summary, rich_help_panel=row.panel)
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """The root's help, listing the commands from the table rather than importing each one."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="personamem",
    help="Per-user memory for LLM applications: ingest history, search it per user, forget users.",
    cls=_LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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
        typer.Option(
            envvar="PERSONAMEM_SQL_URL",
            help=(
                "SQLAlchemy URL, e.g. postgresql+psycopg://... (PostgreSQL without --chroma-url keeps "
                "the vectors too, with pgvector)"
            ),
        ),
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


def demo(
    store: Annotated[
        Path | None, typer.Option(help="Keep the demo store here (default: a temporary folder).")
    ] = None,
) -> None:
    """Three users, the same questions, different answers from their memories."""
    from rich.table import Table

    from personamem.demo import relevant_top_hits, run_demo
    from personamem.memory import PersonaMem

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
    """Run the CLI; returns the exit code instead of exiting, so tests can call it with argv.

    Run as the program (``argv`` None, from ``sys.argv``), it imports with the cycle collector off
    (it walks the libraries' new objects again and again: 0.07 s of a 1.0 s ``personamem search``
    here), turned on again once a command that is not a one-shot read is loaded
    (:attr:`Command.one_shot_read`), and leaves what it built to the process's exit without a last
    collection over it (:func:`gc.freeze`): 0.3 s of a 1.5 s search here. A caller that passes
    ``argv`` keeps collecting as usual.
    """
    if argv is None:
        gc.disable()
    try:
        return _run(argv)
    finally:
        if argv is None:
            gc.freeze()


def _run(argv: list[str] | None) -> int:
    # the model-loading bars are noise in a CLI; read by huggingface_hub and transformers on import (an
    # explicit setting wins), where calling their switch would import tqdm and asyncio (0.03 s) first
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
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
