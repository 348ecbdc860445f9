"""Query adapters against dense and hybrid on every benchmark's held-out users.

Runs are folders named ``<variant>-s<seed>`` (e.g. ``gold-s0``, ``synthetic-s1``), each written by
``personamem train adapter`` with the same user split, so every variant is tested on the same users,
whom no run trained on. Each adapter runs as the methods ``adapter:<name>`` (dense) and
``adapter-rrf:<name>`` (hybrid) through a real store; a variant's score is the mean ± std over its
training seeds, and each row is compared with the better of dense and hybrid on that benchmark by a
paired t-test over questions (each averaged over seeds first).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import Progress

from personamem.datasets import Benchmark, BenchmarkName, DataSource, dataset, held_out_questions
from personamem.datasets.vectors import build_store
from personamem.encoder import Encoder
from personamem.eval.runner import MethodRun, evaluate_method, warm_up_metrics
from personamem.eval.stats import compare, summarize
from personamem.methods import method_named
from personamem.store import Store

__all__ = ["AdapterReport", "evaluate_adapters", "find_runs", "write_report"]

METRICS = ("recall@5", "recall@10", "ndcg@10")
_RUN = re.compile(r"^(?P<variant>.+)-s(?P<seed>\d+)$")


@dataclass
class AdapterReport:
    """Per benchmark, every method's run (variants merged over their training seeds)."""

    runs: dict[str, dict[str, MethodRun]] = field(default_factory=dict)
    questions: dict[str, int] = field(default_factory=dict)
    command: str = ""

    def rows(self) -> list[dict[str, Any]]:
        """One row per (benchmark, method): mean ± std per metric, and p against the better baseline."""
        out = []
        for benchmark, runs in self.runs.items():
            best = max(("dense", "hybrid"), key=lambda m: summarize(runs[m], "recall@10").mean)
            for label, run in runs.items():
                row: dict[str, Any] = {"benchmark": benchmark, "method": label, "seeds": len(run.seeds)}
                for metric in METRICS:
                    summary = summarize(run, metric)
                    row[metric] = {"mean": summary.mean, "std": summary.std}
                    if label != best:
                        comparison = compare(run, runs[best], metric)
                        row[metric].update(vs=best, difference=comparison.difference, p=comparison.p)
                out.append(row)
        return out

    def markdown(self) -> str:
        """The table as Markdown: one line per benchmark and method."""
        lines = [
            "| benchmark (questions) | method | " + " | ".join(METRICS) + " |",
            "|---|---|" + "---|" * len(METRICS),
        ]
        for row in self.rows():
            cells = []
            for metric in METRICS:
                value = row[metric]
                text = f"{value['mean']:.3f}" + (f" ± {value['std']:.3f}" if row["seeds"] > 1 else "")
                if "p" in value:
                    text += f" ({value['difference']:+.3f} vs {value['vs']}, p {value['p']:.2g})"
                cells.append(text)
            name = f"{row['benchmark']} ({self.questions[row['benchmark']]})"
            lines.append(f"| {name} | {row['method']} | " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Rows and the command, JSON-ready."""
        return {"command": self.command, "questions": self.questions, "rows": self.rows()}


def find_runs(root: Path) -> dict[str, list[Path]]:
    """``<variant>-s<seed>`` adapter folders under ``root``, by variant, in seed order.

    Raises:
        ValueError: no adapter folder there.
    """
    found: dict[str, list[tuple[int, Path]]] = {}
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        match = _RUN.match(folder.name)
        if match and (folder / "adapter.json").is_file():
            found.setdefault(match["variant"], []).append((int(match["seed"]), folder))
    if not found:
        raise ValueError(f"{root}: no adapter folders named <variant>-s<seed> with an adapter.json")
    return {variant: [f for _, f in sorted(runs)] for variant, runs in sorted(found.items())}


def evaluate_adapters(
    root: Path,
    data_root: Path,
    encoder: Encoder,
    *,
    benchmarks: Sequence[BenchmarkName] = (),
    shipped: Sequence[str] = (),
    variants: Sequence[str] = (),
    fusion: bool = True,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> AdapterReport:
    """Every variant under ``root`` (and each ``shipped`` adapter) on each benchmark's held-out users.

    The held-out users are those of the runs' ``split-<benchmark>.json``; runs whose splits differ are
    refused, since their scores would not be on the same users. ``benchmarks`` defaults to every
    benchmark the runs name, ``variants`` to every variant found; ``fusion`` adds the
    ``adapter-rrf`` row of each variant (hybrid weighted to dense as the default is). The package's
    ``default`` method is always a row.

    Raises:
        ValueError: no runs, runs with different splits, or a benchmark no run was split on.
    """
    found = find_runs(root)
    unknown = sorted(set(variants) - set(found))
    if unknown:
        raise ValueError(f"{root}: no runs of variant(s) {unknown}; found {sorted(found)}")
    chosen = {v: runs for v, runs in found.items() if not variants or v in variants}
    folders = [f for runs in chosen.values() for f in runs]
    named = sorted(
        {p.name.removeprefix("split-").removesuffix(".json") for p in folders[0].glob("split-*.json")}
    )
    report = AdapterReport()
    warm_up_metrics()
    for benchmark in benchmarks or [BenchmarkName(b) for b in named]:
        files = [f / f"split-{benchmark.value}.json" for f in folders]
        missing = [p for p in files if not p.is_file()]
        if missing:
            raise ValueError(
                f"{benchmark.value}: run {missing[0].parent} was not split on it (no {missing[0].name})"
            )
        if len({p.read_text(encoding="utf-8") for p in files}) != 1:
            raise ValueError(f"{benchmark.value}: the runs under {root} hold different user splits")
        split_file = files[0]
        folder = data_root / str(dataset(benchmark).folder)
        loaded = held_out_questions(DataSource(benchmark=benchmark, data=folder).questions(), split_file)
        report.questions[benchmark.value] = len([q for q in loaded.questions if q.relevant])
        methods: dict[str, list[str]] = {"dense": ["dense"], "hybrid": ["hybrid"], "default": ["default"]}
        for name in shipped:
            methods[f"adapter:{name}"] = [f"adapter:{name}"]
        for variant, runs in chosen.items():
            methods[variant] = [f"adapter:{f}" for f in runs]
            if fusion:
                methods[f"{variant} + rrf"] = [f"adapter-rrf:{f}" for f in runs]
        with tempfile.TemporaryDirectory(prefix="personamem-adapter-eval-") as tmp:
            store = build_store(loaded, Path(tmp) / "store", encoder, cache_dir=cache_dir, progress=progress)
            try:
                report.runs[benchmark.value] = {
                    label: _merged(label, names, loaded, store, progress) for label, names in methods.items()
                }
            finally:
                store.close()
    return report


def _merged(
    label: str, names: list[str], benchmark: Benchmark, store: Store, progress: Progress | None
) -> MethodRun:
    """One run per training seed's method, merged as the seeds of one run."""
    merged = MethodRun(label, list(range(len(names))), stochastic=len(names) > 1)
    for name in names:
        run = evaluate_method(method_named(name, None), benchmark, store, metrics=METRICS, progress=progress)
        for metric, per_question in run.scores.items():
            for qid, values in per_question.items():
                merged.scores.setdefault(metric, {}).setdefault(qid, []).extend(values)
        merged.latency_s += run.latency_s
    return merged


def write_report(report: AdapterReport, out_dir: Path) -> None:
    """``report.json`` and ``report.md`` in ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
    (out_dir / "report.md").write_text(f"`{report.command}`\n\n{report.markdown()}\n", encoding="utf-8")
