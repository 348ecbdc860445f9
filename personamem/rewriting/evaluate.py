"""Evaluate rewriting strategies on iKAT over several seeds: how good, and how variable, rewrites are.

Each (strategy, shots) setting is run once per seed on the same turns and scored with
:func:`~personamem.rewriting.score_rewrites`; the raw utterance (no LLM, no statement selected) is the
floor every setting is t-tested against. Results reuse the harness's :class:`MethodRun` and statistics,
so the numbers read like the retrieval reports: mean ± std over seeds of the mean over turns.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.progress import Progress

from personamem.encoder import Encoder
from personamem.eval.benchmark import Question
from personamem.eval.runner import MethodRun
from personamem.eval.stats import Comparison, compare, summarize
from personamem.llm.base import FrozenLLM
from personamem.rewriting.config import RewriteConfig
from personamem.rewriting.metrics import METRICS, score_rewrites
from personamem.rewriting.rewriter import Rewrite, rewrite_turns
from personamem.rewriting.shots import Demonstration

__all__ = ["UTTERANCE", "RewriteReport", "evaluate_rewriting", "setting_name"]

UTTERANCE = "utterance"
"""The floor: the raw utterance as the rewrite, nothing selected."""

REPORTED = (*METRICS, "fell_back")
"""Scores per turn: the rewriting metrics and whether any part of the answer was unusable."""

COMPARED = ("selection_f1", "rouge_l", "cosine")


def setting_name(config: RewriteConfig) -> str:
    """How reports call a setting, e.g. ``sar-3shot``."""
    return f"{config.strategy}-{config.shots}shot"


def evaluate_rewriting(
    llm: FrozenLLM,
    encoder: Encoder,
    turns: Sequence[Question],
    statements: dict[str, dict[str, str]],
    configs: Sequence[RewriteConfig],
    *,
    seeds: Sequence[int],
    examples: Sequence[Demonstration] = (),
    progress: Progress | None = None,
) -> tuple[list[MethodRun], dict[str, list[Rewrite]]]:
    """The utterance floor, then every setting over ``seeds``.

    Returns:
        One run per setting (the floor first) and, per setting, the rewrites of its first seed (for
        reading examples).
    """
    floor = MethodRun(UTTERANCE, [seeds[0]], stochastic=False)
    _add(floor, [Rewrite(t.id, t.text, ()) for t in turns], turns, encoder)
    runs: list[MethodRun] = [floor]
    samples: dict[str, list[Rewrite]] = {}
    for config in configs:
        name = setting_name(config)
        sampled = config.temperature > 0  # greedy output does not depend on the seed: run it once
        run = MethodRun(name, list(seeds) if sampled else [seeds[0]], stochastic=sampled)
        task = progress.add_task(f"rewriting: {name}", total=len(run.seeds)) if progress else None
        for seed in run.seeds:
            start = time.perf_counter()
            rewrites = rewrite_turns(llm, turns, statements, config, seed=seed, examples=examples)
            run.latency_s += [(time.perf_counter() - start) / len(turns)] * len(turns)
            samples.setdefault(name, rewrites)
            _add(run, rewrites, turns, encoder)
            if progress is not None and task is not None:
                progress.advance(task)
        runs.append(run)
    return runs, samples


def _add(run: MethodRun, rewrites: list[Rewrite], turns: Sequence[Question], encoder: Encoder) -> None:
    scores = score_rewrites(rewrites, turns, encoder)
    scores["fell_back"] = {r.question_id: float(r.fell_back) for r in rewrites}
    for metric, per_turn in scores.items():
        for question_id, value in per_turn.items():
            run.scores.setdefault(metric, {}).setdefault(question_id, []).append(value)


@dataclass
class RewriteReport:
    """What one ``personamem eval-rewriting`` run measured, with the command that reproduces it."""

    runs: list[MethodRun]
    samples: dict[str, list[Rewrite]]
    turns: list[Question]
    command: str = ""

    def to_json(self) -> dict[str, Any]:
        """Summaries, t-tests against the utterance floor, and per-turn scores."""
        return {
            "command": self.command,
            "turns": len(self.turns),
            "settings": {
                run.method: {
                    "seeds": run.seeds,
                    "overall": {m: asdict(summarize(run, m)) for m in REPORTED if m in run.scores},
                    "per_turn": run.scores,
                }
                for run in self.runs
            },
            "comparisons": [_finite(asdict(c)) for c in self.comparisons()],
        }

    def comparisons(self) -> list[Comparison]:
        """Every setting against the utterance floor on selection F1, ROUGE-L and cosine."""
        floor = self.runs[0]
        return [compare(run, floor, m) for run in self.runs[1:] for m in COMPARED]

    def to_markdown(self, examples: int = 3) -> str:
        """Tables of mean ± std over seeds, t-tests against the floor, and example rewrites."""
        by_id = {t.id: t for t in self.turns}
        lines = [
            "# iKAT personal-knowledge query rewriting",
            "",
            *([f"Command: `{self.command}`", ""] if self.command else []),
            f"{len(self.turns)} turns. Selection is scored against `ptkb_provenance` on every turn "
            "(selecting nothing when nothing is relevant counts as right); rewrites against "
            "`resolved_utterance` by ROUGE-L F and embedding cosine. `fell_back` is the share of turns "
            "whose answer was unusable in some part. Mean ± std over seeds of the mean over turns.",
            "",
            "| setting | seeds | " + " | ".join(REPORTED) + " |",
            "|" + "---|" * (len(REPORTED) + 2),
        ]
        for run in self.runs:
            cells = [_cell(run, m) for m in REPORTED]
            lines.append(f"| {run.method} | {len(run.seeds)} | " + " | ".join(cells) + " |")
        lines += ["", f"## Against the raw utterance ({UTTERANCE}), paired t-test over turns", ""]
        lines += ["| setting | metric | difference | p |", "|---|---|---|---|"]
        for c in self.comparisons():
            p = "identical" if math.isnan(c.p) else f"{c.p:.3g}"
            lines.append(f"| {c.method} | {c.metric} | {c.difference:+.4f} | {p} |")
        if not examples:
            return "\n".join(lines)
        lines += ["", "## Example rewrites (first seed)", ""]
        for name, rewrites in self.samples.items():
            lines.append(f"**{name}**")
            lines.append("")
            for rewrite in rewrites[:examples]:
                turn = by_id[rewrite.question_id]
                lines.append(
                    f"- `{turn.id}` “{turn.text}” → “{rewrite.rewrite}” (selected {list(rewrite.selected)}; "
                    f"gold {list(turn.relevant)}; manual “{turn.attributes.get('resolved_utterance', '')}”)"
                )
            lines.append("")
        return "\n".join(lines)

    def write(self, out_dir: Path) -> list[Path]:
        """Write ``report.json`` and ``report.md`` into ``out_dir``."""
        out_dir.mkdir(parents=True, exist_ok=True)
        json_path, md_path = out_dir / "report.json", out_dir / "report.md"
        json_path.write_text(
            json.dumps(self.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        md_path.write_text(self.to_markdown() + "\n", encoding="utf-8")
        return [json_path, md_path]


def _finite(values: dict[str, Any]) -> dict[str, Any]:
    """JSON has no NaN: an undefined test's statistic is written as null."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


def _cell(run: MethodRun, metric: str) -> str:
    if metric not in run.scores:
        return ""
    s = summarize(run, metric)
    return f"{s.mean:.4f}" if s.seeds < 2 else f"{s.mean:.4f} ± {s.std:.4f}"
