"""``personamem train ranker`` as a function: the shipped fit, then, if asked, the leave-one-out verdict."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.progress import Progress

from personamem.retrieval.ranker import INFO_FILE
from personamem.retrieval.ranker_gate import RankerGate
from personamem.trainers.ranker.config import RankerRunConfig
from personamem.trainers.ranker.lobo import leave_one_out
from personamem.trainers.ranker.shapes import shapes_named
from personamem.trainers.ranker.trainer import train_ranker
from personamem.trainers.run import TrainSummary

__all__ = ["run", "ship_verdict"]


def run(config: RankerRunConfig, *, progress: Progress | None = None) -> TrainSummary:
    """Learned ranker: reorder the default first stage's candidates, trained on benchmarks' gold labels.

    Features are computed by the same code that serves them, over a real store of each benchmark,
    and cached (a rerun, another seed or another mix of benchmarks reuses them; --resume has nothing
    more to resume). Validation users choose alpha and the number of trees; with none the ranker is
    exactly the default's order. The trees serve only users whose history is shaped like a benchmark
    they gained on; with --leave-one-out-seeds the recipe is also judged on each benchmark left out,
    and trees that lose in any fold serve nowhere.

    Raises:
        InsufficientDataError: too few training questions, or no validation question.
    """
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder

    encoder, cache_dir = default_encoder(), default_vector_cache()
    result = train_ranker(
        config.data, config.train, config.out_dir, encoder=encoder, cache_dir=cache_dir, progress=progress
    )
    judged: list[tuple[str, str]] = []
    if seeds := config.train.leave_one_out_seeds:
        folder = config.train.leave_one_out_dir or config.out_dir.with_name(
            f"{config.out_dir.name}-leave-one-out"
        )
        report = leave_one_out(
            config.data,
            config.train,
            folder,
            seeds=range(seeds),
            encoder=encoder,
            cache_dir=cache_dir,
            progress=progress,
            shapes=shapes_named(config.train.leave_one_out_shapes),
        )
        ship_verdict(config.out_dir, report, folder)
        worst = report["worst"]
        judged = [
            ("leave one out: trees with their gate pass", str(report["trees_pass"])),
            ("leave one out: the served ranker passes", str(report["passes"])),
            (
                "leave one out: worst fold",
                f"{worst['fold']} {worst['metric']} {worst['difference']:+.3f} vs {worst['against']}",
            ),
            ("leave one out: report", str(folder / "leave-one-out.md")),
        ]
        if not report["trees_pass"]:
            result.admitted = []
    rows = [
        (
            f"{name}: questions (users) train / validation / test",
            f"{s['train_questions']} ({s['train_users']}) / {s['validation_questions']} "
            f"({s['validation_users']}) / {s['test_questions']} ({s['test_users']})"
            + (" [features cached]" if result.cached[name] else ""),
        )
        for name, s in result.sources.items()
    ]
    fit = result.fit
    rows += [
        (f"{name}: validation nDCG@10 score fusion → ranker", f"{before:.4f} → {after:.4f}")
        for name, (before, after) in fit.per_source.items()
    ]
    rows += [
        (
            "the score fusion reads the adapter's cosine for histories shaped like",
            ", ".join(result.adapting) or "none (the base cosine everywhere)",
        ),
        ("chosen: alpha, trees", f"{fit.alpha:g}, {fit.iterations}"),
        ("trees serve histories shaped like", ", ".join(result.admitted) or "none (the score fusion)"),
        *[
            (f"gate: {name}'s region admits", ", ".join(f"{n} {share:.0%}" for n, share in shares.items()))
            for name, shares in _calibration(result.folder).items()
        ],
        ("validation nDCG@10: the trees' start → ranker", f"{fit.start:.4f} → {fit.best:.4f}"),
        ("wall-clock seconds (fits)", f"{fit.seconds:.0f}"),
        ("ranker (sha256)", f"{result.folder} ({(result.sha256 or 'no trees')[:16]})"),
        *judged,
    ]
    return TrainSummary("Learned ranker training", rows, f'ranker = "{result.folder}"')


def _calibration(folder: Path) -> dict[str, dict[str, float]]:
    """Per gate region, the shares of unseen users it admits (``recipe.gate.calibration`` of the folder)."""
    info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
    return dict(info["recipe"]["gate"]["calibration"])


def ship_verdict(folder: Path, report: dict[str, Any], study: Path) -> None:
    """Write the leave-one-out verdict into ``folder``'s ``ranker.json``; failing trees lose their gate."""
    path = folder / INFO_FILE
    info = json.loads(path.read_text(encoding="utf-8"))
    info["leave_one_out"] = {
        "rule": report["rule"],
        "trees_pass": report["trees_pass"],
        "passes": report["passes"],
        "worst": report["worst"],
        "report": study.name + "/leave-one-out.json",
    }
    if not report[
        "trees_pass"
    ]:  # safe by construction: trees that lost on a benchmark they never saw serve nowhere
        info["gate"] = RankerGate(()).to_json()
    path.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
