"""The Plackett–Luce policy over ordered profiles of K records.

With positive weights f over N candidates and S = Σ f, a K-permutation P has probability

    π(P) = Π_k f(p_k) / (S − Σ_{j<k} f(p_j)),

i.e. records are drawn one after another without replacement, each in proportion to its weight
among those left. Sampling uses the Gumbel-top-k trick (the top K of log f + Gumbel noise are an
exact Plackett–Luce draw, in order), so a batch of profiles is one vectorized operation.
"""

from __future__ import annotations

import torch

__all__ = ["plackett_luce_log_prob", "plackett_luce_sample"]

_EPS = 1e-12  # sigmoid propensities can underflow to 0; log 0 would poison the gradient


def plackett_luce_log_prob(weights: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Exact log π(order) for each row.

    Args:
        weights: ``(..., N)`` non-negative weights f (candidates masked out carry weight 0).
        order: ``(..., K)`` candidate indices, best first, no repeats within a row.

    Returns:
        ``(...)`` log-probabilities, differentiable in ``weights``.
    """
    weights = weights.clamp_min(_EPS)
    chosen = weights.gather(-1, order)
    before = torch.cumsum(chosen, dim=-1) - chosen  # weight already drawn before each position
    remaining = (weights.sum(dim=-1, keepdim=True) - before).clamp_min(_EPS)
    return (chosen.log() - remaining.log()).sum(dim=-1)


def plackett_luce_sample(
    weights: torch.Tensor, k: int, samples: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``samples`` profiles of ``k`` candidates drawn from the policy, as ``(samples, k)`` indices.

    Args:
        weights: ``(N,)`` non-negative weights; zero-weight candidates are never drawn while others
            remain.
        k: profile length, at most the number of candidates with positive weight.
        samples: how many independent profiles.
        generator: for reproducible draws.
    """
    if weights.dim() != 1:
        raise ValueError(f"weights must be 1-D, got shape {tuple(weights.shape)}")
    available = int((weights > 0).sum())
    if not 1 <= k <= available:
        raise ValueError(f"k must be in 1..{available} (candidates with positive weight), got {k}")
    uniform = torch.rand((samples, weights.numel()), generator=generator, device=weights.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(_EPS, 1 - 1e-7)))
    keys = torch.where(
        weights > 0, weights.clamp_min(_EPS).log() + gumbel, torch.full_like(gumbel, -torch.inf)
    )
    return keys.topk(k, dim=-1).indices
