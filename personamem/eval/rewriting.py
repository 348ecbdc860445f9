"""Evaluate rewriting strategies on iKAT over several seeds: how good, and how variable, rewrites are.

The harness side of :mod:`personamem.rewriting`: it loads iKAT turns as harness
:class:`~personamem.datasets.benchmark.Question` objects (with their gold), turns them into the rewriter's
:class:`~personamem.rewriting.Turn`, makes few-shot demonstrations from solved turns and scores
rewrites against the gold.

Each (strategy, shots) setting is run once per seed on the same turns and scored with
:func:`score_rewrites`; the raw utterance (no LLM, no statement selected) is the floor every setting is
t-tested against. Results reuse the harness's :class:`MethodRun` and statistics, so the numbers read
like the retrieval reports: mean ± std over seeds of the mean over turns.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import Progress

from personamem.datasets import Question
from personamem.datasets.ikat import load_ikat_benchmark
from personamem.encoder import Encoder
from personamem.eval.answers import rouge_l
from personamem.eval.runner import MethodRun
from personamem.eval.stats import Comparison, compare, summarize
from personamem.llm.base import FrozenLLM
from personamem.llm.parsing import tally_outputs
from personamem.rewriting.config import RewriteConfig
from personamem.rewriting.data import statements_by_user
from personamem.rewriting.metrics import METRICS, selection_prf
from personamem.rewriting.rewriter import Rewrite, rewrite_turns
from personamem.rewriting.shots import Demonstration
from personamem.rewriting.turn import Turn

__all__ = [
    "UTTERANCE",
    "RewriteReport",
    "as_turn",
    "evaluate_rewriting",
    "load_ikat_turns",
    "make_demonstrations",
    "score_rewrites",
    "setting_name",
]

UTTERANCE = "utterance"
"""The floor: the raw utterance as the rewrite, nothing selected."""

REPORTED = (*METRICS, "fell_back")
"""Scores per turn: the rewriting metrics and whether any part of the answer was unusable."""

COMPARED = ("selection_f1", "rouge_l", "cosine")


# --- iKAT turns and demonstrations ---------------------------------------------------------------


def load_ikat_turns(
    data_dir: str | Path, *, split: str = "2023_test"
) -> tuple[list[Question], dict[str, dict[str, str]]]:
    """All turns of one iKAT split, including those that need no PTKB statement, and each topic's PTKB.

    :func:`~personamem.datasets.ikat.load_ikat_benchmark` skips turns with empty
    ``ptkb_provenance``, since statement retrieval cannot be scored on them. Rewriting must still
    handle them (the right answer is a rewrite without personal facts, and selecting nothing is
    scorable), so this asks it for all turns.

    Args:
        data_dir: the folder holding the ``<split>_topics.json`` files.
        split: e.g. ``"2023_train"``, ``"2023_test"``, ``"2024_test"``.

    Returns:
        The turns in file order, as :func:`load_ikat_benchmark` makes them but with possibly empty
        ``relevant`` (pass them through :func:`as_turn` to rewrite them); and user id -> statement
        id -> statement text.

    Raises:
        IngestError: as :func:`load_ikat_benchmark`.
    """
    bench = load_ikat_benchmark(data_dir, split=split, include_unlabelled=True)
    return bench.questions, statements_by_user(bench.records)


def as_turn(question: Question) -> Turn:
    """The rewriter's view of a benchmark question: its id, user, text and earlier utterances."""
    return Turn(id=question.id, user_id=question.user_id, text=question.text, context=question.context)


def make_demonstrations(
    turns: Iterable[Question], statements_by_user: Mapping[str, Mapping[str, str]]
) -> list[Demonstration]:
    """Demonstrations from solved turns (e.g. iKAT train), leaving out those with no ``resolved_utterance``.

    Turns with no relevant statement are kept: they show that selecting nothing is a valid answer.
    """
    demos = []
    for turn in turns:
        rewrite = turn.attributes.get("resolved_utterance")
        if not isinstance(rewrite, str) or not rewrite.strip():
            continue
        statements = statements_by_user[turn.user_id]
        demos.append(
            Demonstration(
                user_id=turn.user_id,
                turn_id=turn.id,
                utterance=turn.text,
                context=turn.context,
                statements=statements,
                selected=tuple(key for key in turn.relevant if key in statements),
                rewrite=rewrite.strip(),
                response=turn.answer,
            )
        )
    return demos


# --- scoring -------------------------------------------------------------------------------------


