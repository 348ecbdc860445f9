"""A BERT sentence encoder run by onnxruntime: exported once from the model's own weights, then cached.

Why onnxruntime (measured here, one text at a time on one thread, LoCoMo turns of 20-40 words):
sentence-transformers on torch took 15-16 ms a text and a hand-written numpy forward pass 29-30 ms,
while the same MiniLM exported to ONNX took 9-10 ms with vectors within 1e-6 of torch's. It also
starts fast: onnxruntime and a session load in a few hundred milliseconds, where importing
sentence-transformers (torch, scikit-learn, pandas) costs seconds. An int8-quantized ONNX MiniLM was
slower on this CPU (no VNNI), so the export stays float32 and stored vectors keep their values.

The export runs once per model (torch, transformers and the ``onnx`` package; a few seconds) into
the user cache, beside the CTranslate2 conversions (``$PERSONAMEM_CACHE``, else
``$XDG_CACHE_HOME/personamem``): written to a temporary name, checked against torch's vectors and
token states (PURPLE's input, a second output of the graph), then renamed, under a lock file, so
processes starting together export it once and a file cut short is never loaded. Only
sentence-transformers' plain BERT layout (Transformer, mean Pooling, Normalize) is exported;
:func:`plain_bert` says which folders qualify, and anything else runs on torch.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from personamem.telemetry import staged
from personamem.user_cache import default_cache_dir, make_once

if TYPE_CHECKING:
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = ["OnnxBert", "export_onnx", "plain_bert"]

log = logging.getLogger("personamem.encoder")

_LAYOUT = [
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
]
_CHUNK = 32  # texts per run in a batch: padded to the chunk's longest, after sorting by length
_PROBES = (
    "I repotted the fern on the balcony yesterday.",
    "What did Caroline say about the adoption agency in May?",
    "ok",
)
_TOLERANCE = 1e-5  # largest difference from torch's vectors an export may show
_OUTPUTS = ("vectors", "states")  # the pooled unit vectors; the last layer's token states (PURPLE)


def plain_bert(folder: Path) -> int | None:
    """The window (``max_seq_length``) of a plain BERT sentence encoder in ``folder``; None otherwise."""
    try:
        modules = json.loads((folder / "modules.json").read_text())
        config = json.loads((folder / "config.json").read_text())
        pooling = json.loads((folder / modules[1]["path"] / "config.json").read_text())
        window = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None
    modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
    plain = (
        [m.get("type") for m in modules] == _LAYOUT
        and modules[0].get("path") == ""
        and config.get("model_type") == "bert"
        and modes.get("pooling_mode_mean_tokens") is True
        and not any(v for k, v in modes.items() if k != "pooling_mode_mean_tokens")
        and isinstance(window, int)
        and (folder / "tokenizer.json").is_file()
        and (folder / "model.safetensors").is_file()
    )
    return window if plain else None


def _cache_dir() -> Path:
    return default_cache_dir() / "encoders"


def _fingerprint(folder: Path) -> str:
    """Names the export after the weights, not the folder: a changed model is exported again."""
    weights = folder / "model.safetensors"
    stat = weights.stat()
    named = f"{folder.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{'+'.join(_OUTPUTS)}"
    return hashlib.sha256(named.encode()).hexdigest()[:12]


def export_onnx(folder: Path, cache: Path | None = None) -> Path:
    """The ONNX file of the plain BERT sentence encoder in ``folder``, exported on first use.

    Raises:
        RuntimeError: the export's vectors differ from torch's by more than 1e-5.
    """
    target = (cache or _cache_dir()) / f"{folder.name}-{_fingerprint(folder)}" / "model.onnx"
    make_once(target, lambda: _export_into(folder, target), lock=Path(f"{target}.lock"))
    return target


def _export_into(folder: Path, target: Path) -> None:
    """:func:`_export` to a partial file of this process's own, renamed to ``target`` once checked."""
    partial = target.with_name(f"model.partial-{os.getpid()}.onnx")
    log.info("exporting encoder %s to ONNX once, into %s (about 10 s)", folder.name, target.parent)
    try:
        _export(folder, partial)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)


