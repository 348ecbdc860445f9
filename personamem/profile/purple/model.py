"""PURPLE's record scorer f_θ: a propensity in [0, 1] for each candidate record given the query.

Input are frozen encoder token states. The paper encodes with Contriever, which is not available
offline here; the store's MiniLM (all-MiniLM-L6-v2) token states stand in. Each record's tokens
cross-attend to the query's tokens, are mean-pooled into one vector per record, and a Transformer
encoder over the records (no positional encoding: the candidates are a set, so the scorer is
permutation-equivariant) lets each record's score depend on the others, e.g. to avoid redundancy.
An MLP maps each record to a logit and a sigmoid to the propensity.

With ``rank_prior`` > 0 the logit is a residual on the first stage's order: −s·log(1 + rank) plus the
MLP's output, whose last layer starts at zero, and the propensity is exp(logit − the best logit), in
(0, 1] (a new scorer's is (1 + rank)^−s). A new scorer then ranks exactly as the first stage did,
so training starts at the plain ranking it has to beat instead of below it (a random scorer's top K
held 0.2 of the gold records where hybrid's held 0.46).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from personamem.encoder import SentenceEncoder
from personamem.profile.purple.config import PurpleConfig
from personamem.profile.purple.states import RecordStateCache

__all__ = ["CandidateStates", "PurpleConfig", "RecordScorer", "collate", "encode_candidates", "state_cache"]


@dataclass(frozen=True)
class CandidateStates:
    """Frozen token states of one query and its candidate records: the scorer's input for one example."""

    query: torch.Tensor  # (query tokens, dim)
    query_mask: torch.Tensor  # (query tokens,) bool
    records: torch.Tensor  # (candidates, record tokens, dim)
    record_mask: torch.Tensor  # (candidates, record tokens) bool


def encode_candidates(
    encoder: SentenceEncoder,
    query: str,
    texts: Sequence[str],
    config: PurpleConfig,
    cache: RecordStateCache | None = None,
    query_vector: np.ndarray | None = None,
) -> CandidateStates:
    """Token states of the query and the candidates, cut to the configured lengths, kept in float16.

    float16 halves the memory of a training set's cached states; the scorer computes in float32.
    With a ``cache`` (built for the same encoder and ``max_record_tokens``), only records not seen
    before are encoded; without one, a cache for this call alone cuts the records the same way.
    A scorer on vectors takes ``query_vector`` where the caller has the query encoded already.
    """
    if not texts:
        raise ValueError("no candidate records to score")
    if cache is None:
        cache = state_cache(encoder, config, capacity=len(texts))
    elif (
        cache.encoder is not encoder
        or cache.max_tokens != config.max_record_tokens
        or cache.pooled != (config.inputs == "vectors")
    ):
        raise ValueError("the record state cache was built for another encoder, token cut or input")
    records, record_mask = cache.states(texts)
    if config.inputs == "vectors":  # the sentence vector as the query's one "token"
        found = encoder.encode([query])[0] if query_vector is None else query_vector
        vector = torch.from_numpy(np.asarray(found, dtype=np.float32)).view(1, -1).half()
        return CandidateStates(vector, torch.ones(1, dtype=torch.bool), records, record_mask)
    q = encoder.encode_tokens([query])
    return CandidateStates(
        query=q.states[0, : config.max_query_tokens].half(),
        query_mask=q.mask[0, : config.max_query_tokens].clone(),
        records=records,
        record_mask=record_mask,
    )


def state_cache(encoder: SentenceEncoder, config: PurpleConfig, capacity: int = 4096) -> RecordStateCache:
    """The record cache a scorer of ``config`` reads: token states, or sentence vectors."""
    return RecordStateCache(encoder, config.max_record_tokens, capacity, pooled=config.inputs == "vectors")


def collate(batch: Sequence[CandidateStates]) -> dict[str, torch.Tensor]:
    """Pad a batch of examples to common sizes; ``candidate_mask`` marks the real candidates."""
    size = len(batch)
    n = max(b.records.shape[0] for b in batch)
    t = max(b.records.shape[1] for b in batch)
    tq = max(b.query.shape[0] for b in batch)
    dim = batch[0].records.shape[-1]
    out = {
        "records": torch.zeros(size, n, t, dim),
        "record_mask": torch.zeros(size, n, t, dtype=torch.bool),
        "query": torch.zeros(size, tq, dim),
        "query_mask": torch.zeros(size, tq, dtype=torch.bool),
        "candidate_mask": torch.zeros(size, n, dtype=torch.bool),
    }
    for i, b in enumerate(batch):
        bn, bt = b.record_mask.shape
        out["records"][i, :bn, :bt] = b.records.float()
        out["record_mask"][i, :bn, :bt] = b.record_mask
        out["query"][i, : b.query.shape[0]] = b.query.float()
        out["query_mask"][i, : b.query.shape[0]] = b.query_mask
        out["candidate_mask"][i, :bn] = True
    return out


