"""``personamem train``: fit learned components offline against the frozen LLM (PURPLE for now)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.table import Table

from personamem.console import out, progress_bar
from personamem.eval.evaluate import BenchmarkName

__all__ = ["train_app"]

train_app = typer.Typer(help="Train learned components against the frozen LLM.", no_args_is_help=True)


@train_app.command("purple")
def purple(
    benchmark: Annotated[BenchmarkName, typer.Option(help="QA benchmark for (history, question, answer).")],
    data: Annotated[Path, typer.Option(help="The benchmark folder in its upstream layout.")],
    out_dir: Annotated[Path, typer.Option("--out", help="Checkpoints (best/, last/) and split.json.")] = Path(
        "runs/purple"
    ),
    first_stage: Annotated[str, typer.Option(help="Candidate retriever: dense, bm25 or hybrid.")] = "hybrid",
    candidates: Annotated[int, typer.Option(min=1, help="Candidates per question (the paper: 20).")] = 20,
    k: Annotated[int, typer.Option(min=1, help="Profile length K.")] = 5,
    steps: Annotated[int, typer.Option(min=1, help="Optimizer steps.")] = 100,
    batch_size: Annotated[int, typer.Option(min=1, help="Examples per step, B (the paper: 16).")] = 16,
    samples: Annotated[
        int, typer.Option(min=2, help="Profiles sampled per example, M (the paper: 32).")
    ] = 32,
    lr: Annotated[float, typer.Option(min=0.0, help="Adam learning rate.")] = 1e-4,
    layers: Annotated[int, typer.Option(min=0, help="Record Transformer layers (the paper: 12).")] = 2,
    advantage: Annotated[str, typer.Option(help="zscore (the paper's), rank or clip.")] = "zscore",
    validate_every: Annotated[int, typer.Option(min=1, help="Steps between validations.")] = 20,
    validation_users: Annotated[int, typer.Option(min=1, help="Users held out for validation.")] = 1,
    test_users: Annotated[
        int, typer.Option(min=1, help="Users held out for testing (never trained on).")
    ] = 2,
    max_train: Annotated[int | None, typer.Option(min=1, help="Train on a random subset this large.")] = None,
    max_validation: Annotated[int, typer.Option(min=1, help="Validation examples scored each time.")] = 64,
    cross_attention: Annotated[
        bool, typer.Option(help="Records attend to the query (off: ablation).")
    ] = True,
    record_transformer: Annotated[
        bool, typer.Option(help="Records attend to each other (off: ablation).")
    ] = True,
    noise: Annotated[float, typer.Option(help="PersonaBench distractor level.")] = 0.0,
    llm: Annotated[
        str, typer.Option(help="The frozen LLM: smollm2, qwen2.5-coder-0.5b or a model folder.")
    ] = "smollm2",
    seed: Annotated[int, typer.Option(help="Seeds the training subset, the weights and the samples.")] = 0,
    split_seed: Annotated[
        int, typer.Option(help="Seeds which users are held out; keep it fixed to compare training seeds.")
    ] = 0,
    device: Annotated[str, typer.Option(help="torch device, e.g. cpu or cuda.")] = "cpu",
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.")] = False,
) -> None:
    """PURPLE: learn which K records (and in which order) make the LLM likeliest to give the true answer."""
    from pydantic import ValidationError

    from personamem.encoder import default_encoder
    from personamem.eval.evaluate import EvalConfig, load_benchmark
    from personamem.eval.vectors import default_vector_cache
    from personamem.llm import TransformersLLM
    from personamem.profile.purple import PurpleConfig
    from personamem.trainers.purple import PurpleTrainConfig, train_purple
    from personamem.trainers.purple.data import examples_from_benchmark, split_by_user
    from personamem.trainers.purple.reward import LLMReward

    try:
        config = PurpleTrainConfig(
            model=PurpleConfig(
                layers=layers, cross_attention=cross_attention, record_transformer=record_transformer
            ),
            k=k,
            batch_size=batch_size,
            samples=samples,
            lr=lr,
            steps=steps,
            validate_every=validate_every,
            advantage=advantage,  # type: ignore[arg-type]  # validated here
            seed=seed,
            device=device,
        )
    except ValidationError as exc:
        raise typer.BadParameter(
            "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        ) from None
    bench = load_benchmark(EvalConfig(benchmark=benchmark, data=data, noise=noise))
    encoder = default_encoder()
    with progress_bar() as progress:
        try:
            examples = examples_from_benchmark(
                bench,
                encoder,
                first_stage=first_stage,
                candidates=candidates,
                cache_dir=default_vector_cache(),
                progress=progress,
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        train, validation, test = split_by_user(
            examples, validation=validation_users, test=test_users, seed=split_seed
        )
        picker = random.Random(seed)
        if max_train and max_train < len(train):
            train = picker.sample(train, max_train)
        validation = picker.sample(validation, min(max_validation, len(validation)))
        out_dir.mkdir(parents=True, exist_ok=True)
        split = {
            "benchmark": bench.name,
            "split_seed": split_seed,
            "first_stage": first_stage,
            "candidates": candidates,
            "train_users": sorted({e.user_id for e in train}),
            "validation_users": sorted({e.user_id for e in validation}),
            "test_users": sorted({e.user_id for e in test}),
            "test_examples": [e.id for e in test],
        }
        (out_dir / "split.json").write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
        reward = LLMReward(TransformersLLM.local(llm))
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
