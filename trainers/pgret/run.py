"""``personamem train pgret`` as a function: logged queries, their user split, training, the summary."""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING, Any

from personamem.trainers.pgret.config import PGRetDataConfig, PGRetRunConfig, PGRetTrainConfig
from personamem.trainers.run import TrainSummary

if TYPE_CHECKING:
    from accelerate import PartialState
    from rich.progress import Progress

    from personamem.encoder import SentenceEncoder
    from personamem.eval.judge import RelevanceJudge
    from personamem.trainers.pgret.data import PGRetData

__all__ = ["logged_queries", "run"]


def run(config: PGRetRunConfig, *, progress: Progress | None = None) -> TrainSummary | None:
    """PG-Ret: fine-tune the query tower so it finds relevant records the base retriever misses.

    The policy-gradient variants run data-parallel under 'accelerate launch --multi_gpu
    --num_processes N -m personamem train pgret ...', as PURPLE does.

    Returns:
        The summary in the main process, None in the others.

    Raises:
        ValueError: too few users or queries for the split (InsufficientDataError for traffic).
    """
    from accelerate import PartialState

    from personamem.datasets import evenly_spaced, write_split
    from personamem.encoder import default_encoder
    from personamem.eval.judge import RelevanceJudge, calibrate
    from personamem.llm.load import load_llm
    from personamem.trainers.engine import on_cpu
    from personamem.trainers.pgret.data import PGRetData
    from personamem.trainers.pgret.infonce import train_infonce
    from personamem.trainers.pgret.trainer import calibration_pairs, train_pgret

    data, train_config, out_dir = config.data, config.train, config.out_dir
    state = PartialState(cpu=on_cpu(train_config.device))
    progress = progress if state.is_main_process else None
    encoder = default_encoder()
    logged, split = logged_queries(data, train_config, encoder, progress)
    train_users, validation_users, test_users = (
        split["train_users"],
        split["validation_users"],
        split["test_users"],
    )
    every = logged.only(train_users)
    train = PGRetData(tuple(evenly_spaced(every.queries, data.max_train)), every.corpora)
    held = logged.only(validation_users)
    validation = PGRetData(tuple(evenly_spaced(held.queries, data.max_validation)), held.corpora)
    if state.is_main_process:
        write_split(out_dir, split)
    info: dict[str, Any] = {"data": split}
    rows: list[tuple[str, str]] = [
        ("queries train / validation", f"{len(train.queries)} / {len(validation.queries)}"),
        (
            "users train / validation / test",
            f"{len(train_users)} / {len(validation_users)} / {len(test_users)}",
        ),
    ]
    if train_config.variant == "infonce":
        best = train_infonce(
            train,
            train_config,
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
            train_config,
            out_dir,
            base_model_path=encoder.path,
            record_encoder=encoder,
            info=info,
            resume=config.resume,
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
        return None
    return TrainSummary(
        f"PG-Ret training ({train_config.variant})",
        [*rows, ("checkpoint", str(best))],
        f'first_stage = "pgret:{best}"',
    )


def logged_queries(
    data: PGRetDataConfig, config: PGRetTrainConfig, encoder: SentenceEncoder, progress: Progress | None
) -> tuple[PGRetData, dict[str, Any]]:
    """Every logged query (a benchmark's questions, or traffic with used records) and split.json."""
    from personamem.datasets.vectors import default_vector_cache
    from personamem.trainers.pgret.data import data_from_benchmark, data_from_traffic

    logged, origin = data.read(
        lambda bench: data_from_benchmark(
            bench,
            encoder,
            novelty_depth=data.novelty_depth,
            exploration_depth=data.exploration_depth,
            cache_dir=default_vector_cache(),
            progress=progress,
        ),
        lambda traffic: data_from_traffic(
            traffic,
            novelty_depth=data.novelty_depth,
            exploration_depth=data.exploration_depth,
            min_rating=data.min_rating,
            progress=progress,
        ),
    )
    split = data.split(
        Counter(q.user_id for q in logged.queries),
        what="PG-Ret",
        need_train=config.batch_size,
        hint="Log search()/context() calls (log_interactions = true) and report the records each "
        "accepted answer used with PersonaMem.feedback(interaction_id, used_record_ids=[...]).",
    )
    return logged, data.split_json(split, origin, novelty_depth=data.novelty_depth)


def _sharded_margins(judge: RelevanceJudge, pairs: list[tuple[str, str]], state: PartialState) -> list[float]:
    """The judge's margins for ``pairs``, each process judging every N-th pair (all get all, in order)."""
    if state.num_processes == 1:
        return list(judge.margins(pairs))
    from accelerate.utils import gather_object

    world = state.num_processes
    shares = gather_object([list(judge.margins(pairs[state.process_index :: world]))])
    return [shares[i % world][i // world] for i in range(len(pairs))]
