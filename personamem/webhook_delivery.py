"""The deliverer: a background thread that sends the outbox's events to their webhooks, signed.

Every ``personamem serve`` process runs one (started and stopped with the app, like improve's),
over every tenant's outbox; leases on the rows (``store/deliveries.py``) keep two deliverers, in any
process or machine, from sending one row at once. Each attempt is a POST of the event's body
(``webhooks.event_body``), signed with a fresh ``sent_at``. A 2xx deletes the row; anything else,
a timeout or a refused connection counts an attempt and the row waits ``backoff_s`` doubling up to
:data:`MAX_BACKOFF_S`, with jitter, so the retries of many rows do not arrive together. After
``attempts`` failures the row is a dead letter. A webhook that just failed is not tried again in
this process until its retry is due: a receiver that is down costs one attempt per backoff, not
one per waiting event. The rows that waited behind it meanwhile are not left to start a schedule
each: a row that fails when it has been queued twice as long as the whole schedule (at least
:data:`MAX_BACKOFF_S`) is dead at once.

Delivery is at least once: a process killed after a receiver took an event but before the row was
deleted sends it again once the lease runs out. Receivers de-duplicate by the event id.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from importlib.metadata import version
from typing import TYPE_CHECKING

import httpx

from personamem.settings import settings
from personamem.store.deliveries import Deliveries, Delivery
from personamem.store.sql import SqlCatalog
from personamem.webhooks import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    event_body,
    sign,
)

if TYPE_CHECKING:
    from personamem.memory import PersonaMem

__all__ = ["ATTEMPTS", "BACKOFF_S", "MAX_BACKOFF_S", "POLL_S", "TIMEOUT_S", "Deliverer", "from_settings"]

log = logging.getLogger("personamem.webhooks")

ATTEMPTS = 16
"""Attempts before a delivery is dead: with the default backoff, about an hour of a receiver's outage."""
BACKOFF_S = 1.0
"""Wait after the first failed attempt; each further failure doubles it."""
MAX_BACKOFF_S = 600.0
"""The longest wait between two attempts (ten minutes)."""
TIMEOUT_S = 5.0
"""Seconds a receiver has to answer one attempt."""
POLL_S = 0.5
"""How often an idle deliverer looks for due rows (written by any process)."""


class Deliverer:
    """Sends due outbox rows until closed: :meth:`start` for a thread, :meth:`deliver_due` for one pass."""

    def __init__(
        self,
        catalog: SqlCatalog,
        *,
        attempts: int = ATTEMPTS,
        backoff_s: float = BACKOFF_S,
        timeout_s: float = TIMEOUT_S,
        poll_s: float = POLL_S,
    ) -> None:
        self._deliveries = Deliveries(catalog)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.poll_s = poll_s
        # a claim outlives the attempt (connect, write, read each get timeout_s) with room to settle it
        self.lease_s = 3 * timeout_s + 5.0
        # twice what ``attempts`` failures wait at most (room for timeouts and polls): a row queued
        # longer has waited its schedule out. Never under the longest backoff, so a short schedule
        # (seconds, in tests) does not kill rows that merely queued behind a busy deliverer
        waits = sum(min(MAX_BACKOFF_S, backoff_s * 2**k) for k in range(attempts - 1))
        self.schedule_s = max(MAX_BACKOFF_S, 2 * waits)
        agent = {"User-Agent": f"personamem-webhooks/{version('personamem')}"}
        self._http = httpx.Client(timeout=timeout_s, follow_redirects=False, headers=agent)
        self._down: dict[str, float] = {}  # webhook id -> when its failed row is due again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Deliver from a daemon thread until :meth:`close`."""
        self._thread = threading.Thread(target=self._run, name="personamem-webhooks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.deliver_due()
            except Exception as error:  # the store may be unreachable for a while: rows wait in it
                log.warning("webhook delivery failed (%s); retrying in %g s", error, self.poll_s)
            self._stop.wait(self.poll_s)

    def deliver_due(self, limit: int = 1000) -> int:
        """Send the rows due now (up to ``limit``), one at a time; return how many receivers took."""
        delivered = 0
        for _ in range(limit):
            if self._stop.is_set():
                break
            now = time.time()
            self._down = {hook: due for hook, due in self._down.items() if due > now}
            delivery = self._deliveries.claim(self.lease_s, skip=self._down)
            if delivery is None:
                break
            error = self._post(delivery)
            if error is None:
                self._deliveries.delivered(delivery)
                delivered += 1
                continue
            tries, now = delivery.attempts + 1, time.time()
            spent = tries >= self.attempts or now - delivery.queued_at > self.schedule_s
            retry_at = None if spent else now + self._backoff(tries)
            self._deliveries.failed(delivery, error, retry_at)
            if retry_at is not None:
                self._down[delivery.webhook_id] = retry_at
            log.info("webhook %s: event %s attempt %d failed: %s", delivery.webhook_id, delivery.event_id,
                     tries, error)  # fmt: skip
        return delivered

    def _backoff(self, tries: int) -> float:
        """Seconds before the next attempt after ``tries`` failures: doubling, capped, 50-100 % of it."""
        delay = min(MAX_BACKOFF_S, self.backoff_s * 2 ** (tries - 1))
        return delay * (0.5 + random.random() / 2)

    def _post(self, delivery: Delivery) -> str | None:
        """One attempt; None when the receiver answered 2xx, else what went wrong (no reply text)."""
        sent_at = int(time.time())
        body = event_body(
            delivery.event_id, delivery.type, delivery.tenant, delivery.occurred_at, delivery.data, sent_at
        )
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign(delivery.secret, body),
            TIMESTAMP_HEADER: str(sent_at),
            EVENT_ID_HEADER: delivery.event_id,
            EVENT_TYPE_HEADER: delivery.type,
        }
        try:
            answer = self._http.post(delivery.url, content=body, headers=headers)
        except httpx.HTTPError as error:
            return f"{type(error).__name__}: {error}"
        return None if answer.is_success else f"HTTP {answer.status_code}"

    def close(self) -> None:
        """Stop delivering; waits for an attempt in progress (at most the timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._http.close()


def from_settings(mem: PersonaMem) -> Deliverer:
    """The deliverer a server process runs over ``mem``'s store, as the settings say.

    ``PERSONAMEM_WEBHOOK_ATTEMPTS``, ``PERSONAMEM_WEBHOOK_BACKOFF_S`` and ``PERSONAMEM_WEBHOOK_TIMEOUT_S``.
    """
    env = settings()
    return Deliverer(
        mem.store.catalog,
        attempts=env.webhook_attempts or ATTEMPTS,
        backoff_s=BACKOFF_S if env.webhook_backoff_s is None else env.webhook_backoff_s,
        timeout_s=env.webhook_timeout_s or TIMEOUT_S,
    )
