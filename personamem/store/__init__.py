"""Durable per-user storage: SQL rows and vectors kept consistent."""

from personamem.store.cache import UserCache
from personamem.store.keys import ApiKey, KeyRing
from personamem.store.store import ConsistencyReport, Store

__all__ = ["ApiKey", "ConsistencyReport", "KeyRing", "Store", "UserCache"]
