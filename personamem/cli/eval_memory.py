"""``personamem eval-memory``: MemRerank's table, every memory through the same setwise reranker."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from personamem.cli.options import (
    command_line,
    config_options,
    runtime_option,
)
from personamem.console import out, progress_bar
from personamem.datasets.table import DATASETS, BenchmarkOptions, ChoiceName
from personamem.llm.load import REFERENCE_RUNTIME, Runtime

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.progress import Progress, TaskID

    from personamem.datasets.choice import ChoiceInstance
    from personamem.encoder import Encoder
    from personamem.eval.memory_eval import MemoryText
    from personamem.eval.runner import MethodRun
    from personamem.llm.base import FrozenLLM
    from personamem.preference.setwise import SetwiseReranker

__all__ = ["eval_memory"]

_NOT_OPTIONS = [
    f"{spec.name}.{field}"
    for spec in DATASETS
    if spec.name in BenchmarkOptions.model_fields
    for field in spec.options.model_fields
    if spec.choices is None or field == spec.choice_variant
]
"""Options of datasets without choices, and those a choice set's name fixes (prefeval-choice: form)."""


_AMAZON = ChoiceName("amazon")


@config_options(exclude=_NOT_OPTIONS)
def eval_memory(
    *,
    data: Annotated[
        Path,
        typer.Option(
            help="The benchmark folder: "
            + ", ".join(str(spec.folder) for spec in DATASETS if spec.choices is not None)
            + "."
        ),
    ],
    benchmark: Annotated[ChoiceName, typer.Option(help="Which choices to make.")] = _AMAZON,
    method: Annotated[
        list[str] | None,
        typer.Option(
            help="none, raw, dense-top5, prompted, atomic, memrerank:<folder> or raw-matched:<method> "
            "(raw history as long as that memory); repeat. [default: all]"
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Candidate orders per instance, seeds 0..N-1.")] = 5,
    instances: Annotated[
        int | None, typer.Option(min=1, help="An evenly spaced subset of the held-out instances.")
    ] = None,
    raw_tokens: Annotated[int, typer.Option(min=1, help="Token budget of the raw-history baseline.")] = 512,
    shifts: Annotated[
        int, typer.Option(min=1, max=5, help="Cyclic rotations averaged per choice (cancels position bias).")
    ] = 1,
    calibrate: Annotated[
        bool, typer.Option(help="Contextual calibration of the letters against blank items.")
    ] = True,
    item_chars: Annotated[int, typer.Option(min=20, help="Characters of each candidate shown.")] = 240,
    options: BenchmarkOptions,
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="Folder for report.json, report.md, memories.jsonl and choices.jsonl."),
    ] = Path("personamem-eval/memory"),
    llm: Annotated[
        str, typer.Option(help="The reranker's model (packaged name or folder).")
    ] = "smollm2-135m",
    extractor_llm: Annotated[
        str | None, typer.Option(help="The untrained extractors' model. [default: --llm]")
    ] = None,
    llm_runtime: Annotated[Runtime, runtime_option()] = REFERENCE_RUNTIME,
    extractor_runtime: Annotated[
        Runtime | None,
        typer.Option(help="The extractors' engine (ctranslate2: int8 generation). [default: --llm-runtime]"),
    ] = None,
) -> None:
    """Accuracy and MRR of the user's item among five, per kind of memory, on held-out users or topics."""
    from personamem.datasets.benchmark import evenly_spaced
    from personamem.encoder import default_encoder
    from personamem.eval.memory_eval import MEMORY_METHODS, MemoryEvalReport, check_method

    for name in method or []:
        try:
            check_method(name)
        except ValueError as error:
            raise typer.BadParameter(str(error), param_hint="--method") from None
    from personamem.llm.load import load_llm
    from personamem.preference.setwise import SetwiseReranker

    encoder = default_encoder()
    held_out, notes = _held_out(benchmark, data, encoder, options)
    chosen = evenly_spaced(held_out, instances)
    asked = any(i.query for i in held_out)  # without a written request, dense-top5 has nothing to search
    methods = method or [m for m in MEMORY_METHODS if asked or m != "dense-top5"]
    reranker_llm = load_llm(llm, runtime=llm_runtime)
    writer_runtime = extractor_runtime or llm_runtime
    separate = extractor_llm is not None or writer_runtime != llm_runtime
    writer = load_llm(extractor_llm or llm, runtime=writer_runtime) if separate else None
    reranker = SetwiseReranker(reranker_llm, shifts=shifts, calibrate=calibrate, item_chars=item_chars)
    runs, memories = _evaluate(
        methods,
        chosen,
        reranker,
        writer,
        encoder=encoder,
        raw_tokens=raw_tokens,
        seeds=seeds,
        out_dir=out_dir,
    )
    command = ["personamem", "eval-memory", "--data", str(data), "--benchmark", benchmark.value]
    command += [arg for name in methods for arg in ("--method", name)]
    command += ["--seeds", str(seeds), "--shifts", str(shifts), "--item-chars", str(item_chars)]
    command += [
        "--calibrate" if calibrate else "--no-calibrate",
        "--raw-tokens",
        str(raw_tokens),
        "--llm",
        llm,
    ]
    command += ["--instances", str(instances)] if instances else []
    command += ["--extractor-llm", extractor_llm] if extractor_llm else []
    command += ["--extractor-runtime", extractor_runtime] if extractor_runtime else []
    command += [*command_line(options), "--llm-runtime", llm_runtime]
    report = MemoryEvalReport(benchmark.value, runs, memories, shlex.join(command), notes)
    written = report.write(out_dir)
    out.print(report.to_markdown())
    out.print(f"report: {written}")


