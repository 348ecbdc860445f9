"""Event-loop use: the SDK's ``aadd``/``asearch``/``acontext`` and ``AsyncClient``, under concurrency,
answer as their blocking twins do and leave the loop free while they work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from personamem import PersonaMem
from personamem.client import AsyncClient, Client
from personamem.errors import AuthenticationError, InvalidInputError, RemoteError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import free_port, personamem_server

FACTS = [f"Fact {i}: my locker number at the climbing gym is {100 + i}." for i in range(12)]


def test_sdk_async_calls_run_concurrently_without_blocking_the_loop(
    mem: PersonaMem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each call runs on a worker thread, never the loop's, and the calls overlap.

    Checked on the real calls (each wrapped to note its thread), not by counting the loop's ticks
    against the calls' duration, which fails when the calls are merely fast.
    """
    threads: list[int] = []
    in_flight, overlap = 0, 0
    lock = threading.Lock()

    def noted(call: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            nonlocal in_flight, overlap
            with lock:
                threads.append(threading.get_ident())
                in_flight += 1
                overlap = max(overlap, in_flight)
            try:
                return call(*args, **kwargs)
            finally:
                with lock:
                    in_flight -= 1

        return run

    for name in ("add", "search", "context"):
        monkeypatch.setattr(mem, name, noted(getattr(mem, name)))

    async def scenario() -> tuple[int, list[str]]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        beat = asyncio.create_task(ticker())
        await asyncio.gather(*(mem.aadd(f"u{i % 3}", fact, id=f"f{i}") for i, fact in enumerate(FACTS)))
        found = await asyncio.gather(*(mem.asearch(f"u{i % 3}", fact, k=1) for i, fact in enumerate(FACTS)))
        context = await mem.acontext("u0", "which locker is mine?", budget_tokens=200)
        beat.cancel()
        assert context.hits and context.hits[0].record.user_id == "u0"
        return ticks, [hits[0].record.id for hits in found]

    ticks, top = asyncio.run(scenario())  # the loop runs on this thread
    assert top == [f"f{i}" for i in range(len(FACTS))]
    assert len(threads) == 2 * len(FACTS) + 1 and threading.get_ident() not in threads
    assert overlap >= 2, "the calls ran one at a time"
    assert ticks > 0, "the event loop never ran while the calls did"
    assert sorted(mem.users()) == ["u0", "u1", "u2"] and mem.count() == len(FACTS)


@pytest.mark.server
@pytest.mark.enable_socket
def test_async_client_answers_as_the_client_does_under_concurrency(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    key, _ = KeyRing(catalog).create("acme")
    catalog.close()

    async def scenario(url: str) -> None:
        async with AsyncClient(url, key) as client:
            added = await asyncio.gather(
                *(client.add("ana", fact, id=f"f{i}") for i, fact in enumerate(FACTS))
            )
            assert [r.id for r in added] == [f"f{i}" for i in range(len(FACTS))]
            found = await asyncio.gather(*(client.search("ana", fact, k=1) for fact in FACTS))
            assert [hits[0].record.id for hits in found] == [f"f{i}" for i in range(len(FACTS))]
            assert await client.count("ana") == len(FACTS) and await client.users() == ["ana"]
            assert (await client.get("ana", "f3")).text == FACTS[3]  # type: ignore[union-attr]
            assert await client.get("ana", "nope") is None
            assert await client.delete("ana", ["f0"]) == ["f0"]
            assert await client.export("ana", tmp_path / "ana.jsonl") == len(FACTS) - 1
            assert (await client.import_user(tmp_path / "ana.jsonl", user_id="ana2")).records == len(
                FACTS
            ) - 1
            context = await client.context("ana", "which locker?", budget_tokens=120)
            with Client(url, key) as blocking:  # the same call, blocking: the same answer
                assert blocking.context("ana", "which locker?", budget_tokens=120).text == context.text
            with pytest.raises(InvalidInputError):
                await client.add("", "no user")
            assert await client.forget("ana2")
        async with AsyncClient(url, "pm_bad_key") as stranger:
            with pytest.raises(AuthenticationError):
                await stranger.search("ana", "locker")
        async with AsyncClient(f"http://127.0.0.1:{free_port()}", key, timeout=2) as nobody:
            with pytest.raises(RemoteError, match="cannot reach"):
                await nobody.health()

    with personamem_server(tmp_path) as url:
        asyncio.run(scenario(url))


def test_async_client_calls_a_servers_app_in_this_process_through_its_transport(
    mem: PersonaMem,
) -> None:
    """``transport=``: the client over the server's app itself, no port (its routes need no lifespan)."""
    import httpx

    from personamem.server.app import create_app

    key, _ = KeyRing(mem.store.catalog).create("acme")
    transport = httpx.ASGITransport(app=create_app(mem))

    async def scenario() -> None:
        async with AsyncClient("http://personamem.test", key, transport=transport) as client:
            await client.add("ana", FACTS[3], id="f3")
            await client.add("ana", FACTS[4], id="f4")
            found = await client.search("ana", FACTS[4], k=1)
            assert [hit.record.id for hit in found] == ["f4"] and await client.count("ana") == 2
        async with AsyncClient("http://personamem.test", "pm_bad_key", transport=transport) as stranger:
            with pytest.raises(AuthenticationError):
                await stranger.count("ana")

    asyncio.run(scenario())
    assert mem.tenant("acme").count("ana") == 2  # written to the store the app serves
