"""A query adapter: a small learned map on the store encoder's query vectors.

A query tower fine-tunes a whole encoder per deployment; an adapter is one ``dim × dim`` matrix applied
to the base encoder's query vector (``q' = normalize(q W)``, W started at the identity), so it costs
a vector–matrix product per query, ships with the package (``adapter:mixed``) and is refitted from a
store's own data in seconds (``personamem train adapter``, ``personamem improve``). Records keep the
vectors the store holds: nothing is re-indexed. A folder holds ``adapter.npy`` (float32 weights) and
``adapter.json`` (format, record encoder, the weights' sha256, training recipe, data split); the
checksum is checked on every load, so a file cut short or swapped is refused rather than searched with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from personamem.encoder import Encoder
from personamem.errors import CheckpointError
from personamem.retrieval.checkpoint_json import check_record_encoder, read_checkpoint_json

__all__ = [
    "CONFIG_FILE",
    "FORMAT",
    "SHIPPED_ADAPTERS",
    "WEIGHTS_FILE",
    "QueryAdapter",
    "adapter_folder",
    "fits",
    "save_query_adapter",
    "shipped_adapters",
]

FORMAT = "personamem-adapter-1"
CONFIG_FILE = "adapter.json"
WEIGHTS_FILE = "adapter.npy"
SHIPPED_ADAPTERS = Path(__file__).resolve().parent.parent / "data" / "adapters"
"""Adapters that ship with the package, one folder each; ``adapter:<folder name>`` names them."""


class QueryAdapter:
    """Encodes queries with the store's encoder, then maps them with the adapter's weights.

    Use :meth:`load`, which resolves shipped names and checks the weights against the store.

    Attributes:
        folder: the adapter folder.
        info: ``adapter.json`` (record encoder, checksum, recipe, split, validation result).
    """

    def __init__(self, base: Encoder, weight: np.ndarray, *, folder: Path, info: dict[str, Any]) -> None:
        self.folder = folder
        self.info = info
        self._base = base
        self._weight = np.ascontiguousarray(weight, dtype=np.float32)

    @classmethod
    def load(cls, spec: str | Path, record_encoder: Encoder) -> QueryAdapter:
        """The adapter ``spec`` names (a shipped name or a folder), over ``record_encoder``.

        Raises:
            CheckpointError: no such adapter, an unreadable or other-format folder, weights whose
                checksum or shape disagrees with ``adapter.json``, or an adapter fitted to another
                record encoder.
        """
        folder = adapter_folder(spec)
        info = _read_config(folder)
        check_record_encoder(
            folder, info, record_encoder, "query adapter", "fit one for it with 'personamem train adapter'"
        )
        dim = record_encoder.dim
        path = folder / WEIGHTS_FILE
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CheckpointError(f"{path}: cannot read ({exc.strerror or exc})") from None
        if hashlib.sha256(raw).hexdigest() != info.get("sha256"):
            raise CheckpointError(f"{path}: checksum differs from {CONFIG_FILE}; the weights are damaged")
        weight = np.load(path)
        if weight.shape != (dim, dim):
            raise CheckpointError(f"{path}: weights of shape {weight.shape}, expected ({dim}, {dim})")
        return cls(record_encoder, weight, folder=folder, info=info)

    @property
    def name(self) -> str:
        """The base encoder's name and the adapter's folder (distinct vectors, distinct names)."""
        return f"{self._base.name}+adapter:{self.folder}"

    @property
    def dim(self) -> int:
        """Width of the query vectors (the record encoder's)."""
        return self._base.dim

    @property
    def weight(self) -> np.ndarray:
        """The ``(dim, dim)`` map (a copy), e.g. to start a refit from."""
        return self._weight.copy()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors: the base vectors mapped by the weights, as unit rows."""
        return self.transform(self._base.encode(texts))

    def transform(self, vectors: np.ndarray) -> np.ndarray:
        """Map base query vectors (``(n, dim)``) to unit rows in the records' space."""
        mapped = np.asarray(vectors, dtype=np.float32) @ self._weight
        norms = np.linalg.norm(mapped, axis=1, keepdims=True)
        return mapped / np.maximum(norms, 1e-12)


def fits(spec: str | Path, record_encoder: Encoder) -> bool:
    """Whether adapter ``spec`` exists and was fitted to ``record_encoder`` (no weights are read)."""
    try:
        folder = adapter_folder(spec)
        check_record_encoder(folder, _read_config(folder), record_encoder, "query adapter", "")
    except CheckpointError:
        return False
    return True


def adapter_folder(spec: str | Path) -> Path:
    """The folder of a shipped adapter's name, or ``spec`` itself as a folder.

    Raises:
        CheckpointError: neither a shipped name nor a folder with ``adapter.json``.
    """
    text = str(spec)
    shipped = SHIPPED_ADAPTERS / text
    if "/" not in text and (shipped / CONFIG_FILE).is_file():
        return shipped
    folder = Path(spec)
    if not (folder / CONFIG_FILE).is_file():
        raise CheckpointError(
            f"{text}: not a query adapter (no {folder / CONFIG_FILE}); shipped adapters: "
            f"{', '.join(shipped_adapters())}"
        )
    return folder


def shipped_adapters() -> list[str]:
    """The names of the adapters that ship with the package (``adapter:<name>`` takes them), sorted."""
    return sorted(p.name for p in SHIPPED_ADAPTERS.iterdir() if (p / CONFIG_FILE).is_file())


def _read_config(folder: Path) -> dict[str, Any]:
    return read_checkpoint_json(folder / CONFIG_FILE, FORMAT, "adapter")


def save_query_adapter(
    folder: Path, weight: np.ndarray, *, record_encoder: Encoder, info: dict[str, Any]
) -> str:
    """Write the weights and ``adapter.json`` (config last: a folder cut short is not loadable).

    Returns:
        The weights file's sha256.
    """
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    if weight.shape != (record_encoder.dim, record_encoder.dim):
        raise ValueError(f"weights of shape {weight.shape} for a {record_encoder.dim}-dim encoder")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG_FILE).unlink(missing_ok=True)
    partial = folder / (WEIGHTS_FILE + ".partial")
    with partial.open("wb") as handle:
        np.save(handle, weight)
    partial.replace(folder / WEIGHTS_FILE)
    digest = hashlib.sha256((folder / WEIGHTS_FILE).read_bytes()).hexdigest()
    config = {
        "format": FORMAT,
        "record_encoder": record_encoder.name,
        "dim": record_encoder.dim,
        "sha256": digest,
        **info,
    }
    staged = folder / (CONFIG_FILE + ".partial")
    staged.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    staged.replace(folder / CONFIG_FILE)
    return digest