def _evaluate(
    methods: list[str],
    chosen: list[ChoiceInstance],
    reranker: SetwiseReranker,
    writer: FrozenLLM | None,
    *,
    encoder: Encoder,
    raw_tokens: int,
    seeds: int,
    out_dir: Path,
) -> tuple[list[MethodRun], dict[str, dict[str, MemoryText]]]:
    """Each method's memories, then its choices over ``seeds`` orders, with progress bars.

    Both are cached in ``out_dir`` (memories.jsonl, choices.jsonl), so a rerun resumes. ``writer``
    writes the extracted memories (None: the reranker's LLM).
    """
    from personamem.eval.memory_eval import build_memories, evaluate_choices, memory_key

    runs, memories = [], {}
    with progress_bar() as progress:
        for name in methods:
            task = progress.add_task(f"{name}: memories", total=len(chosen))
            memories[name] = build_memories(
                name,
                chosen,
                llm=reranker.llm,
                extractor_llm=writer,
                encoder=encoder,
                raw_tokens=raw_tokens,
                cache=out_dir / "memories.jsonl",
                progress=_advance(progress, task),
            )
            task = progress.add_task(f"{name}: choices", total=len(chosen))
            runs.append(
                evaluate_choices(
                    name,
                    chosen,
                    memories[name],
                    reranker,
                    seeds=range(seeds),
                    progress=_advance(progress, task),
                    cache=out_dir / "choices.jsonl",
                    memory_key=memory_key(name, writer or reranker.llm),
                )
            )
    return runs, memories


def _held_out(
    benchmark: ChoiceName, data: Path, encoder: Encoder, options: BaseModel
) -> tuple[list[ChoiceInstance], list[str]]:
    """The test side of the fixed split (users, or PrefEval's topics) and notes on it.

    A dataset no trainer learns from is held out whole.
    """
    from personamem.datasets.choice import ChoiceNeeds, split_users
    from personamem.datasets.table import choice_set, read_choices
    from personamem.datasets.vectors import default_vector_cache

    spec, _ = choice_set(benchmark.value)
    needs = ChoiceNeeds(encoder, cache_dir=default_vector_cache(), part="test")
    found = read_choices(benchmark.value, data, needs, options)
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


def _advance(progress: Progress, task: TaskID) -> Callable[[int], None]:
    return lambda n: progress.advance(task, n)
