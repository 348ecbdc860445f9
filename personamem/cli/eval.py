"""``personamem eval``, ``eval-rewriting`` and ``compare``: the benchmark harness from the shell."""

from __future__ import annotations

import json
import shlex
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import (
    command_line,
    config_options,
    runtime_option,
)
from personamem.console import out, progress_bar
from personamem.eval.evaluate import EvalConfig
from personamem.llm.load import REFERENCE_RUNTIME, Runtime


class RewriteStrategy(StrEnum):
    """How query rewriting uses the user's PTKB (see :class:`~personamem.rewriting.RewriteConfig`)."""

    NONE = "none"
    ALL = "all"
    STR = "str"
    SAR = "sar"


_LLM_HELP = (
    "The frozen LLM: smollm2-135m (default), qwen2.5-coder-0.5b, qwen2.5-coder-1.5b (opt-in: "
    "personamem models install NAME) or a local transformers model folder."
)


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
    from personamem.datasets.vectors import default_vector_cache
    from personamem.eval.evaluate import run_eval
    from personamem.eval.report import metric_label
    from personamem.eval.stats import summarize
    from personamem.llm.packaged import default_cache_dir

    with progress_bar() as progress:
        report = run_eval(
            config,
            cache_dir=default_vector_cache(),
            store_dir=default_cache_dir() / "eval-stores",
            progress=progress,
            command=shlex.join(["personamem", "eval", *command_line(config)]),
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
    llm_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
) -> None:
    """Score query rewriting with the user's PTKB (None/All/STR/SAR) on iKAT: mean ± std over seeds."""
    import shlex

    from personamem.datasets.benchmark import evenly_spaced
    from personamem.encoder import default_encoder
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
    command += ["--temperature", str(temperature), "--llm", llm, "--llm-runtime", llm_runtime]
    with progress_bar() as progress:
        runs, samples = evaluate_rewriting(
            load_llm(llm, runtime=llm_runtime),
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
