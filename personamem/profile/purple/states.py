"""Frozen token states of records, cached by text: a record's states do not depend on the query.

Reranking a user's candidates for a new query then only encodes the query (and any record not seen
before); in training, the many questions of one LoCoMo conversation share its turns as candidates.
Entries are kept in float16 and cut to the real tokens, least recently used first out.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence

import torch

from personamem.encoder import SentenceEncoder

__all__ = ["RecordStateCache"]


class RecordStateCache:
    """An LRU map from a record's text to its first ``max_tokens`` token states under one encoder.

    Thread-safe; ``capacity`` bounds the entries (a 40-token record takes ~30 KB, so the default
    4,096 entries stay near 120 MB for chat-length records). ``pooled`` keeps the encoder's sentence
    vector instead, as one row (a scorer on vectors, ``inputs = "vectors"``).
    """

    def __init__(
        self, encoder: SentenceEncoder, max_tokens: int, capacity: int = 4096, *, pooled: bool = False
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.encoder = encoder
        self.max_tokens = max_tokens
        self.pooled = pooled
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def states(self, texts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(len(texts), tokens, dim)`` float16 states and their bool mask, padded to the longest."""
        keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
        with self._lock:
            found = {k: self._entries[k] for k in keys if k in self._entries}
            for k in found:
                self._entries.move_to_end(k)
            missing = list(dict.fromkeys(k for k in keys if k not in found))
            self.hits += len(keys) - sum(k not in found for k in keys)
            self.misses += len(missing)
        if missing:
            text_of = dict(zip(keys, texts, strict=True))
            if self.pooled:
                vectors = torch.from_numpy(self.encoder.encode([text_of[k] for k in missing])).half()
                found.update((k, vectors[i : i + 1]) for i, k in enumerate(missing))
            else:
                encoded = self.encoder.encode_tokens([text_of[k] for k in missing])
                for i, k in enumerate(missing):
                    n = min(int(encoded.mask[i].sum()), self.max_tokens)
                    found[k] = encoded.states[i, :n].half()
            with self._lock:
                for k in missing:
                    self._entries[k] = found[k]
                while len(self._entries) > self.capacity:
                    self._entries.popitem(last=False)
        rows = [found[k] for k in keys]
        longest = max(r.shape[0] for r in rows)
        states = torch.zeros(len(rows), longest, rows[0].shape[-1], dtype=torch.float16)
        mask = torch.zeros(len(rows), longest, dtype=torch.bool)
        for i, row in enumerate(rows):
            states[i, : row.shape[0]] = row
            mask[i, : row.shape[0]] = True
        return states, mask
