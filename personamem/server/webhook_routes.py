"""The REST routes of a tenant's webhooks and dead letters (admin keys only), under ``/v1/webhooks``.

Not :class:`~personamem.contract.MemoryApi` operations (as the keys' routes are not): each handler
calls its tenant's ``webhooks`` (:class:`~personamem.webhooks.Webhooks`), so a tenant lists,
deletes and retries its own only, and an id of another tenant's is a 404 like an unknown one.
(No ``from __future__ import annotations``: FastAPI reads the handlers' annotations.)
"""

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from personamem.errors import InvalidInputError
from personamem.server.answers import answer, or_404
from personamem.server.auth import Admin
from personamem.webhooks import DeadLetter, NewWebhook, Webhook

__all__ = ["webhooks_router"]


class WebhookIn(BaseModel):
    """``POST /v1/webhooks``: where to send which events, and the secret that signs them."""

    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="An http:// or https:// URL that takes a POST per event.")
    events: list[str] = Field(description="Event types, e.g. record.added, user.forgotten.")
    secret: str | None = Field(default=None, description="16 characters or more; null: a fresh one.")


class WebhooksOut(BaseModel):
    """``GET /v1/webhooks``: the tenant's webhooks, oldest first (no secrets)."""

    webhooks: list[Webhook]


class DeadLettersOut(BaseModel):
    """``GET /v1/webhooks/dead``: deliveries that ran out of attempts, newest first (ids only)."""

    dead: list[DeadLetter]


class Requeued(BaseModel):
    """``POST /v1/webhooks/dead/{event_id}/retry`` and ``DELETE`` of a dead letter: how many deliveries."""

    event_id: str
    count: int


webhooks_router = APIRouter(tags=["webhooks"])
"""The tenant's webhooks (admin keys only)."""


@webhooks_router.post("/v1/webhooks", status_code=201, response_model=NewWebhook)
def add_webhook(body: WebhookIn, tenant: Admin) -> Response:
    """Send the tenant's events of these types to ``url``, signed; the secret is shown this once."""
    return answer(tenant.webhooks.add(body.url, body.events, body.secret), 201)


@webhooks_router.get("/v1/webhooks", response_model=WebhooksOut)
def list_webhooks(tenant: Admin) -> Response:
    """The tenant's webhooks: ids, urls, events and the last characters of each secret."""
    return answer(WebhooksOut(webhooks=tenant.webhooks.list()))


@webhooks_router.get("/v1/webhooks/dead", response_model=DeadLettersOut)
def dead_letters(tenant: Admin, limit: int = 100) -> Response:
    """The tenant's deliveries that ran out of attempts, newest first (ids and the last error)."""
    if not 1 <= limit <= 10_000:
        raise InvalidInputError(f"limit must be 1 to 10000, got {limit}")
    return answer(DeadLettersOut(dead=tenant.webhooks.dead(limit)))


@webhooks_router.post("/v1/webhooks/dead/{event_id}/retry", response_model=Requeued)
def retry_dead_letter(event_id: str, tenant: Admin) -> Response:
    """Queue an event's dead deliveries again, with fresh attempts; 404 if the tenant has none."""
    count = or_404(lambda: tenant.webhooks.retry(event_id))
    return answer(Requeued(event_id=event_id, count=count))


@webhooks_router.delete("/v1/webhooks/dead/{event_id}", response_model=Requeued)
def discard_dead_letter(event_id: str, tenant: Admin) -> Response:
    """Delete an event's dead deliveries; 404 if the tenant has none."""
    count = or_404(lambda: tenant.webhooks.discard(event_id))
    return answer(Requeued(event_id=event_id, count=count))


@webhooks_router.delete("/v1/webhooks/{webhook_id}", response_model=Webhook)
def delete_webhook(webhook_id: str, tenant: Admin) -> Response:
    """Delete one of the tenant's webhooks with its undelivered events; 404 if not the tenant's."""
    return answer(or_404(lambda: tenant.webhooks.delete(webhook_id)))
