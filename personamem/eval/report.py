"""Turn method runs into what people read: a JSON record, a Markdown report and plots.

The JSON keeps per-question scores (averaged over seeds) so any later comparison can be recomputed
without rerunning; the Markdown names the protocol of every table, so a number is never read against
a paper's number measured another way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from personamem.datasets.benchmark import Benchmark
from personamem.eval.runner import MethodRun
from personamem.eval.stats import Comparison, Summary, compare, summarize

__all__ = ["Report", "metric_label"]

BREAKDOWN_METRICS = ("recall@5", "ndcg@5", "recall@10", "ndcg@10")
"""Metrics broken down by question category in the report."""


def metric_label(metric: str) -> str:
    """Short column names: ``recall@5`` -> ``R@5``, ``pb_ndcg@3`` -> ``PB-N@3``."""
    protocol = "PB-" if metric.startswith("pb_") else ""
    base, _, cutoff = metric.removeprefix("pb_").partition("@")
    short = {"recall": "R", "ndcg": "N", "mrr": "MRR", "map": "MAP", "precision": "P"}.get(
        base, base.removeprefix("answer_")
    )
    return protocol + short + (f"@{cutoff}" if cutoff else "")


@dataclass
class Report:
    """Everything one ``personamem eval`` invocation measured.

    Attributes:
        benchmark: what was evaluated.
        runs: one per method, in the order given.
        baseline: the method the others are t-tested against, if any.
        command: the command line that reproduces the run.
        timings: named wall-clock seconds (embedding, ingest, metric compile, per method).
    """

    benchmark: Benchmark
    runs: list[MethodRun]
    baseline: str | None = None
    command: str = ""
    timings: dict[str, float] = field(default_factory=dict)

    def comparisons(self) -> list[Comparison]:
        """Each non-baseline method against the baseline, on every metric."""
        if self.baseline is None:
            return []
        base = next((run for run in self.runs if run.method == self.baseline), None)
        if base is None:
            raise ValueError(f"baseline {self.baseline!r} is not among the methods run")
        return [
            compare(run, base, metric)
            for run in self.runs
            if run is not base
            for metric in run.scores
            if metric in base.scores
        ]

    def categories(self) -> dict[str, list[str]]:
        """Question category -> question ids, in first-seen order."""
        found: dict[str, list[str]] = {}
        for question in self.benchmark.questions:
            found.setdefault(question.category or "(none)", []).append(question.id)
        return found

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON record of the run (NaN written as null)."""
        categories = self.categories()
        methods = {}
        for run in self.runs:
            methods[run.method] = {
                "seeds": run.seeds,
                "stochastic": run.stochastic,
                "overall": {m: asdict(summarize(run, m)) for m in run.scores},
                "by_category": {
                    cat: {m: asdict(summarize(run, m, ids)) for m in run.scores}
                    for cat, ids in categories.items()
                },
                "latency_ms": _latency(run.latency_s),
                "batched_llm_ms_per_question": _batched_ms(run),
                "llm_outputs": run.outputs,
                "per_question": {
                    m: {qid: float(np.mean(values)) for qid, values in per_q.items()}
                    for m, per_q in run.scores.items()
                },
            }
        bench = self.benchmark
        return _finite(
            {
                "benchmark": {
                    "name": bench.name,
                    "users": len(bench.users()),
                    "records": len(bench.records),
                    "questions": len(bench.questions),
                    "skipped": dict(bench.skip_reasons()),
                    "notes": bench.notes,
                },
                "command": self.command,
                "baseline": self.baseline,
                "timings_s": self.timings,
                "methods": methods,
                "comparisons": [asdict(c) for c in self.comparisons()],
            }
        )

    # -- Markdown ------------------------------------------------------------------------------

    def to_markdown(self) -> str:
        """The human report: overall tables per protocol, categories, tests, timing, skips."""
        bench = self.benchmark
        lines = [f"# {bench.name}", ""]
        if self.command:
            lines += [f"Command: `{self.command}`", ""]
        lines += [
            f"{len(bench.users())} users, {len(bench.records)} records; "
            f"{len(bench.questions)} questions scored, {len(bench.skipped)} skipped. "
            "Scores are mean ± std over seeds of the mean over questions (a deterministic method runs once).",
            "",
        ]
        metrics = list(self.runs[0].scores)
        standard = [m for m in metrics if not m.startswith(("pb_", "answer_"))]
        pb = sorted(
            (m for m in metrics if m.startswith("pb_")), key=lambda m: (m.split("@")[0], int(m.split("@")[1]))
        )
        answers = [m for m in metrics if m.startswith("answer_")]
        for title, shown in (
            ("ranx metrics (all gold ids relevant, all questions)", standard),
            (
                "PersonaBench protocol (best choice of one gold session per answer value; "
                "Subjective questions left out)",
                pb,
            ),
            (
                "Answers from the frozen LLM given the top records, no memory (no-memory) or the latest "
                "history that fits (full-history): the gold answer's log-likelihood in nats, a greedy "
                "answer's overlap, its judged accuracy (judged) and the tokens the LLM read (prompt_tokens)",
                answers,
            ),
        ):
            if shown:
                lines += [f"## {title}", "", *self._table(shown), ""]
        lines += self._category_tables()
        lines += self._comparison_table()
        lines += [
            "## Latency per question",
            "",
            "Methods that call the LLM do it first for all questions in batches; that time is shown per "
            "question beside the ranking latency, with its share of the method's total.",
            "",
            "| method | p50 ms | p95 ms | batched LLM ms | LLM share |",
            "|---|---|---|---|---|",
        ]
        for run in self.runs:
            lat, llm_ms = _latency(run.latency_s), _batched_ms(run)
            share = (
                ""
                if not run.prepare_s
                else f"{sum(run.prepare_s) / (sum(run.prepare_s) + sum(run.latency_s)):.1%}"
            )
            llm = "" if not run.prepare_s else f"{llm_ms:.0f}"
            lines.append(f"| {run.method} | {lat['p50']:.1f} | {lat['p95']:.1f} | {llm} | {share} |")
        lines.append("")
        outputs = [(run.method, run.outputs) for run in self.runs if run.outputs]
        if outputs:
            lines += [
                "## LLM answers parsed",
                "",
                "Answers the LLM wrote in this run, per stage: clean JSON, repaired (JSON amid prose, "
                "a bulleted list, broken quoting) or failed (the stage fell back; prose is never used).",
                "",
                "| method | stage | clean | repaired | failed | failed share |",
                "|---|---|---|---|---|---|",
            ]
            for method, counts in outputs:
                for stage in dict.fromkeys(key.rsplit(" ", 1)[0] for key in counts):
                    n = [counts.get(f"{stage} {o}", 0) for o in ("clean", "repaired", "failed")]
                    cells = " | ".join(map(str, n))
                    lines.append(f"| {method} | {stage} | {cells} | {n[2] / max(1, sum(n)):.0%} |")
            lines.append("")
        if self.timings:
            lines += ["Wall-clock seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in self.timings.items()), ""]
        if bench.skipped:
            lines += ["## Skipped questions", "", "| reason | count |", "|---|---|"]
            lines += [f"| {reason} | {n} |" for reason, n in bench.skip_reasons().most_common()]
            lines.append("")
        if bench.notes:
            lines += ["## Repairs made while loading", "", *[f"- {note}" for note in bench.notes], ""]
        return "\n".join(lines)

    def _table(self, metrics: Sequence[str], question_ids: list[str] | None = None) -> list[str]:
        header = "| method | seeds | questions | " + " | ".join(metric_label(m) for m in metrics) + " |"
        rows = [header, "|" + "---|" * (len(metrics) + 3)]
        for run in self._scoring(metrics):
            summaries = [summarize(run, m, question_ids) for m in metrics]
            n = summaries[0].questions if summaries else 0
            rows.append(
                f"| {run.method} | {len(run.seeds)} | {n} | " + " | ".join(map(_cell, summaries)) + " |"
            )
        return rows

    def _scoring(self, metrics: Sequence[str]) -> list[MethodRun]:
        """The runs that scored any of ``metrics`` (the answer baselines rank nothing)."""
        return [run for run in self.runs if any(m in run.scores for m in metrics)]

    def _category_tables(self) -> list[str]:
        lines: list[str] = []
        for category, ids in self.categories().items():
            metrics = [m for m in BREAKDOWN_METRICS if m in self.runs[0].scores]
            lines += [f"## Category: {category} ({len(ids)} questions)", "", *self._table(metrics, ids), ""]
        return lines

    def _comparison_table(self) -> list[str]:
        comparisons = self.comparisons()
        if not comparisons:
            return []
        lines = [
            f"## Paired t-test against {self.baseline} (over questions, each averaged over seeds)",
            "",
            "| method | metric | Δ mean | t | p | questions |",
            "|---|---|---|---|---|---|",
        ]
        for c in comparisons:
            t = "—" if math.isnan(c.t) else f"{c.t:.2f}"
            p = "identical" if math.isnan(c.p) else f"{c.p:.3g}"
            lines.append(
                f"| {c.method} | {metric_label(c.metric)} | {c.difference:+.4f} | {t} | {p} | {c.questions} |"
            )
        return [*lines, ""]

    # -- files ---------------------------------------------------------------------------------

    def write(self, out_dir: Path) -> list[Path]:
        """Write ``report.json``, ``report.md`` and the plots into ``out_dir``; return their paths."""
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path = out_dir / "report.json"
        json_path.write_text(
            json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        md_path = out_dir / "report.md"
        md_path.write_text(self.to_markdown() + "\n", encoding="utf-8")
        return [json_path, md_path, *self._plots(out_dir)]

    def _plots(self, out_dir: Path) -> list[Path]:
        from matplotlib.figure import Figure  # no pyplot: no global backend or figure state

        metrics = [m for m in self.runs[0].scores if m in BREAKDOWN_METRICS or m.startswith("pb_")]
        overall = out_dir / "metrics.png"
        _bar_chart(
            Figure(figsize=(max(6.0, 1.2 * len(metrics)), 4)),
            [metric_label(m) for m in metrics],
            {run.method: [summarize(run, m) for m in metrics] for run in self._scoring(metrics)},
            f"{self.benchmark.name}: mean ± std over seeds",
        ).savefig(overall, dpi=120, bbox_inches="tight")
        categories = self.categories()
        by_category = out_dir / "categories.png"
        _bar_chart(
            Figure(figsize=(max(6.0, 1.5 * len(categories)), 4)),
            list(categories),
            {
                run.method: [summarize(run, "recall@5", ids) for ids in categories.values()]
                for run in self._scoring(["recall@5"])
            },
            f"{self.benchmark.name}: R@5 by question category",
        ).savefig(by_category, dpi=120, bbox_inches="tight")
        return [overall, by_category]


def _bar_chart(figure: Any, groups: list[str], series: Mapping[str, list[Summary]], title: str) -> Any:
    ax = figure.subplots()
    width = 0.8 / max(1, len(series))
    for i, (name, summaries) in enumerate(series.items()):
        x = np.arange(len(groups)) + i * width
        ax.bar(x, [s.mean for s in summaries], width, yerr=[s.std for s in summaries], label=name, capsize=2)
    ax.set_xticks(np.arange(len(groups)) + width * (len(series) - 1) / 2, groups, rotation=20, ha="right")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend()
    return figure


def _cell(summary: Summary) -> str:
    if math.isnan(summary.mean):
        return "—"
    return f"{summary.mean:.4f}" if summary.seeds < 2 else f"{summary.mean:.4f} ± {summary.std:.4f}"


def _latency(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {"p50": math.nan, "p95": math.nan}
    ms = np.array(seconds) * 1000
    return {"p50": float(np.percentile(ms, 50)), "p95": float(np.percentile(ms, 95))}


def _batched_ms(run: MethodRun) -> float:
    """Milliseconds of batched work (LLM calls) per question and seed; NaN for methods without it."""
    if not run.prepare_s or not run.latency_s:
        return math.nan
    return 1000 * sum(run.prepare_s) / len(run.latency_s)


def _finite(value: Any) -> Any:
    """JSON has no NaN: write None instead, recursively."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value
