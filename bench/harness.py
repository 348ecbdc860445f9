"""The shape every bench script shares: its parser, its paired timing loop, its verdict line.

Each script is run as ``python bench/NAME.py``, so ``bench/`` is on ``sys.path`` and they import this
module by name (``_common`` holds the shared data); they never import each other.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["arguments", "gate", "median_ratio", "paired"]


def arguments(doc: str | None) -> argparse.ArgumentParser:
    """The parser a script starts from: its docstring is its ``--help``, line breaks kept (usage lines)."""
    return argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def paired(
    sides: Mapping[str, Callable[[int], object]],
    iters: int,
    *,
    warmup: int = 1,
    between: Callable[[int], object] | None = None,
    check: Callable[[int, dict[str, Any]], object] | None = None,
) -> dict[str, list[float]]:
    """Seconds of each side's call ``side(i)``, every side once per iteration ``i`` in ``range(iters)``.

    These machines' load drifts and comes in bursts, so the sides are compared call by call on the same
    input rather than run by run, and which side goes first rotates every iteration (each side takes
    each place equally often), so neither drift nor the cost of going first lands on one side.
    ``warmup`` iterations run the same way first, untimed, with ``i`` from ``-warmup`` to -1: an input
    built from ``i`` (a query suffix ``f" ({i})"``) then differs from every timed one. ``between(i)`` runs
    untimed before each iteration (say, to let an indexer finish), ``check(i, results)`` after it, with
    what each side returned.
    """
    names = list(sides)
    spent: dict[str, list[float]] = {name: [] for name in names}
    for i in range(-warmup, iters):
        if between is not None:
            between(i)
        shift = i % len(names)
        results: dict[str, Any] = {}
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            results[name] = sides[name](i)
            seconds = time.perf_counter() - start
            if i >= 0:
                spent[name].append(seconds)
        if check is not None:
            check(i, results)
    return spent


def median_ratio(ours: list[float], baseline: list[float]) -> float:
    """p50(ours) / p50(baseline): the one figure a noisy machine reproduces."""
    return statistics.median(ours) / statistics.median(baseline)


def gate(name: str, value: float, target: float, *, higher_is_better: bool = False, digits: int = 3) -> int:
    """Print ``name: value (target <= T)`` (``>=`` where higher is better) on stdout; 1 when missed, else 0.

    One line in one format for every script, so whoever collects the results parses one shape; the
    status is the script's exit status (``sys.exit(main())``, ``main`` returning it).
    """
    met = value >= target if higher_is_better else value <= target
    print(f"{name}: {value:.{digits}f} (target {'>=' if higher_is_better else '<='} {target:g})", flush=True)
    return 0 if met else 1