class RecordScorer(nn.Module):
    """f_θ: propensities ``(batch, candidates)`` from :func:`collate`'s tensors."""

    def __init__(self, config: PurpleConfig) -> None:
        super().__init__()
        self.config = config
        d = config.dim
        tokens = config.inputs == "tokens"
        self.cross = (
            nn.MultiheadAttention(d, config.heads, batch_first=True)
            if config.cross_attention and tokens
            else None
        )
        self.cross_norm = nn.LayerNorm(d) if config.cross_attention and tokens else None
        # vectors: r, q⊙r, |q − r|, cosine and log(1 + rank) of each record, projected to the width
        self.pair = None if tokens else nn.Sequential(nn.Linear(3 * d + 2, d), nn.GELU(), nn.LayerNorm(d))
        self.records = (
            nn.TransformerEncoder(
                nn.TransformerEncoderLayer(
                    d, config.heads, dim_feedforward=2 * d, dropout=config.dropout, batch_first=True
                ),
                num_layers=config.layers,
                enable_nested_tensor=False,
            )
            if config.record_transformer and config.layers > 0
            else None
        )
        self.head = nn.Sequential(
            nn.Linear(d, config.mlp_hidden),
            nn.GELU(),
            nn.Dropout(config.dropout),
            nn.Linear(config.mlp_hidden, 1),
        )
        self.prior_scale = nn.Parameter(torch.tensor(config.rank_prior)) if config.rank_prior > 0 else None
        if self.prior_scale is not None:
            last = self.head[-1]
            assert isinstance(last, nn.Linear)
            nn.init.zeros_(last.weight)
            nn.init.zeros_(last.bias)

    def forward(
        self,
        records: torch.Tensor,
        record_mask: torch.Tensor,
        query: torch.Tensor,
        query_mask: torch.Tensor,
        candidate_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Propensities in (0, 1); padded candidates get exactly 0."""
        size, n, t, d = records.shape
        rank = torch.arange(n, device=records.device, dtype=records.dtype)
        if self.pair is not None:
            r, q = records[:, :, 0], query[:, :1].expand(size, n, d)
            cosine = (q * r).sum(-1, keepdim=True)
            position = torch.log1p(rank)[None, :, None].expand(size, n, 1)
            pooled = self.pair(torch.cat([r, q * r, (q - r).abs(), cosine, position], dim=-1))
            return self._propensity(pooled, candidate_mask, rank)
        tokens = records.reshape(size * n, t, d)
        token_mask = record_mask.reshape(size * n, t)
        if self.cross is not None and self.cross_norm is not None:
            q = query.repeat_interleave(n, dim=0)
            q_pad = ~query_mask.repeat_interleave(n, dim=0)
            attended, _ = self.cross(tokens, q, q, key_padding_mask=q_pad, need_weights=False)
            tokens = self.cross_norm(tokens + attended)
        weights = token_mask.unsqueeze(-1).float()
        pooled = (tokens * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1.0)
        return self._propensity(pooled.reshape(size, n, d), candidate_mask, rank)

    def _propensity(
        self, pooled: torch.Tensor, candidate_mask: torch.Tensor, rank: torch.Tensor
    ) -> torch.Tensor:
        """One vector per record ``(batch, n, dim)`` → the record Transformer, the head, the prior."""
        if self.records is not None:
            pooled = self.records(pooled, src_key_padding_mask=~candidate_mask)
        logits = self.head(pooled).squeeze(-1)
        if self.prior_scale is None:
            return torch.sigmoid(logits) * candidate_mask
        # candidates come in the first stage's order, best first; exp(logit − max) rather than a
        # sigmoid: a sigmoid saturates at 1 for every record once the logits grow, and the policy
        # then forgets what it learned (it did so on the bandit test within 20 steps)
        logits = (logits - self.prior_scale * torch.log1p(rank)).masked_fill(~candidate_mask, -torch.inf)
        return torch.exp(logits - logits.max(dim=-1, keepdim=True).values) * candidate_mask
