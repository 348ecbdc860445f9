"""Embed a benchmark corpus once: vectors cached on disk by encoder and text.

Encoding dominates the cost of evaluating a non-LLM method (LoCoMo's 4,124 turns take longer to embed
than to search 1,347 times), and the corpus does not change between seeds, methods or runs. The cache
key is the encoder's name plus the hash of each distinct text, so identical texts (PrefEval's shared
distractor turns) are embedded once and a renamed or re-rendered corpus never reuses stale vectors.
:func:`build_store` puts a benchmark's corpus in a real store through that cache, for the harness and
the trainers alike.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from personamem.datasets.benchmark import Benchmark
from personamem.encoder import Encoder
from personamem.user_cache import default_cache_dir, make_once

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.store import Store

__all__ = ["build_store", "corpus_vectors", "default_vector_cache", "save_entry"]


def default_vector_cache() -> Path:
    """Where the CLI keeps corpus vectors: ``eval-vectors`` in the user cache (see ``$PERSONAMEM_CACHE``)."""
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
    if cache_dir is None:
        unique = encoder.encode(distinct)
    else:
        entry = cache_dir / f"{digest.hexdigest()[:32]}.npy"
        unique = _embedded_once(entry, lambda: encoder.encode(distinct))
    row = {text: i for i, text in enumerate(distinct)}
    return unique[[row[text] for text in texts]]


def _embedded_once(path: Path, embed: Callable[[], np.ndarray]) -> np.ndarray:
    """The entry at ``path``, embedded first if absent, under its lock.

    Evaluations that start together on a fresh machine (a test suite's workers, two ``eval`` commands)
    each embedded the same corpus before; now one embeds it and the others wait, then read it.
    """
    make_once(path, lambda: save_entry(path, embed()), lock=path.with_suffix(".lock"))
    return np.load(path)


def save_entry(path: Path, vectors: np.ndarray) -> None:
    """Write a cache entry whole, through a partial file of this writer's own and an atomic rename.

    A crash mid-write leaves no truncated entry, and evaluations that embed the same corpus at once
    (sharing the user cache) never rename each other's partial file away.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, suffix=".partial.npy", delete=False) as partial:
        np.save(partial, vectors)
    Path(partial.name).replace(path)


def build_store(
    benchmark: Benchmark,
    path: Path,
    encoder: Encoder,
    *,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> Store:
    """A store at ``path`` holding the benchmark's records, embedded through the vector cache."""
    from personamem.store import Store

    store = Store.open(path, encoder=encoder)
    vectors = corpus_vectors(encoder, [record.text for record in benchmark.records], cache_dir)
    task = progress.add_task("ingest", total=len(benchmark.records)) if progress else None
    store.add_many(
        benchmark.records,
        vectors=vectors,
        progress=(lambda n: progress.advance(task, n)) if progress and task is not None else None,
    )
    return store
