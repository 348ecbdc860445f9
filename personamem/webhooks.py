"""Signed webhooks: a tenant's subscriptions (``mem.webhooks``), and how a delivery is signed and verified.

A change to a tenant's data writes an event per subscribed webhook in its own transaction
(``store/outbox.py``); a background thread of each server process sends them
(``webhook_delivery.py``). Each delivery's body is compact JSON::

    {"id": ..., "type": "record.added", "tenant": "acme", "occurred_at": "...", "sent_at": 1700000000,
     "data": {"user_id": "alice", "record_id": "r1"}}

signed with the webhook's secret: ``X-PersonaMem-Signature: sha256=<hex HMAC-SHA256 of the raw
body>``. The body carries ``sent_at`` (also the ``X-PersonaMem-Timestamp`` header), so the time a
delivery was sent is signed with it and :func:`verify` refuses a replay older than its tolerance.
``id`` is the event's, the same on every retry: receivers de-duplicate by it (delivery is at least
once). Data holds ids, never a record's text.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from personamem.errors import InvalidInputError, WebhookSignatureError
from personamem.store import Store
from personamem.store.deliveries import Deliveries
from personamem.store.outbox import EVENTS
from personamem.store.subscriptions import Subscriptions
from personamem.store.tables import OutboxRow, WebhookRow

__all__ = [
    "EVENTS",
    "EVENT_ID_HEADER",
    "EVENT_TYPE_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "DeadLetter",
    "NewWebhook",
    "Webhook",
    "Webhooks",
    "event_body",
    "sign",
    "verify",
]

SIGNATURE_HEADER = "X-PersonaMem-Signature"
TIMESTAMP_HEADER = "X-PersonaMem-Timestamp"
EVENT_ID_HEADER = "X-PersonaMem-Event-Id"
EVENT_TYPE_HEADER = "X-PersonaMem-Event"
TOLERANCE_S = 300.0
"""How far from the receiver's clock a delivery's ``sent_at`` may be (five minutes, as Stripe's)."""


def sign(secret: str, body: bytes) -> str:
    """The ``X-PersonaMem-Signature`` of ``body``: ``sha256=`` and its hex HMAC-SHA256 with ``secret``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def event_body(
    event_id: str,
    type_: str,
    tenant: str | None,
    occurred_at: float,
    data: Mapping[str, Any],
    sent_at: int,
) -> bytes:
    """A delivery's body: compact JSON, ``occurred_at`` in ISO 8601 (UTC), ``sent_at`` in unix seconds."""
    event = {
        "id": event_id,
        "type": type_,
        "tenant": tenant or None,
        "occurred_at": datetime.fromtimestamp(occurred_at, UTC).isoformat(),
        "sent_at": sent_at,
        "data": dict(data),
    }
    return json.dumps(event, separators=(",", ":")).encode("utf-8")


def verify(
    secret: str,
    body: bytes | str,
    headers: Mapping[str, str],
    tolerance_s: float = TOLERANCE_S,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """The event of a webhook delivery whose signature and time check out.

    Args:
        secret: the webhook's secret, as given when it was added.
        body: the request's raw body, exactly as received (before any JSON parsing).
        headers: the request's headers (any mapping; names are matched without case).
        tolerance_s: how far ``sent_at`` may be from ``now``; a replay of an old delivery fails.
        now: the receiver's clock (default: now).

    Raises:
        WebhookSignatureError: no signature, one that does not match the body and secret, a
            timestamp header that is not the body's ``sent_at``, or a ``sent_at`` outside the tolerance.
    """
    raw = body.encode("utf-8") if isinstance(body, str) else bytes(body)
    given = {name.lower(): value for name, value in headers.items()}
    signature = given.get(SIGNATURE_HEADER.lower())
    if not signature:
        raise WebhookSignatureError(f"no {SIGNATURE_HEADER} header")
    if not hmac.compare_digest(signature.strip(), sign(secret, raw)):
        raise WebhookSignatureError("the signature does not match the body and secret")
    event = json.loads(raw)  # signed by us: well-formed
    sent_at = event.get("sent_at")
    if given.get(TIMESTAMP_HEADER.lower(), "").strip() != str(sent_at):
        raise WebhookSignatureError(f"the {TIMESTAMP_HEADER} header is not the signed body's sent_at")
    skew = abs((time.time() if now is None else now) - float(sent_at))
    if skew > tolerance_s:
        raise WebhookSignatureError(f"sent {skew:.0f} s from now, more than the {tolerance_s:g} s tolerated")
    return dict(event)


class Webhook(BaseModel):
    """A webhook as listed: never its secret, only its last four characters as a hint."""

    webhook_id: str
    url: str
    events: list[str]
    secret_hint: str
    created_at: str

    @classmethod
    def of(cls, row: WebhookRow) -> Webhook:
        """The listing of a stored webhook."""
        return cls(
            webhook_id=row.webhook_id,
            url=row.url,
            events=list(row.events),
            secret_hint="…" + row.secret[-4:],
            created_at=row.created_at,
        )


class NewWebhook(Webhook):
    """A webhook just added, with its secret: shown this once (keep it where the receiver reads it)."""

    secret: str


class DeadLetter(BaseModel):
    """A delivery that ran out of attempts: ids and what the last attempt met, never a record's text."""

    event_id: str
    webhook_id: str
    type: str
    occurred_at: str
    attempts: int
    last_error: str | None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: OutboxRow) -> DeadLetter:
        """The dead-letter listing of an outbox row."""
        occurred = datetime.fromtimestamp(row.occurred_at, UTC).isoformat()
        return cls(
            event_id=row.event_id,
            webhook_id=row.webhook_id,
            type=row.type,
            occurred_at=occurred,
            attempts=row.attempts,
            last_error=row.last_error,
            data=dict(row.data),
        )


class Webhooks:
    """One tenant's webhooks and dead letters (``mem.webhooks``; ``mem.tenant(name).webhooks``).

    The whole store's view (no tenant) has the webhooks of the store's own users; a tenant's view
    those of its tenant, and events of its users only ever go to them.
    """

    def __init__(self, store: Store) -> None:
        self._tenant = store.tenant or ""
        self._subscriptions = Subscriptions(store.catalog)
        self._deliveries = Deliveries(store.catalog)

    def add(self, url: str, events: list[str], secret: str | None = None) -> NewWebhook:
        """Send events of these types to ``url``, signed with ``secret`` (None: a fresh one, returned).

        The secret is stored as given, since every delivery is signed with it; it is never listed.

        Raises:
            InvalidInputError: a url that is not http(s), an unknown event type (see
                :data:`EVENTS`), or a secret shorter than 16 characters.
        """
        row = self._subscriptions.add(self._tenant, url, events, secret)
        return NewWebhook(**Webhook.of(row).model_dump(), secret=row.secret)

    def delete(self, webhook_id: str) -> Webhook:
        """Delete one of this tenant's webhooks, with its undelivered events and dead letters.

        Raises:
            InvalidInputError: this tenant has no webhook ``webhook_id``.
        """
        row = self._subscriptions.delete(self._tenant, webhook_id)
        if row is None:
            raise InvalidInputError(f"this tenant has no webhook {webhook_id!r}")
        return Webhook.of(row)

    def dead(self, limit: int = 100) -> list[DeadLetter]:
        """This tenant's deliveries that ran out of attempts, newest first."""
        return [DeadLetter.of(row) for row in self._deliveries.dead(self._tenant, limit)]

    def retry(self, event_id: str) -> int:
        """Queue an event's dead deliveries again with fresh attempts; how many.

        Raises:
            InvalidInputError: this tenant has no dead letter of that event.
        """
        return self._found(self._deliveries.retry(self._tenant, event_id), event_id)

    def discard(self, event_id: str) -> int:
        """Delete an event's dead deliveries; how many.

        Raises:
            InvalidInputError: this tenant has no dead letter of that event.
        """
        return self._found(self._deliveries.discard(self._tenant, event_id), event_id)

    def pending(self) -> int:
        """This tenant's deliveries not yet made (waiting, or between retries)."""
        return self._deliveries.pending(self._tenant)

    @staticmethod
    def _found(count: int, event_id: str) -> int:
        if not count:
            raise InvalidInputError(f"this tenant has no dead letter of event {event_id!r}")
        return count

    # last: below it, ``list`` in an annotation would name this method, not the builtin
    def list(self) -> list[Webhook]:
        """This tenant's webhooks, oldest first (without their secrets)."""
        return [Webhook.of(row) for row in self._subscriptions.list(self._tenant)]
