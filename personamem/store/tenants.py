"""Tenants: many applications (or customers of one) over one store, whose user ids may be equal.

A tenant's user ``u`` is stored under the key ``SEPARATOR + tenant + SEPARATOR + u``; a user of the store
itself (no tenant) under ``u``. U+001F (the ASCII unit separator) is refused in user ids and tenant
names, so the mapping is one to one: no user id of one tenant, or of the bare store, can be spelled to
reach another tenant's key. We chose a key prefix over a ``tenant`` column because every table,
pseudonym, cache and ``forget`` already works per user key, so isolation follows from one function at
the store's boundary instead of a schema migration and a filter in every query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from personamem.errors import InvalidInputError

if TYPE_CHECKING:
    from personamem.records import Record

__all__ = ["SEPARATOR", "Tenancy", "check_tenant"]

SEPARATOR = "\x1f"
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_tenant(tenant: object) -> str:
    """``tenant`` if it is a valid tenant name: 1–64 letters, digits, ``_``, ``.``, ``-``.

    Raises:
        InvalidInputError: anything else (names appear in logs and key listings, so keep them plain).
    """
    if not isinstance(tenant, str) or not _TENANT.fullmatch(tenant):
        raise InvalidInputError(
            f"tenant must be 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit), "
            f"got {tenant!r}"
        )
    return tenant


class Tenancy:
    """Maps the user ids one view of the store sees to the keys the store keeps, and back."""

    def __init__(self, tenant: str | None = None) -> None:
        self.tenant = None if tenant is None else check_tenant(tenant)
        self._prefix = "" if tenant is None else f"{SEPARATOR}{tenant}{SEPARATOR}"

    def key(self, user_id: str) -> str:
        """The store key of ``user_id`` in this tenancy.

        Raises:
            InvalidInputError: the id contains U+001F, which would let it spell another tenancy's key.
        """
        if SEPARATOR in user_id:
            raise InvalidInputError(
                f"user_id must not contain U+001F (the tenant separator), got {user_id!r}"
            )
        return self._prefix + user_id

    def user(self, key: str) -> str | None:
        """The user id that ``key`` stands for in this tenancy, or None if it belongs to another tenancy."""
        if not self._prefix:
            return None if key.startswith(SEPARATOR) else key
        return key[len(self._prefix) :] if key.startswith(self._prefix) else None

    def inward(self, records: Sequence[Record]) -> list[Record]:
        """Records with their user ids mapped to store keys (each id checked, as :meth:`key` checks it)."""
        if self.tenant is None:
            for record in records:
                self.key(record.user_id)
            return list(records)
        return [r.model_copy(update={"user_id": self.key(r.user_id)}) for r in records]

    def outward(self, records: list[Record]) -> list[Record]:
        """Records with their store keys mapped back to this tenancy's user ids."""
        if self.tenant is None:
            return records
        return [r.model_copy(update={"user_id": self.user(r.user_id)}) for r in records]
