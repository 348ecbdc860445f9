"""Keyed pseudonyms: the only names the vector index ever sees for users and records.

Names are HMAC-SHA256 under a random per-store key kept in SQL. An unkeyed hash could be confirmed
by anyone holding the vector files and a candidate user id; a keyed one cannot without the store's
SQL database, which is also where every readable value lives. Stores written before keys existed
used unkeyed BLAKE2b names; :func:`legacy_collection` names those so opening can re-key them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

__all__ = ["COLLECTION_PREFIX", "Pseudonyms", "legacy_collection", "new_key"]

COLLECTION_PREFIX = "pm-"


def new_key() -> str:
    """A fresh 256-bit key, hex-encoded for the ``store_info`` table."""
    return secrets.token_hex(32)


class Pseudonyms:
    """Collection names, vector ids and history keys from user and record ids under one store's key."""

    def __init__(self, key: str) -> None:
        self._key = bytes.fromhex(key)

    def _digest(self, *parts: str) -> str:
        message = "\x00".join(parts).encode("utf-8")
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:32]

    def collection(self, user_id: str) -> str:
        """A Chroma-legal, fixed-length name for the user's collection ([a-zA-Z0-9._-] only)."""
        return COLLECTION_PREFIX + self._digest("collection", user_id)

    def vector_id(self, user_id: str, record_id: str) -> str:
        """The id of a record's vector; distinct per user, so equal record ids never collide."""
        return self._digest("vector", user_id, record_id)

    def telemetry(self, kind: str, value: str) -> str:
        """What a trace may say of a user or tenant: stable per store, and no dictionary reverses it."""
        return self._digest("telemetry", kind, value)[:16]

    def history(self, user_id: str, record_id: str) -> str:
        """The key of a record's events: unlike the vector id, it outlives the record's erasure."""
        return self._digest("history", user_id, record_id)


def legacy_collection(user_id: str) -> str:
    """The unkeyed collection name that stores written before per-store keys used."""
    return COLLECTION_PREFIX + hashlib.blake2b(user_id.encode("utf-8"), digest_size=16).hexdigest()
