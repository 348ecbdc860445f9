"""Query personalization: turn a user's query into a query vector that reflects the user (PBR)."""

from personamem.personalize.base import PersonalizedRetriever, QueryPersonalizer

__all__ = ["PersonalizedRetriever", "QueryPersonalizer"]
