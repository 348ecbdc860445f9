"""PostgreSQL restarting under the store and under ``serve --workers 2``: typed, retryable, nothing lost.

A real cluster (``personamem.testing.postgres``) is stopped as an operator's restart stops it
(``pg_ctl stop -m fast`` ends every session) and started again. The SDK raises
``StoreUnavailableError`` meanwhile and recovers without being reopened; the server answers 503
with ``Retry-After``, never a raw 500; the clients repeat the calls that are safe to repeat, so
theirs succeed; and every acknowledged add is there after.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx
import pytest

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.client import AsyncClient, Client
from personamem.contract import ROUTES
from personamem.errors import ServiceUnavailableError, StoreUnavailableError
from personamem.remote import REPEATABLE
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.postgres import PostgresCluster, find_postgres, postgres_cluster
from personamem.testing.servers import personamem_server

pytest.importorskip("pgvector", reason='pgvector not installed: pip install "personamem[postgres]"')
BINARIES = find_postgres("vector")
pytestmark = [
    pytest.mark.skipif(
        BINARIES is None, reason='no PostgreSQL binaries with pgvector (pip install "personamem[dev]")'
    ),
    pytest.mark.server,
    pytest.mark.enable_socket,
]
OUTAGE = 3.0  # seconds the database is down under load


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresCluster]:
    with postgres_cluster(BINARIES) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def served(postgres: PostgresCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A ``serve --workers 2`` on a database of its own (PostgreSQL alone), and an API key."""
    url = postgres.create_database()
    catalog = SqlCatalog(url)
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()
    with personamem_server(tmp_path_factory.mktemp("serve"), "--sql-url", url, workers=2) as server:
        yield server, key


@contextlib.contextmanager
def _stopped(postgres: PostgresCluster, *, for_seconds: float | None = None) -> Iterator[None]:
    """PostgreSQL down for the block; with ``for_seconds``, started again that long in, from a thread."""
    postgres.stop()
    restart = None if for_seconds is None else threading.Timer(for_seconds, postgres.start)
    if restart is not None:
        restart.start()
    try:
        yield
    finally:
        if restart is None:
            postgres.start()
        else:
            restart.join()


def test_only_operations_safe_to_repeat_are_repeated() -> None:
    """Reads, adds (each record carries its id) and writes of a value; never what may remove or rewrite."""
    assert set(REPEATABLE) <= set(ROUTES)
    never = {"delete", "update", "supersede", "forget", "purge", "import_user", "refresh_memories"}
    assert set(ROUTES) - set(REPEATABLE) == never


def test_the_store_raises_typed_while_down_and_recovers_without_reopening(
    postgres: PostgresCluster, encoder: SentenceEncoder
) -> None:
    quiet = PipelineConfig(log_interactions=False)  # a log row written in the background is not this test's
    with PersonaMem.connect(postgres.create_database(), encoder=encoder, pipeline=quiet) as mem:
        mem.add("u", "I keep bees on the roof.", id="bees")
        assert mem.search("u", "honey", k=1)[0].record.id == "bees"  # the pools hold connections now
        with _stopped(postgres):
            pass
        # every pooled connection died with the server, and none of them fails a call
        assert mem.search("u", "honey", k=1)[0].record.id == "bees"
        mem.add("u", "I also grow lavender for them.", id="lavender")
        with _stopped(postgres):
            with pytest.raises(StoreUnavailableError, match="unavailable"):
                mem.search("u", "honey", k=1)
            with pytest.raises(StoreUnavailableError):
                mem.add("u", "The hives face south.", id="south")
        mem.add("u", "The hives face south.", id="south")
        assert {r.id for r in mem.records("u")} == {"bees", "lavender", "south"}


