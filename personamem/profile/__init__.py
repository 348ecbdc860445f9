"""Profile selection: which of a user's candidate records the LLM sees for a query, in what order.

The :class:`ProfileSelector` seam and its untrained selectors live here; the listwise LLM reranker in
:mod:`.listwise`, and PURPLE's inference (scorer, Plackett–Luce policy, checkpoints, selector) in
:mod:`.purple`, which imports torch and so is loaded only when a PURPLE checkpoint is used.
"""

from personamem.profile.base import (
    EarliestSelector,
    ProfileSelector,
    QueryVectorSelector,
    RandomSelector,
    RelevanceSelector,
)
from personamem.profile.listwise import ListwiseSelector

__all__ = [
    "EarliestSelector",
    "ListwiseSelector",
    "ProfileSelector",
    "QueryVectorSelector",
    "RandomSelector",
    "RelevanceSelector",
]
