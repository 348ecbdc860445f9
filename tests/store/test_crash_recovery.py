"""A vector index that cannot read its own ids back: why it happened, and the store healing it.

Root cause (``store/vectors.py``'s docstring): a process whose in-memory HNSW lagged behind the
watermark another process persisted never applied the entries in between, and its own next persist
replaced the complete files. The first test reproduces it with no crash at all; the others heal the
store a SIGKILLed ``serve --workers 2`` left behind (``../shared/fixtures/store-after-crash``), and
kill a real two-worker server five times during writes and searches.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.client import Client
from personamem.store import KeyRing
from personamem.store.read import NOW
from personamem.store.recovery import rebuild
from personamem.store.sql import SqlCatalog
from personamem.store.vectors import VectorIndex
from personamem.testing.postgres import find_postgres, postgres_cluster
from personamem.testing.servers import free_port
from tests.store.test_write_behind import CountingEncoder

FIXTURE = Path(__file__).resolve().parents[3] / "shared" / "fixtures" / "store-after-crash"
DAMAGED = "\x1ft1\x1fbob"  # the fixture's user whose vectors cannot be read back
PGVECTOR = find_postgres("vector")

pytestmark = pytest.mark.slow


def _vectors(start: int, n: int) -> tuple[list[str], np.ndarray]:
    rows = np.random.default_rng(start).standard_normal((n, 8)).astype(np.float32)
    return [f"r{i}" for i in range(start, start + n)], rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _process(folder: str, inbox: multiprocessing.connection.Connection) -> None:
    index = VectorIndex.persistent(folder)
    while (step := inbox.recv()) is not None:
        if step[0] == "upsert":
            index.upsert("pm-user", *_vectors(step[1], step[2]))
        elif step[0] == "read":
            index.ids("pm-user")
        else:
            index.refresh("pm-user")
        inbox.send("done")
    index.close()


def test_a_process_that_lagged_behind_the_persisted_index_never_overwrites_it(tmp_path: Path) -> None:
    spawn = multiprocessing.get_context("spawn")
    pipes, processes = [], []
    for _ in range(2):
        ours, theirs = spawn.Pipe()
        process = spawn.Process(target=_process, args=(str(tmp_path / "chroma"), theirs))
        process.start()
        pipes.append(ours)
        processes.append(process)

    def step(who: int, *what: object) -> None:
        pipes[who].send(what)
        assert pipes[who].recv() == "done"

    step(0, "upsert", 0, 10)
    step(1, "read")  # B holds the collection in memory from here on
    step(0, "upsert", 10, 25)  # a batch B has not applied
    step(0, "upsert", 35, 1000)  # A passes Chroma's sync threshold: persists, advances the watermark
    step(1, "refresh")  # B catches up, but Chroma only applies entries past the watermark
    step(1, "upsert", 2000, 1000)  # B persists what it holds
    for pipe, process in zip(pipes, processes, strict=True):
        pipe.send(None)
        process.join(60)
    index = VectorIndex.persistent(tmp_path / "chroma")
    ids, matrix = index.vectors("pm-user")  # "Error finding id" before the fix
    assert len(ids) == matrix.shape[0] == 2035
    index.close()


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    if not FIXTURE.is_dir():
        pytest.skip(f"the crash fixture is not at {FIXTURE}")
    store = tmp_path / "store"
    shutil.copytree(FIXTURE, store)
    return store


def test_check_reports_unreadable_vectors_and_a_search_heals_its_user(damaged: Path) -> None:
    with PersonaMem.open(damaged) as mem:
        before = mem.store.check()
        assert set(before.unreadable_vectors) == {DAMAGED} and len(before.unreadable_vectors[DAMAGED]) == 25
        assert not before.ok and not before.pending and not before.missing_vectors
        bob = mem.tenant("t1")
        records = bob.records("bob")
        hits = bob.search("bob", records[0].text, k=1, method="dense")  # raised InternalError before
        assert hits[0].record.id == records[0].id
        assert mem.store.check().ok
        assert bob.count("bob") == len(records) == 1242  # nothing lost
        found, vectors = mem.store.for_tenant("t1").vectors("bob")
        assert {r.id for r in found} == {r.id for r in records} and vectors.shape == (1242, 384)
        for record in records[::97]:  # the synthetic texts differ in numbers alone: dense tells them apart
            assert bob.search("bob", record.text, k=1, method="dense")[0].record.text == record.text
        assert len(bob.search("bob", records[5].text, k=5, method="default")) == 5


def test_personamem_check_reports_then_repairs_offline(damaged: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
        command = [sys.executable, "-m", "personamem", "--store", str(damaged), "check", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    found = run()
    assert found.returncode == 1, found.stderr
    assert "t1/bob" in found.stdout and "cannot read back" in found.stdout and "25" in found.stdout
    repaired = run("--repair")
    assert repaired.returncode == 0, repaired.stderr
    assert "rebuilt 1 user(s) from SQL: t1/bob" in repaired.stdout
    assert run().returncode == 0
    with PersonaMem.open(damaged) as mem:
        assert mem.store.check().ok and mem.tenant("t1").count("bob") == 1242


def _serve(store: Path, port: int, *options: str) -> subprocess.Popen[bytes]:
    """``personamem serve --workers 2`` in its own process group (so a SIGKILL takes every worker)."""
    command = [
        sys.executable, "-m", "personamem", "--store", str(store), *options,
        "serve", "--port", str(port), "--workers", "2", "--log-level", "warning",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with (store.parent / "server.log").open("ab") as log:
        server = subprocess.Popen(command, stdout=log, stderr=log, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/health", timeout=2):
                return server
        except OSError:
            assert server.poll() is None and time.monotonic() < deadline, "serve did not start"
            time.sleep(0.2)


def _write_until(
    url: str, key: str, user: str, round_: int, stop: threading.Event, acked: list[tuple]
) -> None:
    """Add (and search) records of ``user`` until ``stop``; keep those the server acknowledged."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        for i in range(10_000):
            if stop.is_set():
                return
            text = f"Round {round_}, {user} note {i}: the parcel number {i} went to dock {i * 7}."
            rid = f"r{round_}-{i}"
            try:
                answer = http.post("/v1/records", json={"user_id": user, "id": rid, "text": text})
                http.post("/v1/search", json={"user_id": user, "query": text, "k": 3})
            except httpx.HTTPError:
                return  # the server died under the request: not acknowledged
            if answer.status_code == 201:
                acked.append((key, user, rid, text))


