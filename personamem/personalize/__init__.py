"""Query personalization: turn a user's query into a query vector that reflects the user (PBR)."""

from personamem.personalize.anchor import PAnchor
from personamem.personalize.base import QueryPersonalizer
from personamem.personalize.expansion import EXPANSIONS, LLMExpansion
from personamem.personalize.pbr import PBR

__all__ = [
    "EXPANSIONS",
    "PBR",
    "LLMExpansion",
    "PAnchor",
    "QueryPersonalizer",
]
