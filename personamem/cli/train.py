"""``personamem train``: fit learned components offline (query adapter, PURPLE, MemRerank, PG-Ret)."""

from __future__ import annotations

import contextlib
import json
import random
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.table import Table

from personamem.cli.options import config_options
from personamem.console import out, progress_bar
from personamem.trainers.adapter.config import AdapterDataConfig, AdapterTrainConfig
from personamem.trainers.memrerank.config import MemRerankConfig, MemRerankDataConfig
from personamem.trainers.pgret.config import PGRetDataConfig, PGRetTrainConfig
from personamem.trainers.purple.config import PurpleDataConfig, PurpleTrainConfig

if TYPE_CHECKING:
    from accelerate import PartialState
    from rich.progress import Progress

    from personamem.encoder import SentenceEncoder
    from personamem.eval.judge import RelevanceJudge
    from personamem.trainers.pgret.data import PGRetData
    from personamem.trainers.purple.data import ProfileExample

__all__ = ["train_app"]

train_app = typer.Typer(help="Train learned components against the frozen LLM.", no_args_is_help=True)


@train_app.command("adapter")
@config_options(config_file=True)
def adapter(
    *,
    data: AdapterDataConfig,
    out_dir: Annotated[
        Path, typer.Option("--out", help="The adapter folder (adapter.npy, adapter.json, split-*.json).")
    ] = Path("runs/adapter"),
    config: AdapterTrainConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.pt.")] = False,
) -> None:
    """Query adapter: a small map on the query vector, fitted on benchmarks' training users or a store.

    From benchmarks it learns from gold labels (or, with --labels synthetic, from questions the LLM
    writes); from --from-store it learns label-free from the store's own records. Records keep their
    vectors: nothing is re-indexed.
    """
    from personamem.encoder import default_encoder
    from personamem.errors import InsufficientDataError
    from personamem.eval.vectors import default_vector_cache
    from personamem.llm.load import load_llm
    from personamem.trainers.adapter.run import train_adapter

    needs_llm = data.from_store is not None or data.labels == "synthetic"
    encoder = default_encoder()
    with progress_bar() as progress:
        try:
            run = train_adapter(
                data,
                config,
                out_dir,
                encoder=encoder,
                llm=load_llm(data.llm) if needs_llm else None,
                cache_dir=default_vector_cache(),
                resume=resume,
                progress=progress,
            )
        except (InsufficientDataError, ValueError) as exc:
            raise typer.BadParameter(str(exc)) from None
    table = Table("", "", box=box.SIMPLE, show_header=False, title="Query adapter training")
    for source in run.sources:
        table.add_row(
            f"{source['source']}: questions (users) train / validation",
            f"{source['queries']} ({source['users']}) / "
            f"{source['validation_queries']} ({source['validation_users']})",
        )
    fit = run.fit
    if fit.best_validation is not None and fit.start_validation is not None:
        table.add_row(
            f"validation recall@{config.k}: start → best (step)",
            f"{fit.start_validation:.3f} → {fit.best_validation:.3f} ({fit.best_step})",
        )
    table.add_row("wall-clock seconds", f"{fit.seconds:.0f}")
    table.add_row("adapter (sha256)", f"{run.folder} ({run.sha256[:16]})")
    out.print(table)
    out.print(f'To use it, add to the pipeline table: query_encoder = "adapter:{run.folder}"')


@train_app.command("purple")
@config_options(config_file=True)
def purple(
    *,
    data: PurpleDataConfig,
    out_dir: Annotated[Path, typer.Option("--out", help="Checkpoints (best/, last/) and split.json.")] = Path(
        "runs/purple"
    ),
    config: PurpleTrainConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.")] = False,
) -> None:
    """PURPLE: learn which K records (and in which order) make the LLM likeliest to give the true answer.

    Data-parallel under 'accelerate launch --multi_gpu --num_processes N -m personamem train purple ...'
    (GPUs, or CPU processes where there are none); the checkpoint is the same.
    """
    from accelerate import PartialState

    from personamem.encoder import default_encoder
    from personamem.llm.load import load_llm
    from personamem.trainers.engine import on_cpu
    from personamem.trainers.purple import train_purple
    from personamem.trainers.purple.reward import LLMReward

    main = PartialState(cpu=on_cpu(config.device)).is_main_process
    encoder = default_encoder()
    with progress_bar() if main else contextlib.nullcontext() as progress:
        try:
            train, validation, test, split = _purple_examples(data, config, encoder, progress)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        if main:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "split.json").write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
        info = {
            "data_source": split["source"],
            "validation_users": split["validation_users"],
            "train_users": len(split["train_users"]),
        }
        reward = LLMReward(load_llm(data.llm, runtime=data.llm_runtime))
        result = train_purple(
            train, validation, encoder, reward, config, out_dir, resume=resume, progress=progress, info=info
        )
    if not main:
        return
    size = sum(f.stat().st_size for f in result.best.iterdir() if f.is_file())
    table = Table("", "", box=box.SIMPLE, show_header=False, title="PURPLE training")
    for name, value in (
        ("examples train / validation / test", f"{len(train)} / {len(validation)} / {len(test)}"),
        ("best step, validation reward (nats)", f"{result.best_step}, {result.best_validation:.3f}"),
        (
            "profiles rewarded by this process (LLM-scored, cache hits)",
            f"{result.profiles_rewarded} ({reward.scored}, {reward.hits})",
        ),
        ("processes", str(result.processes)),
        ("wall-clock seconds", f"{result.seconds:.0f}"),
        ("best checkpoint", f"{result.best} ({size / 2**20:.1f} MiB)"),
    ):
        table.add_row(name, value)
    out.print(table)
    out.print(f'To use it, add to the pipeline table: selector = "purple:{result.best}"')


