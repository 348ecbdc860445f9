"""``personamem eval-rewriting`` as a function: query rewriting with the user's PTKB on TREC iKAT."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["RewriteStrategy", "RewritingEvalRun", "run"]


class RewriteStrategy(StrEnum):
    """How query rewriting uses the user's PTKB (see :class:`~personamem.rewriting.RewriteConfig`)."""

    NONE = "none"
    ALL = "all"
    STR = "str"
    SAR = "sar"


class RewritingEvalRun(EvalRun):
    """Which turns, which strategies and demonstrations, with which LLM."""

    data: Path
    """The TREC iKAT folder (<split>_topics.json files)."""
    strategies: tuple[RewriteStrategy, ...] = Field(default=tuple(RewriteStrategy), alias="strategy")
    """none, all, str or sar; repeat to compare."""
    shots: tuple[int, ...] = Field(default=(0,), min_length=1)
    """Demonstrations per turn; repeat to compare."""
    seeds: int = Field(default=5, ge=1)
    """Runs per setting, seeds 0..N-1."""
    split: str = "2023_test"
    """Topics to rewrite: <split>_topics.json."""
    shots_split: str = "2023_train"
    """Topics the demonstrations come from."""
    max_turns: int | None = Field(default=None, ge=1)
    """Rewrite an evenly spaced subset of this many turns."""
    temperature: float = Field(default=0.7, ge=0.0)
    """Sampling temperature (0 = greedy)."""
    max_tokens: int = Field(default=128, ge=1)
    """Most tokens generated per answer (a JSON answer cut short is parsed leniently)."""
    out_dir: Path = Field(default=Path("personamem-eval/ikat-rewriting"), alias="out")
    """Folder for report.json and report.md."""
    llm: str = "smollm2-135m"
    """The frozen LLM: smollm2-135m (default), qwen2.5-coder-0.5b, qwen2.5-coder-1.5b (opt-in:
    personamem models install NAME) or a local transformers model folder."""
    llm_runtime: Runtime = REFERENCE_RUNTIME
    """The local LLM engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the reference)."""

    @field_validator("shots")
    @classmethod
    def _no_negative_shots(cls, shots: tuple[int, ...]) -> tuple[int, ...]:
        if min(shots) < 0:
            raise ValueError(f"demonstrations per turn must be 0 or more, got {min(shots)}")
        return shots

    @property
    def shot_counts(self) -> list[int]:
        """The demonstration counts, each once, smallest first."""
        return sorted(set(self.shots))


def run(config: RewritingEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Score query rewriting with the user's PTKB (None/All/STR/SAR) on iKAT: mean ± std over seeds."""
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

    turns, statements = load_ikat_turns(config.data, split=config.split)
    turns = evenly_spaced(turns, config.max_turns)
    counts = config.shot_counts
    examples = []
    if counts[-1] > 0:
        train, train_statements = load_ikat_turns(config.data, split=config.shots_split)
        examples = make_demonstrations(train, train_statements)
    settings = [
        RewriteConfig(strategy=s.value, shots=k, temperature=config.temperature, max_tokens=config.max_tokens)
        for s in dict.fromkeys(config.strategies)
        for k in counts
    ]
    runs, samples = evaluate_rewriting(
        load_llm(config.llm, runtime=config.llm_runtime),
        default_encoder(),
        turns,
        statements,
        settings,
        seeds=range(config.seeds),
        examples=examples,
        progress=progress,
    )
    report = RewriteReport(runs, samples, turns, command=command)
    written = report.write(config.out_dir)
    return EvalSummary(lines=[report.to_markdown(examples=0), f"report: {written[1]}"])