@pytest.mark.server
@pytest.mark.enable_socket
def test_every_acknowledged_record_is_searchable_after_each_of_five_sigkills(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    _survives_sigkills(store, f"sqlite:///{store / 'personamem.sqlite'}", lambda: PersonaMem.open(store))


@pytest.mark.server
@pytest.mark.enable_socket
@pytest.mark.skipif(PGVECTOR is None, reason="no PostgreSQL binaries with pgvector (pgserver's have it)")
def test_postgres_alone_loses_no_acknowledged_record_to_five_sigkills(tmp_path: Path) -> None:
    """The same kills on ``serve --workers 2 --sql-url postgresql://...``: vectors in pgvector."""
    with postgres_cluster(PGVECTOR) as cluster:
        url = cluster.create_database()
        _survives_sigkills(tmp_path / "store", url, lambda: PersonaMem.connect(url), "--sql-url", url)


def _survives_sigkills(store: Path, sql_url: str, reopen: Callable[[], PersonaMem], *options: str) -> None:
    """Kill a two-worker server five times mid-traffic; each restart finds what the round before acked."""
    store.mkdir(exist_ok=True)
    catalog = SqlCatalog(sql_url)
    keys = [KeyRing(catalog).create(tenant)[0] for tenant in ("t1", "t2")]
    catalog.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    acknowledged: list[tuple] = []  # (key, user, id, text) of the round before the last kill
    for round_ in range(6):  # five kills mid-traffic; each restart checks the round before it
        server = _serve(store, port, *options)
        try:
            clients = {key: Client(url, key) for key in keys}
            try:
                for key, user, rid, text in acknowledged:
                    for method in ("dense", "default"):
                        top = clients[key].search(user, text, k=1, method=method)
                        assert [h.record.id for h in top] == [rid], (round_, user, method, text)
            finally:
                for client in clients.values():
                    client.close()
            if round_ == 5:
                break
            acknowledged, stop = [], threading.Event()
            writers = [
                threading.Thread(target=_write_until, args=(url, key, user, round_, stop, acknowledged))
                for key in keys
                for user in ("alice", "bob")
            ]
            for writer in writers:
                writer.start()
            started = time.monotonic()  # a cold worker's first write may take seconds on a busy machine
            while not acknowledged and time.monotonic() < started + 60:
                time.sleep(0.05)
            time.sleep(1.0)
        finally:
            os.killpg(server.pid, signal.SIGKILL)  # the whole server, mid-traffic
            server.wait()
        stop.set()
        for writer in writers:
            writer.join(30)
        assert acknowledged, "no write was acknowledged before the kill"
    with reopen() as mem:
        assert mem.store.check().ok
        assert sum(mem.tenant(t).count() for t in ("t1", "t2")) >= 5 * 4


def test_a_collection_lost_whole_is_rebuilt_from_the_vectors_sql_keeps(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    counting = CountingEncoder(encoder)
    with PersonaMem.open(tmp_path / "store", encoder=counting) as mem:  # type: ignore[arg-type]
        mem.add_many([f"note {i}: the orchard has {i} beehives" for i in range(40)], user_id="ana")
        mem.store.flush()
        query = mem.store.encoder.encode(["how many beehives"])[0]
        before = [(r.id, round(s, 5)) for r, s in mem.store.nearest("ana", query, 5, NOW)]
        key = mem.store._key("ana")
        mem.store.index.drop([mem.store.names.collection(key)])  # the index lost every vector of ana
        encoded = counting.texts
        assert rebuild(mem.store.indexing, key) == 40
        assert counting.texts == encoded  # nothing encoded again: the rows kept their vectors
        assert mem.store.check().ok
        assert [(r.id, round(s, 5)) for r, s in mem.store.nearest("ana", query, 5, NOW)] == before
