"""The preference-memory routes of ``personamem serve``, through the Python client and raw HTTP.

A real server process whose pipeline writes atomic memories with the real SmolLM2 (transformers,
one torch thread: on a busy CPU a thread team runs far slower than one thread).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from personamem.client import Client
from personamem.errors import InvalidInputError
from personamem.request_models import MAX_CANDIDATES
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]

CONFIG = """[pipeline]
preference_memory = "atomic"
memory_words = 20
llm = "smollm2-135m"
llm_runtime = "transformers"
"""
DISHES = ["a beef steak with butter", "a lentil curry with coconut milk", "a cheese pizza"]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeyRing]]:
    folder = tmp_path_factory.mktemp("store")
    config = folder.parent / "memory.toml"
    config.write_text(CONFIG, encoding="utf-8")
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as env:  # the server process's environment only
            env.setenv("OMP_NUM_THREADS", "1")
            url = stack.enter_context(personamem_server(folder, "--config", str(config)))
        catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
        stack.callback(catalog.close)
        yield url, KeyRing(catalog)


@pytest.mark.slow
def test_memory_refresh_and_rerank_through_the_client(served: tuple[str, KeyRing]) -> None:
    url, keys = served
    with Client(url, keys.create("shop")[0]) as shop, Client(url, keys.create("clinic")[0]) as clinic:
        shop.add_many(
            [
                {"user_id": "ana", "id": "a1", "text": "I'm vegan and avoid dairy.", "category": "food"},
                {"user_id": "ana", "id": "a2", "text": "Spicy curries are my favourite.", "category": "food"},
                {"user_id": "bo", "id": "b1", "text": "I love steak houses.", "category": "food"},
            ]
        )
        assert shop.memory("nobody").empty
        steps: list[int] = []
        assert shop.refresh_memories(progress=steps.append) == 2 and steps == [2]
        assert shop.refresh_memories(["ana"]) == 0  # current: skipped

        memory = shop.memory("ana")
        assert not memory.stale and not memory.empty and memory.revision
        assert memory.extractor.startswith("atomic:") and set(memory.evidence_ids) <= {"a1", "a2"}
        context = shop.context("ana", "dinner ideas")
        assert context.memory == memory.text()
        assert context.text.startswith(f"Preferences:\n{memory.text()}\n\nRecords:\n- ")

        order = shop.rerank("ana", "a dinner recipe", DISHES, k=2)
        assert len(set(order)) == 2 and set(order) <= {0, 1, 2}
        assert shop.rerank("ana", "a dinner recipe", []) == []

        assert clinic.memory("ana").empty  # another tenant's ana is nobody here
        assert shop.forget("ana") and shop.memory("ana").empty


def test_bad_memory_requests_are_422(served: tuple[str, KeyRing]) -> None:
    url, keys = served
    key, _ = keys.create("bad")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for body in (
            {},
            {"all": False},
            {"all": True, "user_ids": ["ana"]},
            {"user_ids": []},
            {"user_ids": ["ana"], "batch_size": 0},
        ):
            answer = http.post("/v1/memory/refresh", json=body)
            assert answer.status_code == 422, body
            assert answer.json()["error"]["type"] == "InvalidInputError"
        assert http.post("/v1/memory/refresh", json={"all": True}).json() == {"built": 0}
        for body in (
            {"user_id": "ana", "query": "x", "candidates": ["a"], "k": 0},
            {"user_id": "ana", "query": "x", "candidates": ["a"] * (MAX_CANDIDATES + 1)},
            {"user_id": "ana", "candidates": ["a"]},
        ):
            assert http.post("/v1/rerank", json=body).status_code == 422, body
        assert http.get("/v1/memory").status_code == 422  # user_id is required
    with Client(url, key) as client, pytest.raises(InvalidInputError):
        client.rerank("ana", "x", "not a list")
