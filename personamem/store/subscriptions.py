"""The tenants' webhooks kept in the store's database: add, list and delete, each within one tenant.

Every call names its tenant (``""``: the store's own users) and reads or deletes only that tenant's
rows, so a tenant cannot see or remove another's webhook even by its id. Inputs are checked here,
below every surface, so the SDK, REST and any later caller refuse the same things with the same
message.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from urllib.parse import urlsplit

from sqlalchemy import delete
from sqlmodel import col, select

from personamem.errors import InvalidInputError
from personamem.store.outbox import EVENTS
from personamem.store.sql import SqlCatalog
from personamem.store.tables import OutboxRow, WebhookRow

__all__ = ["MIN_SECRET", "Subscriptions", "check_events", "check_secret", "check_url"]

MIN_SECRET = 16
"""Fewest characters of a webhook secret given by the caller: a signature is no better than its secret."""
_MAX_URL = 2048


def check_url(url: object) -> str:
    """``url`` if it is an absolute http or https URL with a host.

    Raises:
        InvalidInputError: anything else.
    """
    parts = urlsplit(url) if isinstance(url, str) and len(url) <= _MAX_URL else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"a webhook url must be an http:// or https:// URL with a host, got {url!r}")
    return str(url)


def check_events(events: object) -> list[str]:
    """``events`` as a list of known event types without repeats, in the order given.

    Raises:
        InvalidInputError: not a non-empty list of event type names, or a name that is unknown.
    """
    if isinstance(events, str) or not isinstance(events, Sequence) or not events:
        raise InvalidInputError(f"events must be a non-empty list of event types, got {events!r}")
    unknown = [e for e in events if e not in EVENTS]
    if unknown:
        raise InvalidInputError(f"unknown webhook event(s) {unknown!r}; known: {', '.join(EVENTS)}")
    return list(dict.fromkeys(events))


def check_secret(secret: object) -> str:
    """``secret`` if it is a string of at least :data:`MIN_SECRET` characters; a fresh one for None.

    Raises:
        InvalidInputError: a secret that is not a string or too short to sign with.
    """
    if secret is None:
        return "whsec_" + secrets.token_urlsafe(32)
    if not isinstance(secret, str) or len(secret) < MIN_SECRET:
        raise InvalidInputError(f"a webhook secret must be a string of at least {MIN_SECRET} characters")
    return secret


class Subscriptions:
    """The ``webhooks`` table, one tenant at a time."""

    def __init__(self, catalog: SqlCatalog) -> None:
        self._catalog = catalog

    def add(self, tenant: str, url: object, events: object, secret: object = None) -> WebhookRow:
        """A new webhook of ``tenant``: events of these types are signed with ``secret`` and sent to ``url``.

        Raises:
            InvalidInputError: a bad url, event list or secret.
        """
        row = WebhookRow(
            webhook_id="wh_" + secrets.token_hex(8),
            tenant=tenant,
            url=check_url(url),
            events=check_events(events),
            secret=check_secret(secret),
            created_at=datetime.now(UTC).isoformat(),  # to the microsecond: listings sort by it
        )
        with self._catalog.session(write=True) as s:
            s.add(row)
        return row

    def list(self, tenant: str) -> list[WebhookRow]:
        """The tenant's webhooks, oldest first."""
        with self._catalog.session() as s:
            query = select(WebhookRow).where(col(WebhookRow.tenant) == tenant)
            return list(s.exec(query.order_by(col(WebhookRow.created_at), col(WebhookRow.webhook_id))))

    def delete(self, tenant: str, webhook_id: str) -> WebhookRow | None:
        """Delete the tenant's webhook and its undelivered events; None if the tenant has no such webhook."""
        with self._catalog.session(write=True) as s:
            row = s.get(WebhookRow, webhook_id)
            if row is None or row.tenant != tenant:
                return None
            s.execute(delete(OutboxRow).where(col(OutboxRow.webhook_id) == webhook_id))
            s.delete(row)
            return row
