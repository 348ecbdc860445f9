"""Webhooks in process: signatures, subscriptions per tenant, the outbox's transaction, ids only, delivery.

The store is a real folder store (SQLite); deliveries go to a real HTTP server on 127.0.0.1
(``tests/webhook_receiver.py``) through the deliverer a server runs, called here pass by pass. The
claims of concurrent deliverers are checked on SQLite and on a real PostgreSQL.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlmodel import select

from personamem import PersonaMem
from personamem.errors import InvalidInputError, WebhookSignatureError
from personamem.store.deliveries import Deliveries
from personamem.store.outbox import emit_records
from personamem.store.sql import SqlCatalog
from personamem.store.subscriptions import Subscriptions
from personamem.store.tables import OutboxRow
from personamem.testing.postgres import find_postgres, postgres_cluster
from personamem.webhook_delivery import Deliverer
from personamem.webhooks import EVENTS, event_body, sign, verify
from tests.bytescan import files_containing, store_files
from tests.webhook_receiver import Receiver

SECRET = "whsec_test-secret-0123456789"
SECRET_TEXT = "my locker code is 4711-zebra"


def _outbox(mem: PersonaMem) -> list[OutboxRow]:
    with mem.store.catalog.session() as s:
        return list(s.exec(select(OutboxRow).order_by(OutboxRow.pk)))  # type: ignore[arg-type]


def _signed(sent_at: int, secret: str = SECRET) -> tuple[bytes, dict[str, str]]:
    body = event_body("e1", "record.added", "acme", time.time(), {"user_id": "u", "record_id": "r"}, sent_at)
    return body, {"x-personamem-signature": sign(secret, body), "X-PersonaMem-Timestamp": str(sent_at)}


def test_a_signature_verifies_and_fails_for_a_changed_body_a_wrong_secret_or_an_old_time() -> None:
    now = int(time.time())
    body, headers = _signed(now)
    event = verify(SECRET, body, headers)
    assert (event["id"], event["type"], event["tenant"], event["sent_at"]) == (
        "e1",
        "record.added",
        "acme",
        now,
    )
    assert verify(SECRET, body.decode(), headers)["data"] == {"user_id": "u", "record_id": "r"}
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify(SECRET, body.replace(b'"r"', b'"s"'), headers)
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify("another-secret-0123456789", body, headers)
    with pytest.raises(WebhookSignatureError, match="no X-PersonaMem-Signature"):
        verify(SECRET, body, {"X-PersonaMem-Timestamp": str(now)})
    stale, stale_headers = _signed(now - 301)
    with pytest.raises(WebhookSignatureError, match="more than the 300 s"):
        verify(SECRET, stale, stale_headers)
    assert verify(SECRET, stale, stale_headers, tolerance_s=600)["id"] == "e1"
    # a fresh timestamp header on an old signed body is a replay, not a fresh delivery
    with pytest.raises(WebhookSignatureError, match="not the signed body's sent_at"):
        verify(SECRET, stale, {**stale_headers, "X-PersonaMem-Timestamp": str(now)})


def test_subscriptions_are_checked_masked_and_kept_per_tenant(mem: PersonaMem) -> None:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    with pytest.raises(InvalidInputError, match="http:// or https:// URL"):
        acme.webhooks.add("ftp://example.com/hook", ["record.added"], SECRET)
    with pytest.raises(InvalidInputError, match="http:// or https:// URL"):
        acme.webhooks.add("https://", ["record.added"], SECRET)
    with pytest.raises(InvalidInputError, match=r"unknown webhook event\(s\) \['record.created'\]"):
        acme.webhooks.add("https://example.com/hook", ["record.created"], SECRET)
    with pytest.raises(InvalidInputError, match="non-empty list"):
        acme.webhooks.add("https://example.com/hook", "record.added", SECRET)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="at least 16 characters"):
        acme.webhooks.add("https://example.com/hook", ["record.added"], "short")
    made = acme.webhooks.add("https://example.com/hook", ["record.added", "record.added"], SECRET)
    assert made.secret == SECRET and made.events == ["record.added"]
    fresh = acme.webhooks.add("https://example.com/other", list(EVENTS))
    assert fresh.secret.startswith("whsec_") and len(fresh.secret) > 40
    listed = acme.webhooks.list()
    assert [w.webhook_id for w in listed] == [made.webhook_id, fresh.webhook_id]
    assert listed[0].secret_hint == "…6789" and SECRET not in json.dumps([w.model_dump() for w in listed])
    assert beta.webhooks.list() == [] and mem.webhooks.list() == []
    with pytest.raises(InvalidInputError, match="no webhook"):
        beta.webhooks.delete(made.webhook_id)  # another tenant's id is as unknown as a made-up one
    assert acme.webhooks.delete(made.webhook_id).webhook_id == made.webhook_id
    assert [w.webhook_id for w in acme.webhooks.list()] == [fresh.webhook_id]


def test_a_change_rolled_back_writes_no_event_and_a_committed_one_writes_its_event(mem: PersonaMem) -> None:
    acme = mem.tenant("acme")
    acme.webhooks.add("https://example.com/hook", ["record.added", "record.deleted"], SECRET)
    acme.add("alice", "I keep bees.", id="r0")
    # a real failure late in the write's transaction: SQLite aborts the user's revision bump
    with mem.store.catalog.session(write=True) as s:
        s.execute(
            text("CREATE TRIGGER fail BEFORE UPDATE ON users BEGIN SELECT RAISE(ABORT, 'injected'); END")
        )
    with pytest.raises(Exception, match="injected"):
        acme.add("alice", "I keep goats.", id="r1")
    with pytest.raises(Exception, match="injected"):
        acme.delete("alice", ["r0"])
    assert [(r.type, r.data["record_id"]) for r in _outbox(mem)] == [("record.added", "r0")]
    assert acme.get("alice", "r1") is None and acme.get("alice", "r0") is not None
    with mem.store.catalog.session(write=True) as s:
        s.execute(text("DROP TRIGGER fail"))
    acme.add("alice", "I keep goats.", id="r1")
    assert acme.delete("alice", ["r0"]) == ["r0"]
    got = [(r.type, r.data["record_id"]) for r in _outbox(mem)]
    assert got == [("record.added", "r0"), ("record.added", "r1"), ("record.deleted", "r0")]


def test_events_carry_ids_only_and_go_to_their_own_tenant(mem: PersonaMem, tmp_path: Path) -> None:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    acme.webhooks.add("https://acme.example/hook", list(EVENTS), SECRET)
    beta.webhooks.add("https://beta.example/hook", ["record.added"], SECRET)
    acme.add("alice", SECRET_TEXT, id="r1")
    acme.update("alice", "r1", text=SECRET_TEXT + " (new)")
    acme.supersede("alice", "r1", SECRET_TEXT + " (moved)", id="r2")
    acme.add(
        "alice", SECRET_TEXT + " (brief)", id="r3", expires_at=datetime.now(UTC) + timedelta(seconds=0.3)
    )
    acme.delete("alice", ["r2"])
    time.sleep(0.4)
    assert acme.purge() == 1
    acme.add("bob", SECRET_TEXT + " (bob)", id="b1")
    assert acme.forget("bob")
    beta.add("alice", "beta's note", id="r1")
    mem.add("root", "the store's own user")  # no webhook of the store's own: no event
    rows = _outbox(mem)
    acme_rows = [(r.type, r.data) for r in rows if r.tenant == "acme"]
    assert acme_rows == [
        ("record.added", {"user_id": "alice", "record_id": "r1"}),
        ("record.updated", {"user_id": "alice", "record_id": "r1"}),
        ("record.added", {"user_id": "alice", "record_id": "r2"}),
        ("record.superseded", {"user_id": "alice", "record_id": "r1", "superseded_by": "r2"}),
        ("record.added", {"user_id": "alice", "record_id": "r3"}),
        ("record.deleted", {"user_id": "alice", "record_id": "r2"}),
        ("record.expired", {"user_id": "alice", "record_id": "r3"}),
        # bob's undelivered record.added went with bob; the forget's own event stays
        ("user.forgotten", {"user_id": "bob"}),
    ]
    assert [(r.tenant, r.type, r.data) for r in rows if r.tenant != "acme"] == [
        ("beta", "record.added", {"user_id": "alice", "record_id": "r1"})
    ]
    assert len({r.event_id for r in rows}) == len(rows)
    assert all(SECRET_TEXT not in json.dumps(r.model_dump()) for r in rows)
    acme.forget("alice")
    assert [r.type for r in _outbox(mem) if r.tenant == "acme"] == ["user.forgotten", "user.forgotten"]
    assert files_containing(store_files(tmp_path / "store"), SECRET_TEXT.encode()) == []


def test_a_live_pipeline_is_announced_to_the_tenants_it_serves(mem: PersonaMem) -> None:
    acme, beta = mem.tenant("acme"), mem.tenant("beta")
    for view in (acme, beta, mem):
        view.webhooks.add("https://example.com/hook", ["pipeline.live"], SECRET)
    acme.store.set_live_pipeline({"ranker": "auto", "chosen_by": "improve"})
    mem.store.set_live_pipeline({"ranker": "auto"})  # serves beta and the store's own users, not acme
    assert acme.store.rollback_live_pipeline()
    got = [(r.tenant, r.data["scope"], r.data["chosen_by"], r.data["rolled_back"]) for r in _outbox(mem)]
    assert got == [
        ("acme", "tenant", "improve", False),
        ("", "store", None, False),
        ("beta", "store", None, False),
        ("acme", "tenant", None, True),  # acme follows the store's table again
    ]
    versions = [r.data["pipeline"] for r in _outbox(mem)]
    assert versions[1] == versions[2] == versions[3] != versions[0] and len(versions[0]) == 16


def _deliver_until(deliverer: Deliverer, done: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        deliverer.deliver_due()
        time.sleep(0.05)
    assert done()


@pytest.mark.enable_socket
def test_deliveries_are_signed_retried_and_deleted_and_dead_letters_can_be_retried(mem: PersonaMem) -> None:
    receiver = Receiver({"/acme": SECRET})
    receiver.start()
    acme = mem.tenant("acme")
    acme.webhooks.add(f"{receiver.url}/acme", ["record.added"], SECRET)
    receiver.fail_next = 2
    deliverer = Deliverer(mem.store.catalog, attempts=3, backoff_s=0.05, timeout_s=2)
    try:
        for n in range(3):
            acme.add("alice", f"note {n}", id=f"r{n}")
        _deliver_until(deliverer, lambda: len(receiver.events("/acme")) == 3)
        events = receiver.events("/acme")
        assert [e["data"]["record_id"] for e in events] == ["r0", "r1", "r2"]  # in order, after 2 × 500
        assert receiver.failed == 2 and receiver.refused == 0
        assert acme.webhooks.pending() == 0 and _outbox(mem) == []  # delivered rows are deleted
        receiver.fail_next = 10**6
        acme.add("alice", "doomed", id="r9")
        _deliver_until(deliverer, lambda: len(acme.webhooks.dead()) == 1)
        [dead] = acme.webhooks.dead()
        assert (dead.type, dead.attempts, dead.last_error, dead.data["record_id"]) == (
            "record.added", 3, "HTTP 500", "r9"
        )  # fmt: skip
        assert mem.tenant("beta").webhooks.dead() == []
        with pytest.raises(InvalidInputError, match="no dead letter"):
            mem.tenant("beta").webhooks.retry(dead.event_id)
        receiver.fail_next = 0
        assert acme.webhooks.retry(dead.event_id) == 1
        _deliver_until(deliverer, lambda: len(receiver.events("/acme")) == 4)
        assert receiver.events("/acme")[-1]["id"] == dead.event_id and acme.webhooks.dead() == []
        receiver.fail_next = 10**6
        acme.add("alice", "doomed again", id="r10")
        _deliver_until(deliverer, lambda: len(acme.webhooks.dead()) == 1)
        assert acme.webhooks.discard(acme.webhooks.dead()[0].event_id) == 1
        assert acme.webhooks.dead() == [] and _outbox(mem) == []
    finally:
        deliverer.close()
        receiver.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh SQL database of each kind the store runs on (PostgreSQL: a throwaway local cluster)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'personamem.sqlite'}"
        return
    pytest.importorskip("psycopg", reason='psycopg not installed: pip install "personamem[postgres]"')
    binaries = find_postgres()
    if binaries is None:
        pytest.skip("no PostgreSQL server binaries")
    with postgres_cluster(binaries) as cluster:
        yield cluster.create_database()


def test_deliverers_claiming_at_once_never_take_one_row_twice(database: str) -> None:
    """Four deliverers, each with its own engine as separate processes have, drain one outbox."""
    first = SqlCatalog(database)
    hook = Subscriptions(first).add("acme", "https://example.com/hook", ["record.added"], SECRET)
    with first.transaction() as s:
        emit_records(s, "\x1facme\x1falice", [(f"r{n}", "added") for n in range(60)])
    catalogs = [first, *(SqlCatalog(database) for _ in range(3))]
    claimed: list[list[int]] = [[] for _ in catalogs]

    def drain(index: int) -> None:
        deliveries = Deliveries(catalogs[index])
        while (delivery := deliveries.claim(lease_s=60)) is not None:
            assert delivery.url == hook.url and delivery.secret == SECRET
            claimed[index].append(delivery.pk)

    threads = [threading.Thread(target=drain, args=(i,)) for i in range(len(catalogs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everyone = [pk for mine in claimed for pk in mine]
    assert len(everyone) == len(set(everyone)) == 60
    assert Deliveries(first).claim(lease_s=60) is None  # all leased: nothing is due until they run out
    for catalog in catalogs:
        catalog.close()