def _export(folder: Path, path: Path) -> None:
    """Trace the model with mean pooling and normalization into ``path``, then check its vectors."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
    bert = model[0].auto_model
    assert isinstance(bert, torch.nn.Module)

    class Pooled(torch.nn.Module):
        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert.eval()

        def forward(
            self, input_ids: torch.Tensor, attention_mask: torch.Tensor
        ) -> tuple[torch.Tensor, torch.Tensor]:
            states = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            weights = attention_mask.unsqueeze(-1).to(states.dtype)
            pooled = (states * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1), states

    example = (torch.ones((2, 8), dtype=torch.long), torch.ones((2, 8), dtype=torch.long))
    traced = path.with_name(path.stem + ".traced.onnx")
    # the tracer warns that shape checks become constants: true, and harmless for a fixed graph
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(bert),
            example,
            str(traced),
            input_names=["input_ids", "attention_mask"],
            output_names=list(_OUTPUTS),
            dynamic_axes={
                **{name: {0: "batch", 1: "tokens"} for name in ("input_ids", "attention_mask")},
                "vectors": {0: "batch"},
                "states": {0: "batch", 1: "tokens"},
            },
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: no onnxscript, and dynamic shapes as declared
        )
        reference = model.encode(list(_PROBES), normalize_embeddings=True, convert_to_numpy=True)
        features = model.preprocess(list(_PROBES))
        reference_states = model.forward(features)["token_embeddings"].numpy()
    try:
        _optimize(traced, path)
    finally:
        traced.unlink(missing_ok=True)
    exported = OnnxBert(folder, path)
    states, mask = exported.encode_tokens(_PROBES)
    gap = max(
        float(np.abs(exported.encode(_PROBES) - reference).max()),
        float(np.abs((states - reference_states)[mask]).max()),
    )
    if gap > _TOLERANCE * 10:  # states are not normalized: their values run to about 10
        raise RuntimeError(
            f"the ONNX export of {folder} differs from torch by {gap:.2e} (> {_TOLERANCE * 10})"
        )


def _optimize(traced: Path, path: Path) -> None:
    """Save onnxruntime's graph optimizations once, so a session loads without redoing them.

    The extended level fuses attention, layer norm and GELU and stays portable across CPUs (the
    level above may lay out for this one); loading the saved graph cut a session's start from
    0.15-0.3 s to 0.11-0.13 s here, which a one-shot command pays.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(path)
    onnxruntime.InferenceSession(str(traced), options, providers=["CPUExecutionProvider"])


class OnnxBert:
    """Encodes with an exported BERT sentence encoder: ``tokenizers`` and one onnxruntime session.

    The session runs each call on one thread: a few texts make products too small to split, and a
    second thread waiting for a busy core costs more than it saves. A batch is cut into chunks of
    similar length that run on the session side by side (onnxruntime releases the GIL), one per core.
    """

    def __init__(self, folder: Path, model: Path) -> None:
        import onnxruntime
        from tokenizers import Tokenizer

        config = json.loads((folder / "config.json").read_text())
        self.dim = int(config["hidden_size"])
        self.max_tokens = plain_bert(folder) or int(config["max_position_embeddings"])
        self._folder = folder
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.no_padding()  # MiniLM's file pads to 128 and cuts at 128
        self._tokenizer.enable_truncation(self.max_tokens)
        self._counter: Tokenizer | None = None
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL  # saved so
        self._session: onnxruntime.InferenceSession = onnxruntime.InferenceSession(
            str(model), options, providers=["CPUExecutionProvider"]
        )
        self._workers = max(1, os.cpu_count() or 1)
        self._pool: ThreadPoolExecutor | None = None

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Word pieces per text, special tokens included, without truncation."""
        if self._counter is None:
            from tokenizers import Tokenizer

            counter = Tokenizer.from_file(str(self._folder / "tokenizer.json"))
            counter.no_padding()
            counter.no_truncation()
            self._counter = counter
        return [len(e.ids) for e in self._counter.encode_batch(list(texts))]

    @staged("encode")
    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 rows, in the order of ``texts``."""
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        chunks = [order[i : i + _CHUNK] for i in range(0, len(order), _CHUNK)]
        out = np.empty((len(texts), self.dim), dtype=np.float32)

        def run(chunk: list[int]) -> None:
            ids, mask = _padded([encodings[i].ids for i in chunk])
            out[chunk] = self._session.run(["vectors"], {"input_ids": ids, "attention_mask": mask})[0]

        if len(chunks) == 1 or self._workers == 1:
            for chunk in chunks:
                run(chunk)
        else:
            list(self._executor().map(run, chunks))
        return out

    def encode_tokens(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """The last layer's token states ``(batch, tokens, dim)`` and the mask of real tokens.

        Padded to the longest text: what PURPLE attends over, without loading sentence-transformers.
        """
        if not texts:
            return np.zeros((0, 0, self.dim), dtype=np.float32), np.zeros((0, 0), dtype=bool)
        ids, mask = _padded([e.ids for e in self._tokenizer.encode_batch(list(texts))])
        states = self._session.run(["states"], {"input_ids": ids, "attention_mask": mask})[0]
        return np.ascontiguousarray(states, dtype=np.float32), mask.astype(bool)

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="personamem-encode")
        return self._pool


def _padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask of ``rows``, zero-padded to the longest."""
    width = max(len(row) for row in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.int64)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask
