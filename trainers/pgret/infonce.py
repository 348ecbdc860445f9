"""PG-Ret's supervised baseline: InfoNCE fine-tuning of the query tower alone.

Each logged (query, gold record) pair is a positive; the query's non-gold records from the top of the
base model's ranking are its hard negatives, and the other pairs of the batch are in-batch negatives
(sentence-transformers' ``MultipleNegativesRankingLoss``, trained by its ``SentenceTransformerTrainer``).

The model is a ``Router`` over two copies of the record encoder: a trainable "query" route and a frozen
"document" route. Only the query side learns because the store's record vectors were embedded once by
the record encoder: a tower trained against a frozen copy of it still maps queries into that space, so
the checkpoint drops into any store built with the same encoder and nothing is re-indexed (training
both sides would invalidate every stored vector). The frozen route also runs with dropout off, so the
records it embeds during training are exactly the vectors retrieval will compare against. Only the
query route is saved, as a plain sentence-transformers folder that
:class:`~personamem.retrieval.query_tower.QueryTower` loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from rich.progress import Progress, TaskID
from sentence_transformers import (
    SentenceTransformer,
    SentenceTransformerTrainer,
    SentenceTransformerTrainingArguments,
)
from sentence_transformers.base.sampler import NoDuplicatesBatchSampler
from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
from sentence_transformers.sentence_transformer.modules import Module, Router
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from personamem.encoder import Encoder
from personamem.errors import MissingExtraError
from personamem.retrieval.query_tower import save_query_tower
from personamem.trainers.pgret.config import PGRetTrainConfig
from personamem.trainers.pgret.data import LoggedQuery, PGRetData, UserCorpus

if TYPE_CHECKING:
    from datasets import Dataset

__all__ = ["infonce_pairs", "infonce_trainer", "train_infonce"]

QUERY, DOCUMENT = "query", "document"
"""The Router's routes (and the first pair column, which the query route encodes)."""


def infonce_pairs(data: PGRetData, hard_negatives: int) -> Dataset:
    """One row per (query, gold record), in the column order ``MultipleNegativesRankingLoss`` reads.

    Columns ``query``, ``positive``, ``negative_1`` ... ``negative_M`` hold texts. A query's negatives
    are the first M non-gold ids of its base top (the records the base model confuses with the gold);
    a short list is padded from the end of the user's other non-gold records, so every row has M.
    Gold or base ids missing from the user's corpus are skipped.

    Raises:
        ValueError: no query has a gold record in its user's corpus, or a user has no non-gold record
            to use as a negative.
        MissingExtraError: datasets is not installed.
    """
    try:
        from datasets import Dataset
    except ImportError:
        raise MissingExtraError(["datasets"], "train") from None
    negative_columns = [f"negative_{i}" for i in range(1, hard_negatives + 1)]
    columns: dict[str, list[str]] = {name: [] for name in [QUERY, "positive", *negative_columns]}
    for query in data.queries:
        corpus = data.corpora[query.user_id]
        row = corpus.index()
        gold = [g for g in dict.fromkeys(query.gold) if g in row]
        if not gold:
            continue
        negatives = [corpus.texts[row[r]] for r in _negatives(query, corpus, row, hard_negatives)]
        for record_id in gold:
            columns[QUERY].append(query.text)
            columns["positive"].append(corpus.texts[row[record_id]])
            for name, text in zip(negative_columns, negatives, strict=True):
                columns[name].append(text)
    if not columns[QUERY]:
        raise ValueError(
            f"no InfoNCE pairs: none of the {len(data.queries)} training queries has a gold record "
            "in its user's corpus"
        )
    return Dataset.from_dict(columns)


def infonce_trainer(
    train: PGRetData,
    config: PGRetTrainConfig,
    out_dir: Path,
    *,
    base_model_path: Path,
    progress: Progress | None = None,
) -> tuple[SentenceTransformerTrainer, SentenceTransformer]:
    """The trainer over the Router model, and the query tower it trains (the query route's modules).

    Separate from :func:`train_infonce` so the Router model can be inspected after training (its
    document route must equal the base model). ``config.batch_size`` is (query, gold) pairs per step,
    as given: larger batches add in-batch negatives, but the M hard negatives per pair already give
    each query its hardest candidates. Dropout and the batch order are seeded by ``config.seed``.

    Raises:
        ValueError: see :func:`infonce_pairs`.
        MissingExtraError: datasets is not installed.
    """
    pairs = infonce_pairs(train, config.hard_negatives)
    tower = SentenceTransformer(str(base_model_path), device=config.device, local_files_only=True)
    frozen = SentenceTransformer(str(base_model_path), device=config.device, local_files_only=True)
    _freeze(frozen)
    router = Router.for_query_document(query_modules=_modules(tower), document_modules=_modules(frozen))
    model = SentenceTransformer(modules=[router], device=config.device)
    args = SentenceTransformerTrainingArguments(
        output_dir=str(out_dir / "trainer"),
        num_train_epochs=config.epochs,
        per_device_train_batch_size=config.batch_size,
        learning_rate=config.lr,
        max_grad_norm=config.grad_clip,
        seed=config.seed,
        data_seed=config.seed,
        use_cpu=torch.device(config.device).type == "cpu",
        # the data collator tokenizes each column for its route and stamps the route on its features
        router_mapping={name: QUERY if name == QUERY else DOCUMENT for name in pairs.column_names},
        batch_sampler=_distinct_pairs,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
    )
    trainer = SentenceTransformerTrainer(
        model=model,
        args=args,
        train_dataset=pairs,
        loss=MultipleNegativesRankingLoss(model),
        callbacks=[_ProgressCallback(progress)] if progress is not None else None,
    )
    trainer.remove_callback(PrinterCallback)  # it prints the run summary; the progress bar says enough
    return trainer, tower


