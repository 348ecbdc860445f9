"""The PURPLE scorer's shape, apart from the scorer so that reading it (the CLI, configs) needs no torch."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PurpleConfig"]


class PurpleConfig(BaseModel):
    """The scorer's shape; saved beside each checkpoint so it can be rebuilt."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

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
