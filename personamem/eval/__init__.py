"""The evaluation harness: benchmark loaders, metrics, runs and reports (``pip install "personamem[eval]"``).

Entry points: :func:`run_eval` with an :class:`EvalConfig` (what ``personamem eval`` calls), or the
pieces: a benchmark from :mod:`personamem.datasets` (:class:`Benchmark`, :class:`Question`,
:class:`Skip` and :class:`BenchmarkName` are its, re-exported here), :func:`build_store`,
:func:`evaluate_method` and :class:`Report`.
"""

from personamem.datasets import Benchmark, Question, Skip
from personamem.eval.evaluate import BenchmarkName, EvalConfig, load_benchmark, run_eval
from personamem.eval.report import Report
from personamem.eval.runner import DEFAULT_METRICS, MethodRun, build_store, evaluate_method
from personamem.methods import Method

__all__ = [
    "DEFAULT_METRICS",
    "Benchmark",
    "BenchmarkName",
    "EvalConfig",
    "Method",
    "MethodRun",
    "Question",
    "Report",
    "Skip",
    "build_store",
    "evaluate_method",
    "load_benchmark",
    "run_eval",
]
