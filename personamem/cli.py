"""The ``personamem`` command line: a thin layer over the library (typer + rich)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.cli_analyze import analyze_app
from personamem.cli_eval_adapter import eval_adapter
from personamem.cli_eval_conflicts import eval_conflicts
from personamem.cli_eval_memory import eval_memory
from personamem.cli_eval_pgret import eval_pgret
from personamem.cli_facts import purge, supersede, ttl
from personamem.cli_improve import improve
from personamem.cli_log import feedback, log_app
from personamem.cli_mcp import mcp
from personamem.cli_memory import memory_app
from personamem.cli_models import models_app
from personamem.cli_options import REFERENCE_LLM_RUNTIME, LLMRuntime, config_options, runtime_option
from personamem.cli_portability import export_user, import_user
from personamem.cli_server import keys_app, serve
from personamem.cli_train import train_app
from personamem.console import err, out, progress_bar
from personamem.errors import CheckpointError, ConfigError, MethodError, PersonaMemError
from personamem.eval.evaluate import EvalConfig
from personamem.memory import PersonaMem, open_memory
from personamem.methods import method_help
from personamem.pipeline import PipelineConfig, load_pipeline
from personamem.pipeline.config import pipeline_config
from personamem.records import Record

__all__ = ["app", "main"]

app = typer.Typer(
    name="personamem",
    help="Per-user memory for LLM applications: ingest history, search it per user, forget users.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
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


def default_store() -> Path:
    """``$XDG_DATA_HOME/personamem`` (``~/.local/share/personamem``)."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "personamem"


DEFAULT_CONFIG = Path("personamem.toml")
"""Read from the working directory when ``--config`` is not given, if it exists."""


@dataclass(frozen=True)
class StoreOptions:
    """Where the memory lives and which pipeline it runs, from the global options."""

    path: Path
    sql_url: str | None
    chroma_url: str | None
    config: Path | None

    @property
    def pipeline_file(self) -> Path:
        """The pipeline file serving reads and ``improve`` writes: --config, else ./personamem.toml."""
        return self.config or DEFAULT_CONFIG

    def pipeline(self, **overrides: object) -> PipelineConfig:
        """The ``[pipeline]`` of ``--config`` or ./personamem.toml, with the options given here."""
        given = {key: value for key, value in overrides.items() if value is not None}
        path = self.config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
        if path is None:
            return pipeline_config(given, source="options")
        return load_pipeline(path, **given)

    def open(self, **overrides: object) -> PersonaMem:
        """Open the configured store: a local folder unless a SQL URL is given."""
        return self._open(self.pipeline(**overrides))

    def open_default(self) -> PersonaMem:
        """Open the configured store with the package's default pipeline, whatever the files say."""
        return self._open(PipelineConfig())

    def _open(self, pipeline: PipelineConfig) -> PersonaMem:
        if self.chroma_url and not self.sql_url:
            raise typer.BadParameter("--chroma-url needs --sql-url (the SQL side is the source of truth)")
        return open_memory(self.path, sql_url=self.sql_url, chroma_url=self.chroma_url, pipeline=pipeline)


class RewriteStrategy(StrEnum):
    """How query rewriting uses the user's PTKB (see :class:`~personamem.rewriting.RewriteConfig`)."""

    NONE = "none"
    ALL = "all"
    STR = "str"
    SAR = "sar"


class IngestFormat(StrEnum):
    """Input formats ``ingest`` understands."""

    JSONL = "jsonl"
    PERSONABENCH = "personabench"
    LOCOMO = "locomo"
    IKAT = "ikat"


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


def _load(path: Path, fmt: IngestFormat, user: str | None, noise: float, user_prefix: str) -> list[Record]:
    if fmt is IngestFormat.JSONL:
        from personamem.ingest.jsonl import read_jsonl

        return read_jsonl(path, user_id=user)
    if user is not None:
        raise typer.BadParameter(f"--user applies to jsonl only; {fmt.value} files name their own users")
    if fmt is IngestFormat.PERSONABENCH:
        from personamem.ingest.personabench import load_personabench

        return load_personabench(path, noise=noise)
    if fmt is IngestFormat.LOCOMO:
        from personamem.ingest.locomo import load_locomo

        return load_locomo(path)
    from personamem.ingest.ikat import load_ikat

    return load_ikat(path, user_prefix=user_prefix)


