"""Webhooks over a real ``personamem serve``: none lost across a failing receiver, its restart and a SIGKILL.

A real receiver (``tests/webhook_receiver.py``, an HTTP server in this process) verifies every
delivery's signature. It answers the first deliveries 500, is stopped and started again on the same
port while events are written, and then takes one delivery and stalls while the server is killed
with SIGKILL, events still waiting in the outbox; a second server on the same store sends the rest.
In the end every event the acknowledged changes produced arrived (by event id), each signature
verified, tenants' events reached their own webhooks only, and the one event taken before the kill
came again with the same id (at least once: receivers de-duplicate by it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from personamem.store import KeyRing
from personamem.store.deliveries import Deliveries
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import free_port, personamem_serve
from tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.server, pytest.mark.enable_socket, pytest.mark.slow]

SECRETS = {"/acme": "whsec_acme-0123456789abcdef", "/beta": "whsec_beta-0123456789abcdef"}


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(SECRETS, port=free_port())
    found.start()
    yield found
    found.stop()


def _http(url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60)


def _seen(receiver: Receiver, path: str) -> set[tuple[Any, ...]]:
    """What the events taken at ``path`` said: (tenant, type, user, record), redeliveries once."""
    return {
        (e["tenant"], e["type"], e["data"]["user_id"], e["data"].get("record_id"))
        for e in receiver.events(path)
    }


def test_no_event_is_lost_across_a_failing_receiver_its_restart_and_a_server_sigkill(
    tmp_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERSONAMEM_WEBHOOK_BACKOFF_S", "0.1")  # seconds, not the minutes of production
    monkeypatch.setenv("PERSONAMEM_WEBHOOK_ATTEMPTS", "100")
    monkeypatch.setenv("PERSONAMEM_WEBHOOK_TIMEOUT_S", "1")  # a claim's lease: 3 × 1 + 5 s
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    keys = KeyRing(catalog)
    acme_admin, acme_writer = keys.create("acme", scope="admin")[0], keys.create("acme", scope="write")[0]
    beta_admin = keys.create("beta", scope="admin")[0]
    outbox = Deliveries(catalog)
    expected: set[tuple[Any, ...]] = set()

    def add(http: httpx.Client, user: str, record_id: str) -> None:
        answer = http.post(
            "/v1/records", json={"user_id": user, "id": record_id, "text": f"Note {record_id}."}
        )
        assert answer.status_code == 201, answer.text
        expected.add(("acme", "record.added", user, record_id))

    receiver.fail_next = 3
    with personamem_serve(tmp_path) as served:
        with _http(served.url, acme_admin) as acme, _http(served.url, beta_admin) as beta:
            # subscribing is the tenant admin's; validation is a 422 that says what is wrong
            events = ["record.added", "record.deleted", "user.forgotten"]
            bad = acme.post("/v1/webhooks", json={"url": "file:///etc/passwd", "events": events})
            assert bad.status_code == 422 and "http:// or https://" in bad.json()["error"]["message"]
            bad = acme.post("/v1/webhooks", json={"url": receiver.url, "events": ["record.eaten"]})
            assert bad.status_code == 422 and "record.eaten" in bad.json()["error"]["message"]
            with _http(served.url, acme_writer) as writer:
                assert writer.get("/v1/webhooks").status_code == 403
            made = acme.post(
                "/v1/webhooks",
                json={"url": f"{receiver.url}/acme", "events": events, "secret": SECRETS["/acme"]},
            )
            assert made.status_code == 201, made.text
            hook = made.json()
            assert hook["secret"] == SECRETS["/acme"]
            assert acme.get("/v1/webhooks").json()["webhooks"] == [
                {k: v for k, v in hook.items() if k != "secret"}
            ]
            assert SECRETS["/acme"] not in acme.get("/v1/webhooks").text
            body = {"url": f"{receiver.url}/beta", "events": ["record.added"], "secret": SECRETS["/beta"]}
            assert beta.post("/v1/webhooks", json=body).status_code == 201
            # tenant isolation: beta sees and deletes none of acme's
            assert [w["url"] for w in beta.get("/v1/webhooks").json()["webhooks"]] == [f"{receiver.url}/beta"]
            assert beta.delete(f"/v1/webhooks/{hook['webhook_id']}").status_code == 404
            assert (
                beta.post("/v1/records", json={"user_id": "alice", "id": "b1", "text": "Beta."}).status_code
                == 201
            )

            # 1. the receiver answers the first three deliveries 500: they are retried
            for n in range(1, 6):
                add(acme, "alice", f"a{n}")
            add(acme, "carol", "c1")
            assert receiver.wait_for(lambda: _seen(receiver, "/acme") >= expected and not outbox.pending())
            assert receiver.failed == 3

            # 2. the receiver is down, then back on the same port: the events written meanwhile arrive
            receiver.stop()
            for n in range(6, 11):
                add(acme, "alice", f"a{n}")
            assert acme.request(
                "POST", "/v1/records/delete", json={"user_id": "alice", "ids": ["a1"]}
            ).json()["deleted"] == ["a1"]
            expected.add(("acme", "record.deleted", "alice", "a1"))
            assert acme.delete("/v1/users", params={"user_id": "carol"}).status_code == 200
            expected.add(("acme", "user.forgotten", "carol", None))
            time.sleep(1.0)  # refused connections meanwhile, each retried later
            receiver.start()
            assert receiver.wait_for(lambda: _seen(receiver, "/acme") >= expected and not outbox.pending())

            # 3. down again while more events are written; back, it takes one and stalls: SIGKILL
            receiver.stop()
            for n in range(11, 16):
                add(acme, "alice", f"a{n}")
            assert outbox.pending("acme") == 5
            receiver.stall_s = 3.0
            receiver.start()
            assert receiver.stalled.wait(30), "no delivery reached the restarted receiver"
        served.process.kill()  # SIGKILL: no shutdown, the taken event's row is still in the outbox
        served.process.wait(timeout=30)
    waiting = outbox.pending("acme")
    assert waiting == 5  # the one taken (its lease runs out) and the four behind it

    with personamem_serve(tmp_path):  # the same store: the outbox survived the kill
        assert receiver.wait_for(lambda: _seen(receiver, "/acme") >= expected and outbox.pending() == 0, 60)
    catalog.close()

    acme_events = receiver.events("/acme")
    ids = [e["id"] for e in acme_events]
    assert _seen(receiver, "/acme") == expected  # every acknowledged change's event, nothing else
    assert len(set(ids)) == len(expected)  # one event id per change
    assert receiver.duplicates() >= 1  # the event taken just before the kill came again
    assert receiver.refused == 0  # every signature verified
    assert {e["tenant"] for e in acme_events} == {"acme"}
    assert _seen(receiver, "/beta") == {("beta", "record.added", "alice", "b1")}
    print(
        f"\nwebhooks: {len(expected)} events produced, {len(set(ids))} received "
        f"({len(ids)} deliveries, {receiver.duplicates()} redelivered), {receiver.failed} answered 500, "
        f"{waiting} waiting at SIGKILL"
    )
