"""PG-Ret's item-wise reward, and its noisy-oracle correction for a judge that errs.

Kept free of a torch import (the command line reads the reward tables through the config); the
functions take tensors or floats alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["ItemReward", "corrected_relevance"]


@dataclass(frozen=True)
class ItemReward:
    """Reward of selecting a record, by whether it is relevant and whether the base model found it.

    Attributes:
        novel: relevant and outside the base model's top-L.
        known: relevant but already in the base top-L.
        irrelevant: not relevant (the penalty, negative).
    """

    novel: float = 1.0
    known: float = 0.0
    irrelevant: float = -1.0

    def __call__(self, relevance: Any, novel: Any) -> Any:
        """Expected reward, elementwise over tensors or floats.

        ``relevance`` is a 0/1 label or a corrected estimate; ``novel`` is 1 or 0.
        """
        relevant = novel * self.novel + (1 - novel) * self.known
        return relevance * relevant + (1 - relevance) * self.irrelevant


def corrected_relevance(label: Any, tpr: float, fpr: float) -> Any:
    """An unbiased estimate of true relevance from a judge's noisy 0/1 label.

    With E[label] = fpr + (tpr − fpr) · relevant, (label − fpr) / (tpr − fpr) has expectation
    ``relevant`` (Natarajan et al., 2013): the noisy-oracle reward is unbiased for a judge whose
    error rates are known (here, measured on the training users' gold). Values leave [0, 1]; that is
    what makes the estimate unbiased.

    Raises:
        ValueError: ``tpr <= fpr`` (a judge no better than chance carries no signal to correct).
    """
    if tpr <= fpr:
        raise ValueError(
            f"the judge's true positive rate {tpr:.3f} must exceed its false positive rate {fpr:.3f}"
        )
    return (label - fpr) / (tpr - fpr)
