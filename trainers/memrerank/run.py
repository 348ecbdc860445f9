"""``personamem train memrerank`` as a function: choices from Amazon Beauty or traffic, the summary."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from personamem.trainers.memrerank.config import MemRerankRunConfig
from personamem.trainers.run import TrainSummary

if TYPE_CHECKING:
    from rich.progress import Progress

__all__ = ["run"]


def run(config: MemRerankRunConfig, *, progress: Progress | None = None) -> TrainSummary:
    """MemRerank: train the memory extractor so the setwise reranker picks each user's true next item.

    Only the training side of the fixed user split (the one ``eval-memory`` holds out) is trained on.

    Raises:
        InsufficientDataError: traffic from fewer than two users.
        ValueError: a finished or foreign run in --out without --resume, or no usable instance.
    """
    from personamem.datasets import ChoiceNeeds, read_choices
    from personamem.datasets.traffic import open_traffic
    from personamem.datasets.vectors import default_vector_cache
    from personamem.encoder import default_encoder
    from personamem.errors import InsufficientDataError
    from personamem.trainers.memrerank.data import instances_from_traffic
    from personamem.trainers.memrerank.trainer import train_memrerank

    data = config.data
    if data.from_traffic:
        traffic = open_traffic(data)
        try:
            instances = instances_from_traffic(traffic, min_rating=data.min_rating)
        finally:
            traffic.close()
        source: dict[str, Any] = {"traffic": traffic.source}
        users = len({i.user_id for i in instances})
        if users < 2:  # the trainer holds a share of users out, so one user leaves nothing to train on
            raise InsufficientDataError(
                f"too little traffic to train MemRerank: {len(instances)} usable interaction(s) from "
                f"{users} user(s); need at least 2 users with an interaction whose answer used one shown "
                "record and left 4 shown records unused. Report PersonaMem.feedback(interaction_id, "
                "used_record_ids=[...]) for search/context calls that show at least 5 records."
            )
    else:
        assert data.data is not None  # the config's validator
        needs = ChoiceNeeds(default_encoder(), cache_dir=default_vector_cache(), part="train")
        instances = read_choices("amazon", data.data, needs)
        source = {"benchmark": "amazon-beauty", "data": str(data.data)}
    result = train_memrerank(
        instances,
        config.train,
        config.out_dir,
        resume=config.resume,
        progress=progress,
        info={"data_source": source},
    )
    first, last = result.history[0], result.history[-1]
    return TrainSummary(
        "MemRerank training",
        [
            ("training users (test side held out)", str(result.users)),
            ("steps", str(result.step)),
            ("utility P(positive), first → last step", f"{first['utility']:.3f} → {last['utility']:.3f}"),
            ("quality, first → last step", f"{first['quality']:.2f} → {last['quality']:.2f}"),
            ("reranker choices scored (this run)", str(result.utilities_scored)),
            ("wall-clock seconds (this run)", f"{result.seconds:.0f}"),
            ("checkpoint", f"memrerank:{result.checkpoint}"),
        ],
        f'preference_memory = "memrerank:{result.checkpoint}"',
    )
