"""The PURPLE scorer's shape, apart from the scorer so that reading it (the CLI, configs) needs no torch."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PurpleConfig", "ScorerInputs"]

ScorerInputs = Literal["tokens", "vectors"]


class PurpleConfig(BaseModel):
    """The scorer's shape; saved beside each checkpoint so it can be rebuilt."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    inputs: ScorerInputs = "tokens"
    """tokens: each record's token states attend to the query's (the paper's); vectors: the encoder's
    sentence vectors of query and records, the ones the store already keeps, combined per record
    (r, q⊙r, |q − r|, cosine, rank) before the record Transformer: a fraction of the cost at query
    time, with no token-level matching."""
    dim: int = Field(default=384, ge=1)
    """Width of the encoder's token states (384 for MiniLM)."""
    heads: int = Field(default=4, ge=1)
    """Attention heads in the cross-attention and the record Transformer."""
    layers: int = Field(default=2, ge=0)
    """Record Transformer layers. The paper uses 12; 2 trains in minutes on a CPU."""
    mlp_hidden: int = Field(default=256, ge=1)
    """Hidden width of the propensity MLP."""
    dropout: float = Field(default=0.1, ge=0.0, lt=1.0)
    """Dropout in the record Transformer and the MLP."""
    cross_attention: bool = True
    """Records attend to the query's tokens (off: an ablation)."""
    record_transformer: bool = True
    """Records attend to each other (off: an ablation)."""
    max_record_tokens: int = Field(default=128, ge=2)
    """Token states kept per record (the rest is cut, like the encoder does at 256)."""
    max_query_tokens: int = Field(default=64, ge=2)
    """Token states kept for the query."""
    rank_prior: float = Field(default=1.0, ge=0.0)
    """Start at the first stage: each record's logit gets −s·log(1 + its rank among the candidates), s
    learned from this value, and the head's last layer starts at zero, so an untrained scorer keeps the
    first stage's order (its top K is hybrid's top K); the propensity is then exp(logit − the best
    logit). 0: no prior and a sigmoid propensity, the paper's scorer."""
