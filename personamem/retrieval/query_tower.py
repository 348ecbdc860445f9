"""A trained query tower: a query encoder whose vectors live in the store encoder's space.

PG-Ret (and its supervised InfoNCE baseline) fine-tune only the query side, so the stored record
vectors stay valid and a checkpoint drops into any store built with the same record encoder, with no
re-indexing. A checkpoint is a sentence-transformers model folder plus ``pgret.json``, which names
the record encoder it was trained against; loading it over another encoder is refused, because its
query vectors would be compared with vectors from a different space.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from personamem.encoder import Encoder, SentenceEncoder
from personamem.errors import CheckpointError
from personamem.retrieval.checkpoint_json import check_record_encoder, read_checkpoint_json

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["CONFIG_FILE", "FORMAT", "QueryTower", "read_tower_config", "save_query_tower"]

FORMAT = "personamem-pgret-1"
CONFIG_FILE = "pgret.json"


class QueryTower:
    """Encodes queries with a trained tower; records keep the store encoder's vectors.

    Use :meth:`load`, which checks the checkpoint against the store's encoder.

    Attributes:
        folder: the checkpoint folder.
        info: ``pgret.json`` (record encoder, variant, seed, data source, validation result).
    """

    def __init__(self, folder: Path, encoder: SentenceEncoder, info: dict[str, Any]) -> None:
        self.folder = folder
        self.info = info
        self._encoder = encoder

    @classmethod
    def load(cls, folder: str | Path, record_encoder: Encoder) -> QueryTower:
        """The tower in ``folder``, checked against the encoder that embedded the store's records.

        Raises:
            CheckpointError: not a PG-Ret checkpoint, an unknown format, or a tower trained against
                another record encoder (or of another width).
        """
        folder = Path(folder)
        info = read_tower_config(folder)
        check_record_encoder(
            folder, info, record_encoder, "query tower", "retrain it against this store's encoder"
        )
        return cls(folder, SentenceEncoder(folder), info)

    @property
    def name(self) -> str:
        """The checkpoint folder, as a method name writes it."""
        return str(self.folder)

    @property
    def dim(self) -> int:
        """Width of the query vectors (the record encoder's)."""
        return self._encoder.dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, unit-norm rows comparable with the store's record vectors."""
        return self._encoder.encode(texts)


def read_tower_config(folder: Path) -> dict[str, Any]:
    """``pgret.json`` of a checkpoint folder.

    Raises:
        CheckpointError: the folder or its config is missing, unreadable or of another format.
    """
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{folder}: not a PG-Ret query tower (no {CONFIG_FILE})")
    return read_checkpoint_json(path, FORMAT, "checkpoint")


def save_query_tower(
    folder: Path, model: SentenceTransformer, *, record_encoder: Encoder, info: dict[str, Any]
) -> None:
    """Write ``model`` as a sentence-transformers folder and ``pgret.json``.

    The config is written last, so a folder cut short by a crash is not a loadable checkpoint.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).unlink(missing_ok=True)
    model.save(str(folder))
    config = {"format": FORMAT, "record_encoder": record_encoder.name, "dim": record_encoder.dim, **info}
    partial = folder / (CONFIG_FILE + ".partial")
    partial.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    partial.replace(folder / CONFIG_FILE)
