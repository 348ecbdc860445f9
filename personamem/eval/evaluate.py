"""One evaluation, end to end: load a benchmark, build the store, run each method, write the report.

This is what ``personamem eval`` calls; the CLI only turns flags into an :class:`EvalConfig`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator
from rich.progress import Progress

from personamem.datasets import Benchmark, BenchmarkName, BenchmarkOptions, DataSource, evenly_spaced
from personamem.datasets.source import held_out_questions
from personamem.datasets.table import nest_options
from personamem.encoder import Encoder, default_encoder
from personamem.errors import MissingExtraError
from personamem.eval.answer_judge import AnswerJudge
from personamem.eval.report import Report
from personamem.eval.runner import (
    ANSWER_BASELINES,
    build_store,
    evaluate_answer_baseline,
    evaluate_method,
    warm_up_metrics,
)
from personamem.llm import FrozenLLM
from personamem.llm.load import REFERENCE_RUNTIME, Runtime, load_llm
from personamem.methods import is_method, method_config, method_help, method_named, method_names

__all__ = ["BenchmarkName", "EvalConfig", "load_benchmark", "run_eval"]


class EvalConfig(BaseModel):
    """What to evaluate and how; each field is a ``personamem eval`` option of the same name."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", use_attribute_docstrings=True, validate_by_name=True
    )

    benchmark: BenchmarkName
    """Which benchmark the data folder holds."""
    data: Path
    """The benchmark folder in its upstream layout."""
    options: BenchmarkOptions = BenchmarkOptions()
    """Each benchmark's reading options (``noise=0.5`` may be given flat)."""
    methods: tuple[str, ...] = Field(
        default=("dense",), alias="method", description=f"Method to run (repeatable): {method_help()}."
    )  # described from the method table, so a new method documents itself
    pipeline: tuple[Path, ...] = ()
    """A TOML file whose pipeline table is scored as one method, pipeline:<file> (repeatable); given
    alone, no other method runs."""
    seeds: int = Field(default=1, ge=1)
    """Seeds for stochastic methods (deterministic ones run once)."""
    baseline: str | None = None
    """Paired t-test every other method against this one."""
    depth: int = Field(default=100, ge=1)
    """Records ranked per question (the deepest recall cutoff)."""
    answers: bool = False
    """Also have the LLM (the reader) answer from each method's top profile_k records, from no
    memory and from the full history: the gold answer's log-likelihood, a generated answer's overlap
    and, with --judge, its judged accuracy (slow on a CPU; answers are kept, so a rerun resumes)."""
    profile_k: int = Field(default=5, ge=1)
    """Records the LLM sees with answers."""
    judge: str | None = None
    """With --answers: the LLM that judges each generated answer right or wrong against the gold
    (a packaged model, a transformers folder, or the model --judge-url serves)."""
    judge_runtime: Runtime = REFERENCE_RUNTIME
    """The judge's local engine (ctranslate2 or transformers)."""
    judge_url: str | None = None
    """An OpenAI-compatible server (.../v1: vLLM, a hosted API) that serves --judge."""
    llm_url: str | None = None
    """An OpenAI-compatible server (.../v1) that serves --llm, instead of running it here."""
    history: int = Field(default=4096, ge=1)
    """With --answers: the full-history baseline's size, the user's latest records up to this many
    tokens (the reader's window permitting)."""
    max_questions: int | None = Field(default=None, ge=1)
    """Evaluate an evenly spaced subset of this many questions."""
    llm: str = "smollm2-135m"
    """The frozen LLM: smollm2-135m (default), qwen2.5-coder-0.5b, qwen2.5-coder-1.5b (opt-in:
    personamem models install NAME) or a local transformers model folder."""
    llm_runtime: Runtime = REFERENCE_RUNTIME
    """The local engine: ctranslate2 (int8, fast on a CPU) or transformers (float32, the reference)."""
    held_out: Path | None = None
    """A split.json from 'train purple': evaluate only its test users, whom the checkpoint never saw."""

    @model_validator(mode="before")
    @classmethod
    def _pipelines_alone(cls, data: object) -> object:
        if not isinstance(data, Mapping):
            return data
        data = nest_options(data)
        if data.get("pipeline") and not {"method", "methods"} & set(data):
            return {**data, "methods": ()}
        return data

    @model_validator(mode="after")
    def _known_methods(self) -> EvalConfig:
        unknown = [m for m in self.methods if not is_method(m)]
        if unknown:
            raise ValueError(f"unknown method(s) {unknown}; choose from: {', '.join(method_names())}")
        if not self.run_methods:
            raise ValueError("give at least one method")
        if self.baseline is not None and self.baseline not in self.run_methods:
            raise ValueError(
                f"baseline {self.baseline!r} must be one of the methods run {list(self.run_methods)}"
            )
        return self

    @property
    def run_methods(self) -> tuple[str, ...]:
        """The methods, then each pipeline file as ``pipeline:<file>``."""
        return (*self.methods, *(f"pipeline:{path}" for path in self.pipeline))

    @property
    def source(self) -> DataSource:
        """The benchmark as a data source."""
        return DataSource(benchmark=self.benchmark, data=self.data, options=self.options)


