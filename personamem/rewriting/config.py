"""How one rewriting run is configured: the strategy, the number of demonstrations and the sampling.

Kept apart from the rewriter so that a run's settings can be logged, compared and validated on their
own (a negative shot count fails when the config is built, not halfway through a batch).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["RewriteConfig", "Strategy"]

Strategy: TypeAlias = Literal["none", "all", "str", "sar"]


class RewriteConfig(BaseModel):
    """Settings of one rewriting run.

    Attributes:
        strategy: how the PTKB is used. ``"none"``: rewrite from the conversation alone. ``"all"``:
            rewrite with every statement. ``"str"`` (select then reformulate): one call selects the
            relevant statements, a second rewrites with only those. ``"sar"`` (select and reformulate):
            one call returns both.
        shots: gold demonstrations from other topics put before each turn (0 = zero-shot).
        temperature: sampling temperature. The default 0.7 samples, so runs with different seeds
            differ: the point is to measure how much rewrites vary between runs, as the reproduction
            this follows does. Use 0.0 for greedy, seed-independent output.
        max_tokens: most tokens generated per answer; a JSON answer cut short here is parsed leniently.
        with_response: SAR only: also ask for a short answer to the rewritten query (costs tokens).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: Strategy = "sar"
    shots: int = Field(default=0, ge=0)
    temperature: float = Field(default=0.7, ge=0.0)
    max_tokens: int = Field(default=128, ge=1)
    with_response: bool = False

    @model_validator(mode="after")
    def _response_needs_sar(self) -> RewriteConfig:
        if self.with_response and self.strategy != "sar":
            raise ValueError("with_response is only asked for in the 'sar' strategy's single call")
        return self
