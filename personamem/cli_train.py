"""``personamem train``: fit learned components offline against the frozen LLM (PURPLE, MemRerank)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.cli_options import config_options
from personamem.console import out, progress_bar
from personamem.trainers.memrerank.config import MemRerankConfig
from personamem.trainers.purple.config import PurpleDataConfig, PurpleTrainConfig

__all__ = ["train_app"]

train_app = typer.Typer(help="Train learned components against the frozen LLM.", no_args_is_help=True)


@train_app.command("purple")
@config_options()
def purple(
    *,
    data: PurpleDataConfig,
    out_dir: Annotated[Path, typer.Option("--out", help="Checkpoints (best/, last/) and split.json.")] = Path(
        "runs/purple"
    ),
    config: PurpleTrainConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.")] = False,
) -> None:
    """PURPLE: learn which K records (and in which order) make the LLM likeliest to give the true answer."""
    from personamem.encoder import default_encoder
    from personamem.eval.evaluate import EvalConfig, load_benchmark
    from personamem.eval.vectors import default_vector_cache
    from personamem.llm.load import load_llm
    from personamem.trainers.purple import train_purple
    from personamem.trainers.purple.data import examples_from_benchmark, split_by_user
    from personamem.trainers.purple.reward import LLMReward

    bench = load_benchmark(EvalConfig(benchmark=data.benchmark, data=data.data, noise=data.noise))
    encoder = default_encoder()
    with progress_bar() as progress:
        try:
            examples = examples_from_benchmark(
                bench,
                encoder,
                first_stage=data.first_stage,
                candidates=data.candidates,
                cache_dir=default_vector_cache(),
                progress=progress,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        train, validation, test = split_by_user(
            examples, validation=data.validation_users, test=data.test_users, seed=data.split_seed
        )
        picker = random.Random(config.seed)
        if data.max_train and data.max_train < len(train):
            train = picker.sample(train, data.max_train)
        validation = picker.sample(validation, min(data.max_validation, len(validation)))
        out_dir.mkdir(parents=True, exist_ok=True)
        split = {
            "benchmark": bench.name,
            "split_seed": data.split_seed,
            "first_stage": data.first_stage,
            "candidates": data.candidates,
            "train_users": sorted({e.user_id for e in train}),
            "validation_users": sorted({e.user_id for e in validation}),
            "test_users": sorted({e.user_id for e in test}),
            "test_examples": [e.id for e in test],
        }
        (out_dir / "split.json").write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
        reward = LLMReward(load_llm(data.llm, runtime=data.llm_runtime))
        result = train_purple(
            train, validation, encoder, reward, config, out_dir, resume=resume, progress=progress
        )
    size = sum(f.stat().st_size for f in result.best.iterdir() if f.is_file())
    table = Table("", "", box=box.SIMPLE, show_header=False, title="PURPLE training")
    for name, value in (
        ("examples train / validation / test", f"{len(train)} / {len(validation)} / {len(test)}"),
        ("best step, validation reward (nats)", f"{result.best_step}, {result.best_validation:.3f}"),
        (
            "profiles rewarded (LLM-scored, cache hits)",
            f"{result.profiles_rewarded} ({reward.scored}, {reward.hits})",
        ),
        ("wall-clock seconds", f"{result.seconds:.0f}"),
        ("best checkpoint", f"{result.best} ({size / 2**20:.1f} MiB)"),
    ):
        table.add_row(name, value)
    out.print(table)


@train_app.command("memrerank")
@config_options()
def memrerank(
    *,
    data: Annotated[
        Path, typer.Option(help="The Amazon Beauty folder (train.jsonl) in its upstream layout.")
    ],
    out_dir: Annotated[
        Path,
        typer.Option("--out", help="The checkpoint (extractor.json, adapter/), rewards.jsonl, trainer/."),
    ] = Path("runs/memrerank"),
    config: MemRerankConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out's last checkpoint.")] = False,
) -> None:
    """MemRerank: train the memory extractor so the setwise reranker picks each user's true next item."""
    from personamem.encoder import default_encoder
    from personamem.eval.choice import load_amazon_choices
    from personamem.eval.vectors import default_vector_cache
    from personamem.trainers.memrerank import train_memrerank

    instances = load_amazon_choices(
        data, split="train", encoder=default_encoder(), cache_dir=default_vector_cache()
    )
    with progress_bar() as progress:
        try:
            result = train_memrerank(instances, config, out_dir, resume=resume, progress=progress)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
    first, last = result.history[0], result.history[-1]
    table = Table("", "", box=box.SIMPLE, show_header=False, title="MemRerank training")
    for name, value in (
        ("training users (test side held out)", str(result.users)),
        ("steps", str(result.step)),
        ("utility P(positive), first → last step", f"{first['utility']:.3f} → {last['utility']:.3f}"),
        ("quality, first → last step", f"{first['quality']:.2f} → {last['quality']:.2f}"),
        ("reranker choices scored (this run)", str(result.utilities_scored)),
        ("wall-clock seconds (this run)", f"{result.seconds:.0f}"),
        ("checkpoint", f"memrerank:{result.checkpoint}"),
    ):
        table.add_row(name, value)
    out.print(table)