@app.command()
def ingest(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="A JSONL file, or a benchmark file/folder with --format.")],
    user: Annotated[str | None, typer.Option(help="Owner of JSONL lines that name no user_id.")] = None,
    fmt: Annotated[IngestFormat, typer.Option("--format", help="Input format.")] = IngestFormat.JSONL,
    noise: Annotated[float, typer.Option(help="PersonaBench noise level (0.0, 0.3, 0.5, 0.7).")] = 0.0,
    user_prefix: Annotated[str, typer.Option(help="Prefix for iKAT user ids (topic numbers).")] = "",
) -> None:
    """Store records from a file; everything is validated before anything is written."""
    records = _load(path, fmt, user, noise, user_prefix)
    with ctx.obj.open() as mem, progress_bar() as bar:
        task = bar.add_task(f"ingesting {path.name}", total=len(records))
        advance: Callable[[int], None] = lambda n: bar.advance(task, n)  # noqa: E731
        mem.add_many(records, progress=advance)
    stored = len({(r.user_id, r.id) for r in records})  # a repeated id is one record, stored once
    users = len({r.user_id for r in records})
    out.print(f"stored {stored} record(s) for {users} user(s)")


_AS_OF = typer.Option(help="Answer from the facts current at this time (ISO 8601; UTC if naive).")
_ALL_VERSIONS = typer.Option("--include-superseded", help="Include superseded and not-yet-valid records.")


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    user: Annotated[str, typer.Option(help="Whose memory to search.")],
    k: Annotated[int, typer.Option("-k", "--k", min=1, help="How many records.")] = 5,
    method: Annotated[str, typer.Option(help=f"Method: {method_help()}.")] = "dense",
    llm: Annotated[
        str | None, typer.Option(help="The frozen LLM for LLM methods (see 'eval --help').")
    ] = None,
    llm_runtime: Annotated[LLMRuntime | None, runtime_option()] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines instead of a table.")] = False,
    as_of: Annotated[str | None, _AS_OF] = None,
    include_superseded: Annotated[bool, _ALL_VERSIONS] = False,
) -> None:
    """Search one user's memory with any method (the facts current now, unless --as-of says when)."""
    with ctx.obj.open(llm=llm, llm_runtime=llm_runtime and llm_runtime.value) as mem:
        hits = mem.search(user, query, k=k, method=method, as_of=as_of, include_superseded=include_superseded)
    if as_json:
        for hit in hits:
            row = {"rank": hit.rank, "score": hit.score, **hit.record.model_dump(mode="json")}
            typer.echo(json.dumps(row, ensure_ascii=False))  # one object per line, no wrapping
        return
    table = Table("rank", "score", "id", "kind", "text", title=f"{user}: {query}")
    for hit in hits:
        table.add_row(
            str(hit.rank), f"{hit.score:.3f}", hit.record.id, hit.record.kind.value, hit.record.text
        )
    out.print(table)


