"""PURPLE behind the :class:`~personamem.profile.ProfileSelector` seam: top K by learned propensity."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from personamem.encoder import SentenceEncoder
from personamem.profile.purple.checkpoint import load_checkpoint
from personamem.profile.purple.model import RecordScorer, collate, encode_candidates, state_cache
from personamem.records import Record
from personamem.retrieval.base import Hit, ranked

__all__ = ["PurpleSelector"]


class PurpleSelector:
    """Orders candidates by the scorer's propensity and keeps the top ``k`` (the paper's inference).

    A user's records come back as candidates for many queries, so their token states are cached
    (``record_cache`` entries; 0 turns the cache off) and a rerank mostly encodes just the query.
    """

    def __init__(self, scorer: RecordScorer, encoder: SentenceEncoder, *, record_cache: int = 4096) -> None:
        self.scorer = scorer.eval()
        self.encoder = encoder
        self.cache = state_cache(encoder, scorer.config, record_cache) if record_cache else None

    @classmethod
    def load(
        cls, folder: str | Path, encoder: SentenceEncoder, *, record_cache: int = 4096
    ) -> PurpleSelector:
        """A selector from a checkpoint folder trained on ``encoder``'s token states."""
        scorer, _ = load_checkpoint(Path(folder), encoder=encoder.name)
        return cls(scorer, encoder, record_cache=record_cache)

    def propensities(
        self, query: str, candidates: Sequence[Record], vector: np.ndarray | None = None
    ) -> list[float]:
        """f_θ for each candidate, in the candidates' order (``vector``: the query, encoded already)."""
        states = encode_candidates(
            self.encoder, query, [r.text for r in candidates], self.scorer.config, self.cache, vector
        )
        device = next(self.scorer.parameters()).device
        with torch.inference_mode():
            batch = {k: v.to(device) for k, v in collate([states]).items()}
            return self.scorer(**batch)[0].float().cpu().tolist()

    def select(self, user_id: str, query: str, candidates: Sequence[Record], k: int) -> list[Hit]:
        """The top ``k`` candidates by propensity, best first."""
        return self.select_with_vector(user_id, query, None, candidates, k)

    def select_with_vector(
        self, user_id: str, query: str, vector: np.ndarray | None, candidates: Sequence[Record], k: int
    ) -> list[Hit]:
        """As :meth:`select`; a scorer on vectors reuses the first stage's query ``vector``."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if not candidates:
            return []
        scores = self.propensities(query, candidates, vector)
        order = sorted(range(len(candidates)), key=lambda i: -scores[i])[:k]
        return ranked([(candidates[i], scores[i]) for i in order])
