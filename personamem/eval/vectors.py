"""Embed a benchmark corpus once: vectors cached on disk by encoder and text.

Encoding dominates the cost of evaluating a non-LLM method (LoCoMo's 4,124 turns take longer to embed
than to search 1,347 times), and the corpus does not change between seeds, methods or runs. The cache
key is the encoder's name plus the hash of each distinct text, so identical texts (PrefEval's shared
distractor turns) are embedded once and a renamed or re-rendered corpus never reuses stale vectors.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from personamem.encoder import Encoder

__all__ = ["corpus_vectors", "default_vector_cache"]


def default_vector_cache() -> Path:
    """Where the CLI keeps corpus vectors: ``eval-vectors`` in the user cache (see ``$PERSONAMEM_CACHE``)."""
    from personamem.llm.packaged import default_cache_dir

    return default_cache_dir() / "eval-vectors"


def corpus_vectors(encoder: Encoder, texts: Sequence[str], cache_dir: Path | None) -> np.ndarray:
    """One unit vector per text, in order; read from ``cache_dir`` when this exact corpus was seen.

    Args:
        encoder: the store's encoder (its ``name`` is part of the key).
        texts: the corpus, duplicates allowed.
        cache_dir: folder for ``<key>.npy`` files; None disables caching.
    """
    distinct = list(dict.fromkeys(texts))
    digest = hashlib.sha256(encoder.name.encode())
    for text in distinct:
        digest.update(hashlib.sha256(text.encode()).digest())
    path = cache_dir / f"{digest.hexdigest()[:32]}.npy" if cache_dir is not None else None
    if path is not None and path.exists():
        unique = np.load(path)
    else:
        unique = encoder.encode(distinct)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial.npy")
            np.save(partial, unique)
            partial.replace(path)  # a crash mid-write must not leave a truncated cache entry
    row = {text: i for i, text in enumerate(distinct)}
    return unique[[row[text] for text in texts]]