@app.command()
@config_options()
def context(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="The user's message.")],
    user: Annotated[str, typer.Option(help="Whose memory.")],
    method: Annotated[
        str | None,
        typer.Option(help="Run this method's stages over the configured pipeline (see 'search --help')."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the context as JSON.")] = False,
    as_of: Annotated[str | None, _AS_OF] = None,
    include_superseded: Annotated[bool, _ALL_VERSIONS] = False,
    *,
    pipeline: PipelineConfig,
) -> None:
    """The context an LLM should see for a query: the pipeline's profile, within a token budget.

    The pipeline is --config's (or ./personamem.toml's); the pipeline options given here override it.
    """
    given = pipeline.model_dump(include=pipeline.model_fields_set)  # options given override the file
    with ctx.obj.open(**given) as mem:
        result = mem.context(user, query, pipeline=method, as_of=as_of, include_superseded=include_superseded)
    if as_json:
        typer.echo(json.dumps(result.to_json(), ensure_ascii=False))
        return
    out.print(result.text or "(no records)", markup=False, highlight=False)
    cost = ", ".join(f"{stage} {ms:.0f} ms" for stage, ms in result.timings_ms.items())
    llm_tokens = result.usage.total_tokens
    err.print(
        f"{len(result.hits)} record(s), {result.tokens}/{result.budget_tokens} tokens; {cost}"
        + (f"; {llm_tokens} LLM tokens" if llm_tokens else ""),
        highlight=False,
    )
    for note in result.warnings:
        err.print(f"[yellow]warning:[/yellow] {note}", highlight=False, soft_wrap=True)


@app.command()
def users(ctx: typer.Context) -> None:
    """List users and how many records each has."""
    with ctx.obj.open() as mem:
        table = Table("user", "records")
        for user_id in mem.users():
            table.add_row(user_id, str(mem.count(user_id)))
    out.print(table)


@app.command()
def forget(
    ctx: typer.Context,
    user: Annotated[str, typer.Option(help="The user to erase.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation.")] = False,
) -> None:
    """Erase a user: records, vectors and cached data, with no soft-deleted copy."""
    if not yes and not typer.confirm(f"Erase everything personamem holds about {user!r}?"):
        raise typer.Abort()
    with ctx.obj.open() as mem:
        found = mem.forget(user)
    out.print(f"forgot {user}" if found else f"no such user: {user}")


_LLM_HELP = (
    "The frozen LLM: smollm2-135m (default), qwen2.5-coder-0.5b, qwen2.5-coder-1.5b (opt-in: "
    "personamem models install NAME) or a local transformers model folder."
)


@app.command("eval")
@config_options()
def eval_(
    config: EvalConfig,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for report.json, report.md and plots. [default: ./personamem-eval/<name>]"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the JSON report instead of tables.")] = False,
) -> None:
    """Score retrieval methods on a benchmark: mean ± std over seeds, paired t-tests, a written report."""
    from personamem.eval.evaluate import run_eval
    from personamem.eval.report import metric_label
    from personamem.eval.stats import summarize
    from personamem.eval.vectors import default_vector_cache
    from personamem.llm.packaged import default_cache_dir

    with progress_bar() as progress:
        report = run_eval(
            config,
            cache_dir=default_vector_cache(),
            store_dir=default_cache_dir() / "eval-stores",
            progress=progress,
        )
    written = report.write(out_dir or Path("personamem-eval") / report.benchmark.name)
    if as_json:
        out.print_json(data=report.to_json())
        return
    shown = [m for m in _SHOWN_METRICS if m in report.runs[0].scores]
    title = f"{report.benchmark.name} (mean ± std over {config.seeds} seeds for stochastic methods)"
    table = Table("method", *map(metric_label, shown), title=title, box=box.SIMPLE_HEAD)
    for run in report.runs:
        cells = []
        for m in shown:
            s = summarize(run, m)
            cells.append(f"{s.mean:.3f}" if s.seeds < 2 else f"{s.mean:.3f}±{s.std:.3f}")
        table.add_row(run.method, *cells)
    out.print(table)
    for c in report.comparisons():
        if c.metric in ("recall@5", "ndcg@5"):
            p = "identical" if c.p != c.p else f"p = {c.p:.3g}"
            out.print(f"{c.method} vs {c.baseline}, {metric_label(c.metric)}: {c.difference:+.4f} ({p})")
    if report.benchmark.skipped:
        out.print(
            f"skipped {len(report.benchmark.skipped)} questions: {dict(report.benchmark.skip_reasons())}"
        )
    out.print(f"report: {written[1]}")


_SHOWN_METRICS = ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10", "mrr", "pb_recall@5", "pb_ndcg@5")
"""The CLI table's columns (PersonaBench protocol ones where they exist); the report has all metrics."""