async def test_the_clients_repeat_only_what_is_safe_to_repeat(
    postgres: PostgresCluster, served: tuple[str, str]
) -> None:
    server, key = served
    with Client(server, key) as client:
        client.add("u", "I keep bees on the roof.", id="bees")
    with _stopped(postgres):
        with Client(server, key, retry_seconds=0) as client, pytest.raises(ServiceUnavailableError) as raised:
            client.search("u", "honey")
        assert (raised.value.status, raised.value.retry_after) == (503, 1)
        with Client(server, key) as client:
            started = time.monotonic()
            with pytest.raises(ServiceUnavailableError):
                client.delete("u", ["bees"])  # not repeated: it may have been done
            assert time.monotonic() - started < 1
        with Client(server, key, retry_seconds=2.5) as client:
            started = time.monotonic()
            with pytest.raises(ServiceUnavailableError):
                client.count("u")
            assert 1 <= time.monotonic() - started < 4  # repeated after Retry-After, for about its budget
    with _stopped(postgres, for_seconds=1.5), Client(server, key) as client:
        assert client.add("u", "The hives face south.", id="south").id == "south"
    with _stopped(postgres, for_seconds=1.5):
        async with AsyncClient(server, key) as aclient:
            assert (await aclient.search("u", "which way do the hives face?", k=1))[0].record.id == "south"
    with Client(server, key) as client:
        assert {r.id for r in client.records("u")} == {"bees", "south"}


@dataclass
class _Load:
    """Clients calling a server from threads: retrying ones, and one raw httpx loop recording answers."""

    server: str
    key: str
    stop: threading.Event = field(default_factory=threading.Event)
    acknowledged: set[str] = field(default_factory=set)
    failures: list[BaseException] = field(default_factory=list)
    answers: list[tuple[float, int, str | None]] = field(default_factory=list)  # when, status, Retry-After

    def client(self, n: int) -> None:
        """Adds (ids given) and searches through the retrying client, until stopped."""
        with Client(self.server, self.key) as client:
            for i in range(10**6):
                if self.stop.is_set():
                    return
                try:
                    client.add(f"c{n}", f"Note {i}: the spare key is under flowerpot {i}.", id=f"c{n}-{i}")
                    self.acknowledged.add(f"c{n}:c{n}-{i}")
                    client.search(f"c{n}", f"flowerpot {i}", k=3)
                except Exception as exc:  # the test reports them; a retrying call should not fail
                    self.failures.append(exc)

    def raw(self) -> None:
        """The same calls as raw HTTP, a connection each (so both workers answer), recording every answer."""
        headers = {"Authorization": f"Bearer {self.key}", "Connection": "close"}
        with httpx.Client(base_url=self.server, headers=headers, timeout=30) as http:
            for i in range(10**6):
                if self.stop.is_set():
                    return
                record = {"user_id": "raw", "id": f"raw-{i}", "text": f"Raw note {i} about flowerpot {i}."}
                for path, body in (
                    ("/v1/records", record),
                    ("/v1/search", {"user_id": "raw", "query": "pot"}),
                ):
                    response = http.post(path, json=body)
                    self.answers.append(
                        (time.monotonic(), response.status_code, response.headers.get("retry-after"))
                    )
                    if path == "/v1/records" and response.is_success:
                        self.acknowledged.add(f"raw:raw-{i}")

    @contextlib.contextmanager
    def running(self, clients: int) -> Iterator[None]:
        threads = [threading.Thread(target=self.client, args=(n,)) for n in range(clients)]
        threads.append(threading.Thread(target=self.raw))
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            self.stop.set()
            for thread in threads:
                thread.join()


@pytest.mark.slow
def test_serve_rides_out_a_database_restart_under_load(
    postgres: PostgresCluster, served: tuple[str, str]
) -> None:
    server, key = served
    load = _Load(server, key)
    with load.running(clients=3):
        time.sleep(1.5)
        with _stopped(postgres):
            time.sleep(OUTAGE)
        up = time.monotonic()
        time.sleep(3)
    unexpected = [
        (status, after)
        for _, status, after in load.answers
        if status >= 300 and (status, after) != (503, "1")
    ]
    assert unexpected == []  # only 2xx, or 503 with Retry-After: no raw 500, no other error
    assert any(status == 503 for _, status, _ in load.answers)  # the outage was seen
    last_refused = max(when for when, status, _ in load.answers if status >= 300)
    assert last_refused - up <= 10  # the service is back within 10 s of the database
    assert any(when > last_refused and status < 300 for when, status, _ in load.answers)
    assert load.failures == []  # every retrying call succeeded
    with Client(server, key) as client:
        stored = {f"{user}:{r.id}" for user in ("c0", "c1", "c2", "raw") for r in client.records(user)}
    assert load.acknowledged <= stored  # nothing acknowledged was lost
