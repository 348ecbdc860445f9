"""SIGTERM on ``personamem serve --workers 2`` under load: requests in flight are answered, none is lost.

Clients keep adding records (each with its own id) and asking for context while the supervisor is
sent SIGTERM, as an orchestrator stopping a pod does; one bulk add, slow to encode, is in flight at
that moment. What must hold: the bulk add is answered and stored, the server exits 0, no answer is
a 5xx, and every add the server acknowledged is in the store when it is opened again, which
``check()`` finds clean. Calls after the signal fail to connect; those adds were never acknowledged.
(With ``--drain-seconds 0`` the bulk add is cut off: the test sees the difference.)
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from personamem import PersonaMem
from personamem.client import Client
from personamem.errors import RemoteError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_serve

pytestmark = [pytest.mark.server, pytest.mark.enable_socket, pytest.mark.slow]

CLIENTS = 8
BULK = 3000  # records in the add that is in flight when the signal comes: seconds of encoding


def test_sigterm_answers_requests_in_flight_and_loses_no_acknowledged_add(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()
    acknowledged: list[str] = []
    failures: list[RemoteError] = []
    lock = threading.Lock()

    def client(index: int, url: str) -> None:
        with Client(url, key, retry_seconds=0) as mem:
            for n in range(10_000):
                record_id = f"c{index}-{n}"
                try:
                    mem.add(
                        f"u{index % 3}",
                        f"Client {index} note {n}: the parcel went to locker {n}.",
                        id=record_id,
                    )
                    if n % 4 == 0:
                        mem.context(f"u{index % 3}", "where did the parcel go?")
                except RemoteError as exc:
                    with lock:
                        failures.append(exc)
                    return
                with lock:
                    acknowledged.append(record_id)

    bulk: list[object] = []

    def bulk_add(url: str) -> None:
        texts = [f"Bulk note {n}: shelf {n % 97} holds box {n}." for n in range(BULK)]
        with Client(url, key, timeout=120, retry_seconds=0) as mem:
            try:
                bulk.append(mem.add_many(texts, user_id="bulk"))
            except RemoteError as exc:
                bulk.append(exc)

    with personamem_serve(tmp_path, workers=2) as served:
        threads = [threading.Thread(target=client, args=(i, served.url)) for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 60 and time.monotonic() < deadline:
            time.sleep(0.1)
        slow = threading.Thread(target=bulk_add, args=(served.url,))
        slow.start()
        time.sleep(1.5)  # the body is sent and encoding under way
        served.process.send_signal(signal.SIGTERM)
        exit_code = served.process.wait(timeout=60)
        for thread in [*threads, slow]:
            thread.join(timeout=60)
        log = served.log.read_text(errors="replace")

    assert exit_code == 0, log[-3000:]
    assert len(bulk) == 1 and not isinstance(bulk[0], Exception), bulk  # answered, not cut off
    assert len(acknowledged) >= 60, log[-3000:]
    assert len(failures) == CLIENTS  # every client ended on the closed server, none stayed blocked
    assert [f for f in failures if f.status is not None] == [], log[-3000:]  # no HTTP error, 5xx or other
    assert "Traceback" not in log, log[-3000:]
    with PersonaMem.open(tmp_path) as mem:
        tenant = mem.tenant("acme")
        stored = {r.id for user in ("u0", "u1", "u2") for r in tenant.records(user)}
        assert set(acknowledged) <= stored
        assert tenant.count("bulk") == BULK
        assert mem.store.check().ok
