"""One evaluation, end to end: load a benchmark, build the store, run each method, write the report.

This is what ``personamem eval`` calls; the CLI only turns flags into an :class:`EvalConfig`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import shlex
import tempfile
import time
from enum import StrEnum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.progress import Progress

from personamem.encoder import Encoder, default_encoder
from personamem.errors import MissingExtraError
from personamem.eval.benchmark import Benchmark, evenly_spaced
from personamem.eval.report import Report
from personamem.eval.runner import build_store, evaluate_method, warm_up_metrics
from personamem.ingest.personabench import Render
from personamem.llm import FrozenLLM, TransformersLLM
from personamem.methods import is_method, method_config, method_named, method_names

__all__ = ["BenchmarkName", "EvalConfig", "load_benchmark", "run_eval"]


class BenchmarkName(StrEnum):
    """Benchmarks with a loader."""

    PERSONABENCH = "personabench"
    LOCOMO = "locomo"
    IKAT = "ikat"
    PREFEVAL = "prefeval"


class EvalConfig(BaseModel):
    """What to evaluate and how; every field is a ``personamem eval`` flag of the same name.

    Attributes:
        benchmark: which loader reads ``data``.
        data: the benchmark folder in its upstream layout.
        methods: method names (:data:`~personamem.methods.FIRST_STAGE` and
            :data:`~personamem.methods.PERSONALIZED`), run in this order.
        seeds: seeds 0..seeds-1 for stochastic methods; deterministic ones run once.
        baseline: a method of ``methods`` to t-test the others against.
        depth: how many records each method ranks per question (the deepest recall cutoff).
        noise: PersonaBench distractor level.
        render: PersonaBench session rendering (readable text, or upstream's compact JSON).
        split: iKAT topics file, ``<split>_topics.json``.
        form: PrefEval preference form.
        inter_turns: PrefEval distractor user turns per user.
        answers: also score answers with the default local LLM: log-likelihood of the gold answer given
            the top ``profile_k`` records, and overlap of a generated answer (slow on a CPU).
        profile_k: records in the profile the LLM sees.
        max_questions: evaluate an evenly spaced subset of this many questions (quick looks, tests).
        llm: the frozen LLM for methods and answers that need one: a packaged model name
            (:data:`~personamem.llm.packaged.LOCAL_MODELS`) or a local transformers model folder.
        held_out: a ``split.json`` from ``personamem train purple``: evaluate only its test users,
            whom the checkpoint never saw.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: BenchmarkName
    data: Path
    methods: tuple[str, ...] = ("dense",)
    seeds: int = Field(default=1, ge=1)
    baseline: str | None = None
    depth: int = Field(default=100, ge=1)
    noise: float = 0.0
    render: Render = "text"
    split: str = "2023_test"
    form: Literal["explicit", "choice", "persona"] = "explicit"
    inter_turns: int = Field(default=20, ge=0)
    answers: bool = False
    profile_k: int = Field(default=5, ge=1)
    max_questions: int | None = Field(default=None, ge=1)
    llm: str = "smollm2"
    held_out: Path | None = None

    @model_validator(mode="after")
    def _known_methods(self) -> EvalConfig:
        unknown = [m for m in self.methods if not is_method(m)]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from: {', '.join(method_names())}")
        if not self.methods:
            raise ValueError("give at least one method")
        if self.baseline is not None and self.baseline not in self.methods:
            raise ValueError(
                f"baseline {self.baseline!r} must be one of the methods run {list(self.methods)}"
            )
        return self

    def command(self) -> str:
        """The ``personamem eval`` command line that reproduces this configuration."""
        args = ["personamem", "eval", "--benchmark", self.benchmark.value, "--data", str(self.data)]
        for method in self.methods:
            args += ["--method", method]
        args += ["--seeds", str(self.seeds), "--depth", str(self.depth)]
        if self.baseline:
            args += ["--baseline", self.baseline]
        if self.answers:
            args += ["--answers", "--profile-k", str(self.profile_k)]
        if self.max_questions:
            args += ["--max-questions", str(self.max_questions)]
        if self.llm != "smollm2":
            args += ["--llm", self.llm]
        if self.held_out:
            args += ["--held-out", str(self.held_out)]
        args += self._benchmark_options()
        return shlex.join(args)

    def _benchmark_options(self) -> list[str]:
        if self.benchmark is BenchmarkName.PERSONABENCH:
            return ["--noise", str(self.noise), "--render", self.render]
        if self.benchmark is BenchmarkName.IKAT:
            return ["--split", self.split]
        if self.benchmark is BenchmarkName.PREFEVAL:
            return ["--form", self.form, "--inter-turns", str(self.inter_turns)]
        return []


def load_benchmark(config: EvalConfig) -> Benchmark:
    """Read the configured benchmark from ``config.data`` with its options."""
    if config.benchmark is BenchmarkName.PERSONABENCH:
        from personamem.eval.benchmarks.personabench import load_personabench_benchmark

        return load_personabench_benchmark(config.data, noise=config.noise, render=config.render)
    if config.benchmark is BenchmarkName.LOCOMO:
        from personamem.eval.benchmarks.locomo import load_locomo_benchmark

        return load_locomo_benchmark(config.data)
    if config.benchmark is BenchmarkName.IKAT:
        from personamem.eval.benchmarks.ikat import load_ikat_benchmark

        return load_ikat_benchmark(config.data, split=config.split)
    from personamem.eval.benchmarks.prefeval import load_prefeval_benchmark

    return load_prefeval_benchmark(config.data, form=config.form, inter_turns=config.inter_turns)


def run_eval(
    config: EvalConfig,
    *,
    encoder: Encoder | None = None,
    llm: FrozenLLM | None = None,
    cache_dir: Path | None = None,
    store_dir: Path | None = None,
    progress: Progress | None = None,
) -> Report:
    """Evaluate every configured method on the configured benchmark.

    Corpus vectors are cached in ``cache_dir`` (None: no cache), so a second run of the same corpus
    does not re-embed it. The store lives under ``store_dir`` in a folder named by the exact corpus
    and encoder, so LLM outputs cached in it (PBR's pseudo feedback, expansions) are reused by later
    runs; with None it is a temporary folder removed afterwards. ``llm`` is the frozen LLM for
    LLM-based methods and ``config.answers`` (default: the local default LLM, loaded only if needed).
    """
    missing = [name for name in ("ranx", "scipy", "matplotlib") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(missing, "eval")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    benchmark = load_benchmark(config)
    if config.held_out:
        benchmark = _held_out(benchmark, config.held_out)
    benchmark = dataclasses.replace(
        benchmark, questions=evenly_spaced(benchmark.questions, config.max_questions)
    )
    timings["load"] = time.perf_counter() - start
    if not benchmark.questions:
        reasons = dict(benchmark.skip_reasons())
        raise ValueError(f"{benchmark.name}: no question can be scored (skipped: {reasons})")
    timings["metric_compile"] = warm_up_metrics()
    needs_llm = config.answers or any(method_config(name).needs_llm for name in config.methods)
    llm = llm or (TransformersLLM.local(config.llm) if needs_llm else None)
    methods = [method_named(name, llm) for name in config.methods]
    encoder = encoder or default_encoder()
    with contextlib.ExitStack() as stack:
        root = store_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="personamem-eval-")))
        start = time.perf_counter()
        path = root / _store_name(benchmark, encoder)
        store = build_store(benchmark, path, encoder, cache_dir=cache_dir, progress=progress)
        timings["embed_and_ingest"] = time.perf_counter() - start
        try:
            runs = []
            for method in methods:
                start = time.perf_counter()
                runs.append(
                    evaluate_method(
                        method,
                        benchmark,
                        store,
                        seeds=range(config.seeds),
                        depth=config.depth,
                        llm=llm if config.answers else None,
                        profile_k=config.profile_k,
                        progress=progress,
                    )
                )
                timings[method.name] = time.perf_counter() - start
        finally:
            store.close()
    return Report(benchmark, runs, baseline=config.baseline, command=config.command(), timings=timings)


def _held_out(benchmark: Benchmark, split_file: Path) -> Benchmark:
    """Only the questions of the split's test users (the corpus stays whole: users are separate)."""
    try:
        users = set(json.loads(split_file.read_text(encoding="utf-8"))["test_users"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{split_file}: not a split.json with test_users ({exc})") from None
    return dataclasses.replace(benchmark, questions=[q for q in benchmark.questions if q.user_id in users])


def _store_name(benchmark: Benchmark, encoder: Encoder) -> str:
    """A folder name unique to this exact corpus and encoder: a reused store never holds extra records."""
    digest = hashlib.sha256(encoder.name.encode())
    for record in benchmark.records:
        digest.update(json.dumps([record.user_id, record.id, record.text]).encode())
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in benchmark.name)
    return f"{slug}-{digest.hexdigest()[:16]}"
