"""``personamem eval-memory`` as a function: MemRerank's table, every memory through one setwise reranker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from personamem.datasets.table import DATASETS, BenchmarkOptions, ChoiceName
from personamem.eval.runs.base import EvalRun, EvalSummary
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.datasets.choice import ChoiceInstance
    from personamem.encoder import Encoder
    from personamem.eval.memory_eval import MemoryText
    from personamem.eval.runner import MethodRun
    from personamem.llm.base import FrozenLLM
    from personamem.preference.setwise import SetwiseReranker

__all__ = ["NOT_OPTIONS", "MemoryEvalRun", "run"]

NOT_OPTIONS = tuple(
    f"options.{spec.name}.{field}"
    for spec in DATASETS
    if spec.name in BenchmarkOptions.model_fields
    for field in spec.options.model_fields
    if spec.choices is None or field == spec.choice_variant
)
"""Options of datasets without choices, and those a choice set's name fixes (prefeval-choice: form)."""

_FOLDERS = ", ".join(str(spec.folder) for spec in DATASETS if spec.choices is not None)


class MemoryEvalRun(EvalRun):
    """Which choices, which memories, and the reranker that reads them."""

    data: Path = Field(description=f"The benchmark folder: {_FOLDERS}.")
    benchmark: ChoiceName = ChoiceName("amazon")
    """Which choices to make."""
    methods: tuple[str, ...] = Field(default=(), alias="method")
    """none, raw, dense-top5, prompted, atomic, memrerank:<folder> or raw-matched:<method> (raw history as
    long as that memory); repeat. [default: all]"""
    seeds: int = Field(default=5, ge=1)
    """Candidate orders per instance, seeds 0..N-1."""
    instances: int | None = Field(default=None, ge=1)
    """An evenly spaced subset of the held-out instances."""
    raw_tokens: int = Field(default=512, ge=1)
    """Token budget of the raw-history baseline."""
    shifts: int = Field(default=1, ge=1, le=5)
    """Cyclic rotations averaged per choice (cancels position bias)."""
    calibrate: bool = True
    """Contextual calibration of the letters against blank items."""
    item_chars: int = Field(default=240, ge=20)
    """Characters of each candidate shown."""
    options: BenchmarkOptions = BenchmarkOptions()
    """Each benchmark's reading options."""
    out_dir: Path = Field(default=Path("personamem-eval/memory"), alias="out")
    """Folder for report.json, report.md, memories.jsonl and choices.jsonl."""
    llm: str = "smollm2-135m"
    """The reranker's model (packaged name or folder)."""
    extractor_llm: str | None = None
    """The untrained extractors' model. [default: --llm]"""
    llm_runtime: Runtime = REFERENCE_RUNTIME
    """The local LLM engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the reference)."""
    extractor_runtime: Runtime | None = None
    """The extractors' engine (ctranslate2: int8 generation). [default: --llm-runtime]"""

    @field_validator("methods")
    @classmethod
    def _known(cls, methods: tuple[str, ...]) -> tuple[str, ...]:
        from personamem.eval.memory_eval import check_method

        for name in methods:
            check_method(name)  # a ValueError naming the method and the choices
        return methods


def run(config: MemoryEvalRun, *, progress: Progress | None = None, command: str = "") -> EvalSummary:
    """Accuracy and MRR of the user's item among five, per kind of memory, on held-out users or topics."""
    from personamem.datasets.benchmark import evenly_spaced
    from personamem.encoder import default_encoder
    from personamem.eval.memory_eval import MEMORY_METHODS, MemoryEvalReport
    from personamem.llm.load import load_llm
    from personamem.preference.setwise import SetwiseReranker

    encoder = default_encoder()
    held_out, notes = _held_out(config, encoder)
    chosen = evenly_spaced(held_out, config.instances)
    asked = any(i.query for i in held_out)  # without a written request, dense-top5 has nothing to search
    methods = list(config.methods) or [m for m in MEMORY_METHODS if asked or m != "dense-top5"]
    reranker_llm = load_llm(config.llm, runtime=config.llm_runtime)
    writer_runtime = config.extractor_runtime or config.llm_runtime
    separate = config.extractor_llm is not None or writer_runtime != config.llm_runtime
    writer = load_llm(config.extractor_llm or config.llm, runtime=writer_runtime) if separate else None
    reranker = SetwiseReranker(
        reranker_llm, shifts=config.shifts, calibrate=config.calibrate, item_chars=config.item_chars
    )
    runs, memories = _evaluate(methods, chosen, reranker, writer, encoder, config, progress)
    report = MemoryEvalReport(config.benchmark.value, runs, memories, command, notes)
    written = report.write(config.out_dir)
    return EvalSummary(lines=[report.to_markdown(), f"report: {written}"])


def _evaluate(
    methods: list[str],
    chosen: list[ChoiceInstance],
    reranker: SetwiseReranker,
    writer: FrozenLLM | None,
    encoder: Encoder,
    config: MemoryEvalRun,
    progress: Progress | None,
) -> tuple[list[MethodRun], dict[str, dict[str, MemoryText]]]:
    """Each method's memories, then its choices over the seeds' orders.

    Both are cached in the run's folder (memories.jsonl, choices.jsonl), so a rerun resumes. ``writer``
    writes the extracted memories (None: the reranker's LLM).
    """
    from personamem.eval.memory_eval import build_memories, evaluate_choices, memory_key

    runs, memories = [], {}
    for name in methods:
        memories[name] = build_memories(
            name,
            chosen,
            llm=reranker.llm,
            extractor_llm=writer,
            encoder=encoder,
            raw_tokens=config.raw_tokens,
            cache=config.out_dir / "memories.jsonl",
            progress=_task(progress, f"{name}: memories", len(chosen)),
        )
        runs.append(
            evaluate_choices(
                name,
                chosen,
                memories[name],
                reranker,
                seeds=range(config.seeds),
                progress=_task(progress, f"{name}: choices", len(chosen)),
                cache=config.out_dir / "choices.jsonl",
                memory_key=memory_key(name, writer or reranker.llm),
            )
        )
    return runs, memories


def _held_out(config: MemoryEvalRun, encoder: Encoder) -> tuple[list[ChoiceInstance], list[str]]:
    """The test side of the fixed split (users, or PrefEval's topics) and notes on it.

    A dataset no trainer learns from is held out whole.
    """
    from personamem.datasets.choice import ChoiceNeeds, split_users
    from personamem.datasets.table import choice_set, read_choices
    from personamem.datasets.vectors import default_vector_cache

    spec, _ = choice_set(config.benchmark.value)
    needs = ChoiceNeeds(encoder, cache_dir=default_vector_cache(), part="test")
    found = read_choices(config.benchmark.value, config.data, needs, config.options)
    notes = [spec.choice_note] if spec.choice_note else []
    if not spec.choices_trained:
        return found, [
            f"all {len({i.group for i in found})} users held out: no extractor here is trained on "
            f"{spec.name} ({len(found)} instances)",
            *notes,
        ]
    _, test = split_users([i.group for i in found])
    kept = [i for i in found if i.group in test]
    what = "users" if all(i.group == i.user_id for i in found) else "topics"
    return kept, [f"held out: {len(test)} {what} never trained on ({len(kept)} instances)", *notes]


def _task(progress: Progress | None, what: str, total: int) -> Callable[[int], None] | None:
    """A progress bar's advance for ``what`` (None without a progress display)."""
    if progress is None:
        return None
    task = progress.add_task(what, total=total)
    return lambda n: progress.advance(task, n)