def load_benchmark(config: EvalConfig) -> Benchmark:
    """Read the configured benchmark from ``config.data`` with its options."""
    return config.source.questions()


def run_eval(
    config: EvalConfig,
    *,
    encoder: Encoder | None = None,
    llm: FrozenLLM | None = None,
    judge: AnswerJudge | None = None,
    cache_dir: Path | None = None,
    store_dir: Path | None = None,
    progress: Progress | None = None,
    command: str = "",
) -> Report:
    """Evaluate every configured method on the configured benchmark.

    Corpus vectors are cached in ``cache_dir`` (None: no cache), so a second run of the same corpus
    does not re-embed it. The store lives under ``store_dir`` in a folder named by the exact corpus
    and encoder, so LLM outputs cached in it (PBR's pseudo feedback, expansions) are reused by later
    runs; with None it is a temporary folder removed afterwards. ``llm`` is the frozen LLM for
    LLM-based methods and ``config.answers`` (default: the local default LLM, loaded only if needed);
    ``judge`` judges the answers (default: ``config.judge``'s, if named). With answers, the reader
    also answers from no memory and from the full history
    (:data:`~personamem.eval.runner.ANSWER_BASELINES`). ``command`` is the command line the report
    names as reproducing it (the CLI passes its own).
    """
    missing = [name for name in ("ranx", "scipy", "matplotlib") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(missing, "eval")
    timings: dict[str, float] = {}
    start = time.perf_counter()
    benchmark = load_benchmark(config)
    if config.held_out:
        benchmark = held_out_questions(benchmark, config.held_out)
    questions = evenly_spaced(benchmark.questions, config.max_questions)
    asked = {question.user_id for question in questions}  # a user no question asks changes no score
    benchmark = dataclasses.replace(
        benchmark, questions=questions, records=[r for r in benchmark.records if r.user_id in asked]
    )
    timings["load"] = time.perf_counter() - start
    if not benchmark.questions:
        reasons = dict(benchmark.skip_reasons())
        raise ValueError(f"{benchmark.name}: no question can be scored (skipped: {reasons})")
    timings["metric_compile"] = warm_up_metrics()
    needs_llm = config.answers or any(method_config(name).needs_llm for name in config.run_methods)
    if llm is None and needs_llm:
        llm = load_llm(config.llm, runtime=config.llm_runtime, url=config.llm_url)
    if judge is None and config.answers and config.judge is not None:
        judge = AnswerJudge(load_llm(config.judge, runtime=config.judge_runtime, url=config.judge_url))
    methods = [method_named(name, llm) for name in config.run_methods]
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
                        judge=judge,
                        profile_k=config.profile_k,
                        progress=progress,
                    )
                )
                timings[method.name] = time.perf_counter() - start
            if config.answers and llm is not None:
                for baseline in ANSWER_BASELINES:
                    start = time.perf_counter()
                    runs.append(
                        evaluate_answer_baseline(
                            baseline,
                            benchmark,
                            store,
                            llm,
                            judge=judge,
                            history_tokens=config.history,
                            progress=progress,
                        )
                    )
                    timings[baseline] = time.perf_counter() - start
        finally:
            store.close()
    return Report(benchmark, runs, baseline=config.baseline, command=command, timings=timings)


def _store_name(benchmark: Benchmark, encoder: Encoder) -> str:
    """A folder name unique to this exact corpus and encoder: a reused store never holds other records.

    Every field a record stores is in it: a loader that changes a record's metadata (its session, its
    role) or time makes a new store, not a reused one that still answers with the old fields.
    """
    digest = hashlib.sha256(encoder.name.encode())
    for record in benchmark.records:
        digest.update(record.model_dump_json().encode())
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in benchmark.name)
    return f"{slug}-{digest.hexdigest()[:16]}"