def train_infonce(
    train: PGRetData,
    config: PGRetTrainConfig,
    out_dir: Path,
    *,
    base_model_path: Path,
    record_encoder: Encoder,
    info: dict[str, Any],
    progress: Progress | None = None,
) -> Path:
    """Train the query tower for ``config.epochs`` passes over ``train``'s pairs; return ``out_dir/best``.

    There is no validation to choose a step by, so ``best/`` is the final tower. Nothing else is
    checkpointed (the trainer's scratch folder is ``out_dir/trainer``).

    Args:
        train: the training users' logged queries and corpora.
        config: ``lr``, ``batch_size``, ``epochs``, ``hard_negatives``, ``grad_clip``, ``seed`` and
            ``device`` are used.
        out_dir: the run folder.
        base_model_path: the record encoder's sentence-transformers folder: both routes start as it.
        record_encoder: the encoder that embedded the corpora (named in the checkpoint).
        info: written into the checkpoint's ``pgret.json`` (data source, users).
        progress: shows a task advancing once per optimizer step.

    Raises:
        ValueError: no training query has a gold record in its user's corpus.
        MissingExtraError: datasets is not installed.
    """
    trainer, tower = infonce_trainer(
        train, config, out_dir, base_model_path=base_model_path, progress=progress
    )
    trainer.train()
    best = out_dir / "best"
    save_query_tower(
        best,
        tower,
        record_encoder=record_encoder,
        info={
            **info,
            "variant": "infonce",
            "seed": config.seed,
            "steps": trainer.state.global_step,
            "config": config.model_dump(mode="json"),
        },
    )
    return best


def _negatives(query: LoggedQuery, corpus: UserCorpus, row: dict[str, int], count: int) -> list[str]:
    """``count`` non-gold record ids: the base top's first, then the corpus's from its end.

    They are cycled when the user has fewer non-gold records than ``count``.
    """
    gold = set(query.gold)
    top = [r for r in dict.fromkeys(query.base_top) if r in row and r not in gold]
    taken = set(top)
    pool = top + [r for r in reversed(corpus.ids) if r not in gold and r not in taken]
    if count and not pool:
        raise ValueError(
            f"user {query.user_id!r}: every record is gold for query {query.id!r}, none is left as a negative"
        )
    return [pool[i % len(pool)] for i in range(count)]


def _distinct_pairs(
    dataset: Dataset,
    batch_size: int,
    drop_last: bool,
    valid_label_columns: list[str] | None,
    generator: torch.Generator | None,
    seed: int,
) -> NoDuplicatesBatchSampler:
    """Batches with no query or positive twice.

    So a query with several gold records never meets its other gold records as in-batch negatives.
    Negatives are left out of the check: a user's queries share their base top records by design, and
    checking them would split batches apart.
    """
    return NoDuplicatesBatchSampler(
        dataset.select_columns([QUERY, "positive"]),
        batch_size=batch_size,
        drop_last=drop_last,
        valid_label_columns=valid_label_columns,
        generator=generator,
        seed=seed,
    )


def _modules(model: SentenceTransformer) -> list[Module]:
    """The model's modules in order (typed as torch modules by ``nn.Sequential``)."""
    return cast("list[Module]", list(model.children()))


def _freeze(model: SentenceTransformer) -> None:
    """Fix ``model``: no parameter trains and dropout is off, so it embeds records as the store did.

    Dropout is switched off by probability because the trainer puts every module in training mode.
    """
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0


class _ProgressCallback(TrainerCallback):
    """Advances a rich task once per optimizer step."""

    def __init__(self, progress: Progress) -> None:
        self.progress = progress
        self.task: TaskID | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Add the task, sized to the trainer's step count."""
        self.task = self.progress.add_task("training InfoNCE", total=state.max_steps)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Advance by one step."""
        if self.task is not None:
            self.progress.update(self.task, completed=state.global_step)