def _purple_examples(
    data: PurpleDataConfig, config: PurpleTrainConfig, encoder: SentenceEncoder, progress: Progress | None
) -> tuple[list[ProfileExample], list[ProfileExample], list[ProfileExample], dict[str, Any]]:
    """(train, validation, test, split.json) from a benchmark or from an application's traffic."""
    from personamem.eval.evaluate import EvalConfig, load_benchmark
    from personamem.eval.vectors import default_vector_cache
    from personamem.trainers.purple.data import examples_from_benchmark, examples_from_traffic, split_by_user
    from personamem.trainers.traffic import open_traffic, split_traffic

    picker = random.Random(config.seed)
    if data.from_traffic:
        traffic = open_traffic(data)
        try:
            examples = examples_from_traffic(
                traffic,
                first_stage=data.first_stage,
                candidates=data.candidates,
                min_rating=data.min_rating,
                progress=progress,
            )
        finally:
            traffic.close()
        counts = Counter(e.user_id for e in examples)
        train_users, validation_users = split_traffic(
            "PURPLE",
            dict(counts),
            validation=data.validation_users,
            seed=data.split_seed,
            need_train=config.batch_size,
            hint="Log context() calls (log_interactions = true) and report each accepted answer with "
            "PersonaMem.feedback(interaction_id, answer=...).",
        )
        train = [e for e in examples if e.user_id in train_users]
        validation, test = [e for e in examples if e.user_id in validation_users], []
        source: dict[str, Any] = {"traffic": traffic.source}
    else:
        assert data.benchmark is not None and data.data is not None  # the config's validator
        bench = load_benchmark(EvalConfig(benchmark=data.benchmark, data=data.data, noise=data.noise))
        examples = examples_from_benchmark(
            bench,
            encoder,
            first_stage=data.first_stage,
            candidates=data.candidates,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
        train, validation, test = split_by_user(
            examples, validation=data.validation_users, test=data.test_users, seed=data.split_seed
        )
        source = {"benchmark": bench.name, "data": str(data.data)}
    if data.max_train and data.max_train < len(train):
        train = picker.sample(train, data.max_train)
    validation = picker.sample(validation, min(data.max_validation, len(validation)))
    split = {
        "source": source,
        "split_seed": data.split_seed,
        "first_stage": data.first_stage,
        "candidates": data.candidates,
        "train_users": sorted({e.user_id for e in train}),
        "validation_users": sorted({e.user_id for e in validation}),
        "test_users": sorted({e.user_id for e in test}),
        "test_examples": [e.id for e in test],
    }
    if "benchmark" in source:
        split["benchmark"] = source["benchmark"]
    return train, validation, test, split


@train_app.command("memrerank")
@config_options(config_file=True)
def memrerank(
    *,
    data: MemRerankDataConfig,
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
    from personamem.trainers.memrerank.data import instances_from_traffic
    from personamem.trainers.traffic import open_traffic

    if data.from_traffic:
        traffic = open_traffic(data)
        try:
            instances = instances_from_traffic(traffic, min_rating=data.min_rating)
        finally:
            traffic.close()
        source: dict[str, Any] = {"traffic": traffic.source}
        users = len({i.user_id for i in instances})
        if users < 2:  # the trainer holds a share of users out, so one user leaves nothing to train on
            raise typer.BadParameter(
                f"too little traffic to train MemRerank: {len(instances)} usable interaction(s) from "
                f"{users} user(s); need at least 2 users with an interaction whose answer used one shown "
                "record and left 4 shown records unused. Report PersonaMem.feedback(interaction_id, "
                "used_record_ids=[...]) for search/context calls that show at least 5 records."
            )
    else:
        assert data.data is not None  # the config's validator
        instances = load_amazon_choices(
            data.data, split="train", encoder=default_encoder(), cache_dir=default_vector_cache()
        )
        source = {"benchmark": "amazon-beauty", "data": str(data.data)}
    with progress_bar() as progress:
        try:
            result = train_memrerank(
                instances, config, out_dir, resume=resume, progress=progress, info={"data_source": source}
            )
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
    out.print(f'To use it, add to the pipeline table: preference_memory = "memrerank:{result.checkpoint}"')


@train_app.command("pgret")
@config_options(config_file=True)
def pgret(
    *,
    data: PGRetDataConfig,
    out_dir: Annotated[
        Path, typer.Option("--out", help="The tower (best/, last/), split.json and history.json.")
    ] = Path("runs/pgret"),
    config: PGRetTrainConfig,
    resume: Annotated[bool, typer.Option(help="Continue from --out/last.")] = False,
) -> None:
    """PG-Ret: fine-tune the query tower so it finds relevant records the base retriever misses.

    The policy-gradient variants run data-parallel under 'accelerate launch --multi_gpu
    --num_processes N -m personamem train pgret ...', as PURPLE does.
    """
    from accelerate import PartialState

    from personamem.encoder import default_encoder
    from personamem.eval.benchmark import evenly_spaced
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.llm.load import load_llm
    from personamem.trainers.engine import on_cpu
    from personamem.trainers.pgret.data import PGRetData
    from personamem.trainers.pgret.infonce import train_infonce
    from personamem.trainers.pgret.trainer import calibration_pairs, train_pgret

    state = PartialState(cpu=on_cpu(config.device))
    encoder = default_encoder()
    with progress_bar() if state.is_main_process else contextlib.nullcontext() as progress:
        try:
            logged, split = _pgret_data(data, config, encoder, progress)
        except ValueError as exc:
            raise typer.BadParameter(str(exc)) from None
        train_users, validation_users = split["train_users"], split["validation_users"]
        test_users = split["test_users"]
        every = logged.only(train_users)
        train = PGRetData(tuple(evenly_spaced(every.queries, data.max_train)), every.corpora)
        held = logged.only(validation_users)
        validation = PGRetData(tuple(evenly_spaced(held.queries, data.max_validation)), held.corpora)
        if state.is_main_process:
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / "split.json").write_text(json.dumps(split, indent=2) + "\n", encoding="utf-8")
        info: dict[str, Any] = {"data": split}
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
            calibration = calibrate(_sharded_margins(judge, pairs, state), labels)
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
            if state.is_main_process:
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
    if not state.is_main_process:
        return
    table = Table("", "", box=box.SIMPLE, show_header=False, title=f"PG-Ret training ({config.variant})")
    for name, value in [*rows, ("checkpoint", str(best))]:
        table.add_row(name, value)
    out.print(table)
    out.print(f'To use it, add to the pipeline table: first_stage = "pgret:{best}"')


def _sharded_margins(judge: RelevanceJudge, pairs: list[tuple[str, str]], state: PartialState) -> list[float]:
    """The judge's margins for ``pairs``, each process judging every N-th pair (all get all, in order)."""
    if state.num_processes == 1:
        return list(judge.margins(pairs))
    from accelerate.utils import gather_object

    world = state.num_processes
    shares = gather_object([list(judge.margins(pairs[state.process_index :: world]))])
    return [shares[i % world][i // world] for i in range(len(pairs))]


def _pgret_data(
    data: PGRetDataConfig, config: PGRetTrainConfig, encoder: SentenceEncoder, progress: Progress | None
) -> tuple[PGRetData, dict[str, Any]]:
    """Every logged query (a benchmark's questions, or traffic with used records) and the user split."""
    from personamem.eval.evaluate import EvalConfig, load_benchmark
    from personamem.eval.vectors import default_vector_cache
    from personamem.trainers.pgret.data import data_from_benchmark, data_from_traffic, split_users
    from personamem.trainers.traffic import open_traffic, split_traffic

    if data.from_traffic:
        traffic = open_traffic(data)
        try:
            logged = data_from_traffic(
                traffic,
                novelty_depth=data.novelty_depth,
                exploration_depth=data.exploration_depth,
                min_rating=data.min_rating,
                progress=progress,
            )
        finally:
            traffic.close()
        train_users, validation_users = split_traffic(
            "PG-Ret",
            dict(Counter(q.user_id for q in logged.queries)),
            validation=data.validation_users,
            seed=data.split_seed,
            need_train=config.batch_size,
            hint="Log search()/context() calls (log_interactions = true) and report the records each "
            "accepted answer used with PersonaMem.feedback(interaction_id, used_record_ids=[...]).",
        )
        test_users: list[str] = []
        source: dict[str, Any] = {"traffic": traffic.source}
    else:
        assert data.benchmark is not None and data.data is not None  # the config's validator
        bench = load_benchmark(EvalConfig(benchmark=data.benchmark, data=data.data, noise=data.noise))
        logged = data_from_benchmark(
            bench,
            encoder,
            novelty_depth=data.novelty_depth,
            exploration_depth=data.exploration_depth,
            cache_dir=default_vector_cache(),
            progress=progress,
        )
        train_users, validation_users, test_users = split_users(
            logged.users, validation=data.validation_users, test=data.test_users, seed=data.split_seed
        )
        source = {"benchmark": bench.name, "data": str(data.data)}
    split = {
        "source": source,
        "split_seed": data.split_seed,
        "novelty_depth": data.novelty_depth,
        "train_users": train_users,
        "validation_users": validation_users,
        "test_users": test_users,
    }
    if "benchmark" in source:
        split["benchmark"] = source["benchmark"]
    return logged, split
