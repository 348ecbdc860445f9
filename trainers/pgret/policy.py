"""The binary-action policy: pure functions of cosine scores, actions and item rewards.

State = a (query, record) pair; action = select (1) or skip (0), with π(select) = σ(logit) where the
logit is the pair's cosine (query tower's vector · the record's fixed vector) minus the mean cosine
of that query's sampled pairs, over τ. Reducing a top-k action to independent per-pair decisions is
what lets the policy gradient converge with few samples (the PG-Ret paper's argument). A skip earns
nothing; a select earns the pair's item reward.

Why the per-query centring: with a global threshold (a learned bias b in σ((s − b) / τ)), a judge
that calls most pairs irrelevant teaches the policy to select nothing. On LoCoMo the selected share
fell from 0.83 to 0 within ten steps, the tower lowered every cosine at once and validation got
worse. Centred logits cannot move all of a query's pairs together, so the only way to more reward
is to rank the rewarded records above the penalized ones, which is what retrieval needs.
"""

from __future__ import annotations

import torch

__all__ = ["binary_policy_loss", "query_logits"]


def query_logits(scores: torch.Tensor, queries: torch.Tensor, temperature: float) -> torch.Tensor:
    """Each pair's cosine minus its query's mean over the sampled pairs, over ``temperature``.

    Args:
        scores: cosine per pair, with gradients.
        queries: the index of each pair's query (0 .. n − 1).
        temperature: τ.
    """
    count = int(queries.max()) + 1 if queries.numel() else 0
    sums = torch.zeros(count, dtype=scores.dtype, device=scores.device).index_add(0, queries, scores)
    sizes = torch.zeros(count, dtype=scores.dtype, device=scores.device).index_add(
        0, queries, torch.ones_like(scores)
    )
    return (scores - (sums / sizes)[queries]) / temperature


def binary_policy_loss(logits: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor) -> torch.Tensor:
    """REINFORCE loss for sampled select/skip ``actions`` (1/0) on pairs with item ``rewards``.

    The return of a pair is its reward if selected, else 0; the baseline is the batch's mean return,
    which keeps the estimator unbiased and centres it. Minimizing the loss ascends expected reward.
    """
    log_pi = -torch.nn.functional.binary_cross_entropy_with_logits(logits, actions, reduction="none")
    returns = actions * rewards
    advantage = (returns - returns.mean()).detach()
    return -(advantage * log_pi).mean()
