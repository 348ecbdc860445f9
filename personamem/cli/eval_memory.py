"""``personamem eval-memory``: MemRerank's table, every memory through the same setwise reranker."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from personamem.cli.options import REFERENCE_LLM_RUNTIME, LLMRuntime, runtime_option
from personamem.console import out, progress_bar

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from personamem.encoder import Encoder
    from personamem.eval.choice import ChoiceInstance

__all__ = ["eval_memory"]


class ChoiceBenchmark(StrEnum):
    """Benchmarks with 1-in-n choices for a memory to decide."""

    AMAZON = "amazon"
    PREFEVAL_EXPLICIT = "prefeval-explicit"
    PREFEVAL_CHOICE = "prefeval-choice"
    PREFEVAL_PERSONA = "prefeval-persona"
    PERSONABENCH = "personabench"


def eval_memory(
    data: Annotated[
        Path, typer.Option(help="The benchmark folder: amazon_beauty, prefeval or personabench.")
    ],
    benchmark: Annotated[
        ChoiceBenchmark, typer.Option(help="Which choices to make.")
    ] = ChoiceBenchmark.AMAZON,
    method: Annotated[
        list[str] | None,
        typer.Option(
            help="none, raw, dense-top5, prompted, atomic or memrerank:<folder>; repeat. [default: all]"
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
    inter_turns: Annotated[int, typer.Option(min=0, help="PrefEval distractor turns per user.")] = 20,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Folder for report.json, report.md, memories.jsonl.")
    ] = Path("personamem-eval/memory"),
    llm: Annotated[
        str, typer.Option(help="The reranker's model (packaged name or folder).")
    ] = "smollm2-135m",
    extractor_llm: Annotated[
        str | None, typer.Option(help="The untrained extractors' model. [default: --llm]")
    ] = None,
    llm_runtime: Annotated[LLMRuntime, runtime_option()] = REFERENCE_LLM_RUNTIME,
) -> None:
    """Accuracy and MRR of the user's item among five, per kind of memory, on held-out users or topics."""
    from personamem.encoder import default_encoder
    from personamem.eval.benchmark import evenly_spaced
    from personamem.eval.memory_eval import MEMORY_METHODS, MemoryEvalReport, build_memories, evaluate_choices
    from personamem.llm.load import load_llm
    from personamem.preference.setwise import SetwiseReranker

    encoder = default_encoder()
    held_out, notes = _held_out(benchmark, data, encoder, inter_turns)
    chosen = evenly_spaced(held_out, instances)
    methods = method or [
        m for m in MEMORY_METHODS if benchmark != ChoiceBenchmark.AMAZON or m != "dense-top5"
    ]
    if benchmark == ChoiceBenchmark.AMAZON:
        notes.append("next-review selection (no written request), not product search")
    reranker_llm = load_llm(llm, runtime=llm_runtime.value)  # type: ignore[arg-type]  # an LLMRuntime
    writer = load_llm(extractor_llm, runtime=llm_runtime.value) if extractor_llm else None  # type: ignore[arg-type]
    reranker = SetwiseReranker(reranker_llm, shifts=shifts, calibrate=calibrate, item_chars=item_chars)
    runs, memories = [], {}
    with progress_bar() as progress:
        for name in methods:
            task = progress.add_task(f"{name}: memories", total=len(chosen))
            memories[name] = build_memories(
                name,
                chosen,
                llm=reranker_llm,
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
                )
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
    command += ["--inter-turns", str(inter_turns)] if benchmark != ChoiceBenchmark.AMAZON else []
    command += ["--llm-runtime", llm_runtime.value]
    report = MemoryEvalReport(benchmark.value, runs, memories, shlex.join(command), notes)
    written = report.write(out_dir)
    out.print(report.to_markdown())
    out.print(f"report: {written}")


def _held_out(
    benchmark: ChoiceBenchmark, data: Path, encoder: Encoder, inter_turns: int
) -> tuple[list[ChoiceInstance], list[str]]:
    """The test side of the fixed split (users for Amazon, topics for PrefEval) and notes on it."""
    from personamem.eval.choice import (
        load_amazon_choices,
        personabench_choices,
        prefeval_choices,
        split_users,
    )
    from personamem.eval.vectors import default_vector_cache

    if benchmark == ChoiceBenchmark.AMAZON:
        found = load_amazon_choices(data, split="test", encoder=encoder, cache_dir=default_vector_cache())
    elif benchmark == ChoiceBenchmark.PERSONABENCH:
        from personamem.eval.benchmarks.personabench import load_personabench_benchmark

        found = personabench_choices(load_personabench_benchmark(data), encoder)
        return found, [
            f"all {len({i.group for i in found})} users held out: no extractor here is trained on "
            f"PersonaBench ({len(found)} preference questions)"
        ]
    else:
        from personamem.eval.benchmarks.prefeval import load_prefeval_benchmark

        form = benchmark.value.removeprefix("prefeval-")
        found = prefeval_choices(load_prefeval_benchmark(data, form=form, inter_turns=inter_turns))  # type: ignore[arg-type]
    _, test = split_users([i.group for i in found])
    kept = [i for i in found if i.group in test]
    what = "users" if benchmark == ChoiceBenchmark.AMAZON else "topics"
    return kept, [f"held out: {len(test)} {what} never trained on ({len(kept)} instances)"]


def _advance(progress: Progress, task: TaskID) -> Callable[[int], None]:
    return lambda n: progress.advance(task, n)