def score_rewrites(
    rewrites: Sequence[Rewrite], turns: Sequence[Question], encoder: Encoder
) -> dict[str, dict[str, float]]:
    """Per-turn scores against iKAT's gold, as metric name (:data:`METRICS`) -> question id -> value.

    Selection is scored against ``Question.relevant`` (the organizers' ``ptkb_provenance``) with
    :func:`selection_prf`; the rewrite against ``attributes["resolved_utterance"]`` by ROUGE-L F (word
    overlap) and by the cosine of sentence embeddings (meaning, robust to paraphrase). Turns without
    a (non-blank) ``resolved_utterance`` get selection scores only. All rewrites are embedded in one
    batch; the encoder's rows are unit vectors, so their dot product is the cosine.

    Raises:
        ValueError: a rewrite names no turn of ``turns``.
    """
    by_id = {turn.id: turn for turn in turns}
    unknown = [r.turn_id for r in rewrites if r.turn_id not in by_id]
    if unknown:
        raise ValueError(f"rewrites for turns not given: {unknown}")
    scores: dict[str, dict[str, float]] = {name: {} for name in METRICS}
    pairs: list[tuple[str, str, str]] = []  # question id, rewrite, reference
    for rewrite in rewrites:
        turn = by_id[rewrite.turn_id]
        p, r, f1 = selection_prf(rewrite.selected, turn.relevant)
        scores["selection_precision"][turn.id] = p
        scores["selection_recall"][turn.id] = r
        scores["selection_f1"][turn.id] = f1
        reference = turn.attributes.get("resolved_utterance")
        if isinstance(reference, str) and reference.strip():
            pairs.append((turn.id, rewrite.rewrite, reference))
            scores["rouge_l"][turn.id] = rouge_l(rewrite.rewrite, reference)
    if pairs:
        vectors = encoder.encode([p[1] for p in pairs] + [p[2] for p in pairs])
        cosines = np.einsum("ij,ij->i", vectors[: len(pairs)], vectors[len(pairs) :])
        for (question_id, _, _), cosine in zip(pairs, cosines, strict=True):
            scores["cosine"][question_id] = float(cosine)
    return scores


# --- settings over seeds -------------------------------------------------------------------------


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

    ``turns`` are the benchmark's questions with their gold (from :func:`load_ikat_turns`); the
    rewriter sees each through :func:`as_turn`.

    Returns:
        One run per setting (the floor first) and, per setting, the rewrites of its first seed (for
        reading examples).
    """
    floor = MethodRun(UTTERANCE, [seeds[0]], stochastic=False)
    _add(floor, [Rewrite(t.id, t.text, ()) for t in turns], turns, encoder)
    asked = [as_turn(t) for t in turns]
    runs: list[MethodRun] = [floor]
    samples: dict[str, list[Rewrite]] = {}
    for config in configs:
        name = setting_name(config)
        sampled = config.temperature > 0  # greedy output does not depend on the seed: run it once
        run = MethodRun(name, list(seeds) if sampled else [seeds[0]], stochastic=sampled)
        task = progress.add_task(f"rewriting: {name}", total=len(run.seeds)) if progress else None
        for seed in run.seeds:
            start = time.perf_counter()
            with tally_outputs() as outputs:
                rewrites = rewrite_turns(llm, asked, statements, config, seed=seed, examples=examples)
            run.latency_s += [(time.perf_counter() - start) / len(turns)] * len(turns)
            run.outputs = dict(Counter(run.outputs) + outputs)
            samples.setdefault(name, rewrites)
            _add(run, rewrites, turns, encoder)
            if progress is not None and task is not None:
                progress.advance(task)
        runs.append(run)
    return runs, samples


def _add(run: MethodRun, rewrites: list[Rewrite], turns: Sequence[Question], encoder: Encoder) -> None:
    scores = score_rewrites(rewrites, turns, encoder)
    scores["fell_back"] = {r.turn_id: float(r.fell_back) for r in rewrites}
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
                    "llm_outputs": run.outputs,
                    "seconds_per_turn": _seconds_per_turn(run),
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
            "whose answer was unusable in some part; `s/turn` the LLM's wall time per turn. Mean ± std over "
            "seeds of the mean over turns.",
            "",
            "| setting | seeds | " + " | ".join(REPORTED) + " | s/turn |",
            "|" + "---|" * (len(REPORTED) + 3),
        ]
        for run in self.runs:
            cells = [_cell(run, m) for m in REPORTED]
            seconds = _seconds_per_turn(run)
            timing = "" if seconds is None else f"{seconds:.2f}"
            lines.append(f"| {run.method} | {len(run.seeds)} | " + " | ".join(cells) + f" | {timing} |")
        lines += ["", f"## Against the raw utterance ({UTTERANCE}), paired t-test over turns", ""]
        lines += ["| setting | metric | difference | p |", "|---|---|---|---|"]
        for c in self.comparisons():
            p = "identical" if math.isnan(c.p) else f"{c.p:.3g}"
            lines.append(f"| {c.method} | {c.metric} | {c.difference:+.4f} | {p} |")
        lines += ["", "## LLM answers parsed (all seeds)", "", "| setting | clean | repaired | failed |"]
        lines.append("|---|---|---|---|")
        for run in self.runs[1:]:
            n = [run.outputs.get(f"rewrite answer {o}", 0) for o in ("clean", "repaired", "failed")]
            lines.append(f"| {run.method} | " + " | ".join(map(str, n)) + " |")
        if not examples:
            return "\n".join(lines)
        lines += ["", "## Example rewrites (first seed)", ""]
        for name, rewrites in self.samples.items():
            lines.append(f"**{name}**")
            lines.append("")
            for rewrite in rewrites[:examples]:
                turn = by_id[rewrite.turn_id]
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


def _seconds_per_turn(run: MethodRun) -> float | None:
    """Mean wall time per turn over the run's seeds; None for the floor, which asks no LLM."""
    return sum(run.latency_s) / len(run.latency_s) if run.latency_s else None


def _cell(run: MethodRun, metric: str) -> str:
    if metric not in run.scores:
        return ""
    s = summarize(run, metric)
    return f"{s.mean:.4f}" if s.seeds < 2 else f"{s.mean:.4f} ± {s.std:.4f}"