@app.command("eval-rewriting")
def eval_rewriting(
    data: Annotated[Path, typer.Option(help="The TREC iKAT folder (<split>_topics.json files).")],
    strategy: Annotated[
        list[RewriteStrategy] | None,
        typer.Option(help="none, all, str or sar; repeat to compare. [default: all four]"),
    ] = None,
    shots: Annotated[
        list[int] | None,
        typer.Option(min=0, help="Demonstrations per turn; repeat to compare. [default: 0]"),
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Runs per setting, seeds 0..N-1.")] = 5,
    split: Annotated[str, typer.Option(help="Topics to rewrite: <split>_topics.json.")] = "2023_test",
    shots_split: Annotated[str, typer.Option(help="Topics the demonstrations come from.")] = "2023_train",
    max_turns: Annotated[
        int | None, typer.Option(min=1, help="Rewrite an evenly spaced subset of this many turns.")
    ] = None,
    temperature: Annotated[float, typer.Option(min=0.0, help="Sampling temperature (0 = greedy).")] = 0.7,
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for report.json and report.md.")] = Path(
        "personamem-eval/ikat-rewriting"
    ),
    llm: Annotated[str, typer.Option(help=_LLM_HELP)] = "smollm2-135m",
    llm_runtime: Annotated[LLMRuntime, runtime_option()] = REFERENCE_LLM_RUNTIME,
) -> None:
    """Score query rewriting with the user's PTKB (None/All/STR/SAR) on iKAT: mean ± std over seeds."""
    import shlex

    from personamem.encoder import default_encoder
    from personamem.eval.benchmark import evenly_spaced
    from personamem.eval.rewriting import (
        RewriteReport,
        evaluate_rewriting,
        load_ikat_turns,
        make_demonstrations,
    )
    from personamem.llm.load import load_llm
    from personamem.rewriting import RewriteConfig

    turns, statements = load_ikat_turns(data, split=split)
    turns = evenly_spaced(turns, max_turns)
    counts = sorted(set(shots or [0]))
    examples = []
    if counts[-1] > 0:
        train, train_statements = load_ikat_turns(data, split=shots_split)
        examples = make_demonstrations(train, train_statements)
    strategies = [s.value for s in strategy or list(RewriteStrategy)]
    configs = [
        RewriteConfig(strategy=s, shots=k, temperature=temperature)  # type: ignore[arg-type]
        for s in strategies
        for k in counts
    ]
    command = ["personamem", "eval-rewriting", "--data", str(data), "--split", split, "--seeds", str(seeds)]
    command += [arg for s in strategies for arg in ("--strategy", s)]
    command += [arg for k in counts for arg in ("--shots", str(k))]
    command += ["--shots-split", shots_split] if counts[-1] > 0 else []
    command += ["--max-turns", str(max_turns)] if max_turns else []
    command += ["--temperature", str(temperature), "--llm", llm, "--llm-runtime", llm_runtime.value]
    with progress_bar() as progress:
        runs, samples = evaluate_rewriting(
            load_llm(llm, runtime=llm_runtime.value),  # type: ignore[arg-type]  # an LLMRuntime
            default_encoder(),
            turns,
            statements,
            configs,
            seeds=range(seeds),
            examples=examples,
            progress=progress,
        )
    report = RewriteReport(runs, samples, turns, command=shlex.join(command))
    written = report.write(out_dir)
    out.print(report.to_markdown(examples=0))
    out.print(f"report: {written[1]}")


@app.command()
def compare(
    ours: Annotated[Path, typer.Argument(help="report.json of the run to test.")],
    theirs: Annotated[Path, typer.Argument(help="report.json of the run to test against.")],
    method: Annotated[str, typer.Option(help="Method in the first report.")] = "dense",
    metric: Annotated[
        str, typer.Option(help="Metric key, e.g. recall@5, ndcg@10, pb_recall@5.")
    ] = "recall@5",
    baseline: Annotated[
        str | None, typer.Option(help="Method in the second report. [default: --method]")
    ] = None,
) -> None:
    """Paired t-test between two written reports over their common questions (e.g. two renderings)."""
    from personamem.eval.report import metric_label
    from personamem.eval.stats import compare_reports

    reports = []
    for path in (ours, theirs):
        try:
            reports.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError) as exc:
            raise typer.BadParameter(f"{path}: not a readable report.json ({exc})") from None
    try:
        c = compare_reports(reports[0], reports[1], method, metric, baseline=baseline)
    except KeyError as exc:
        raise typer.BadParameter(str(exc.args[0])) from None
    p = "identical" if c.p != c.p else f"p = {c.p:.3g}"
    out.print(
        f"{metric_label(metric)}: {c.method} ({ours}) vs {c.baseline} ({theirs}): {c.difference:+.4f} "
        f"over {c.questions} questions (t = {c.t:.2f}, {p})",
        soft_wrap=True,
    )


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
