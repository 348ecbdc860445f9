"""``personamem train``: fit learned components offline against the frozen LLM (PURPLE, MemRerank, PG-Ret)."""

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
from personamem.trainers.pgret.config import PGRetDataConfig, PGRetTrainConfig
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


@train_app.command("pgret")
@config_options()
def pgret(
    *,
    data: PGRetDataConfig,
    out_dir: Annotated[
        Path, typer.Option("--out", help="The tower (best/, last/), split.json and history.json.")
    ] = Path("runs/pgret"),
    config: PGRetTrainConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.")] = False,
) -> None:
    """PG-Ret: fine-tune the query tower so it finds relevant records the base retriever misses."""
    from personamem.encoder import default_encoder
    from personamem.eval.benchmark import evenly_spaced
    from personamem.eval.evaluate import EvalConfig, load_benchmark
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.eval.vectors import default_vector_cache
    from personamem.llm.load import load_llm
    from personamem.trainers.pgret.data import PGRetData, data_from_benchmark, split_users
    from personamem.trainers.pgret.infonce import train_infonce
    from personamem.trainers.pgret.trainer import calibration_pairs, train_pgret

    bench = load_benchmark(EvalConfig(benchmark=data.benchmark, data=data.data, noise=data.noise))
    encoder = default_encoder()
    with progress_bar() as progress:
        logged = data_from_benchmark(
            bench,
            encoder,
            novelty_depth=data.novelty_depth,
            exploration_depth=data.exploration_depth,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
        try:
            train_users, validation_users, test_users = split_users(
                logged.users, validation=data.validation_users, test=data.test_users, seed=data.split_seed
            )
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        every = logged.only(train_users)
        train = PGRetData(tuple(evenly_spaced(every.queries, data.max_train)), every.corpora)
        held = logged.only(validation_users)
        validation = PGRetData(tuple(evenly_spaced(held.queries, data.max_validation)), held.corpora)
        out_dir.mkdir(parents=True, exist_ok=True)
        split = {
            "benchmark": bench.name,
            "split_seed": data.split_seed,
            "novelty_depth": data.novelty_depth,
            "train_users": train_users,
            "validation_users": validation_users,
            "test_users": test_users,
        }
        (out_dir / "split.json").write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
        info = {"data": {"benchmark": bench.name, **split}}
        rows: list[tuple[str, str]] = [
            ("queries train / validation", f"{len(train.queries)} / {len(validation.queries)}"),
            (
                "users train / validation / test",
                f"{len(train_users)} / {len(validation_users)} / {len(test_users)}",
            ),
        ]
        if config.variant == "infonce":
            best = train_infonce(
                train,
                config,
                out_dir,
                base_model_path=encoder.path,
                record_encoder=encoder,
                info=info,
                progress=progress,
            )
        else:
            judge = RelevanceJudge(
                load_llm(data.judge, runtime=data.judge_runtime),
                mode=data.judge_mode,
                cache_file=data.judge_cache or out_dir.parent / "judge.jsonl",
            )
            pairs, labels = calibration_pairs(every, seed=data.split_seed)
            calibration = calibrate(judge.margins(pairs), labels)
            info["judge"] = {"llm": judge.llm.name, "mode": judge.mode}
            result = train_pgret(
                train,
                validation,
                judge,
                calibration,
                config,
                out_dir,
                base_model_path=encoder.path,
                record_encoder=encoder,
                info=info,
                resume=resume,
                progress=progress,
            )
            (out_dir / "history.json").write_text(json.dumps(result.history) + "\n", encoding="utf-8")
            best = result.best
            rows += [
                (
                    f"judge {judge.llm.name} ({judge.mode}): AUC vs gold, threshold (TPR / FPR)",
                    f"{calibration.auc:.3f}, {calibration.threshold:.3f} "
                    f"({calibration.tpr:.2f} / {calibration.fpr:.2f}) on {calibration.pairs} pairs",
                ),
                (
                    "best step, validation reward per top-k record (step 0: base)",
                    f"{result.best_step}, {result.best_validation:.3f} "
                    f"(base {result.history[0]['validation']:.3f})",
                ),
                (
                    "pairs judged (LLM-scored, cache hits)",
                    f"{result.pairs_judged} ({judge.scored}, {judge.hits})",
                ),
                ("wall-clock seconds", f"{result.seconds:.0f}"),
            ]
    table = Table("", "", box=box.SIMPLE, show_header=False, title=f"PG-Ret training ({config.variant})")
    for name, value in [*rows, ("checkpoint", str(best))]:
        table.add_row(name, value)
    out.print(table)
    out.print(f'To use it, add to the pipeline table: first_stage = "pgret:{best}"')
