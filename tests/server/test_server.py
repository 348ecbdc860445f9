"""``personamem serve`` over HTTP on 127.0.0.1: auth, tenant isolation, bad input, faults.

A real server process over a local folder store; keys are made in this process on the same SQL
database (``KeyRing``), as ``personamem keys create`` would.
"""

from __future__ import annotations

import itertools
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personamem.client import Client
from personamem.errors import AuthenticationError, InvalidInputError, MethodError
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing.servers import personamem_server

pytestmark = [pytest.mark.server, pytest.mark.enable_socket]
_fresh = itertools.count()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, KeyRing]]:
    folder = tmp_path_factory.mktemp("store")
    with personamem_server(folder, "--config", str(_dead_llm_config(folder))) as url:
        catalog = SqlCatalog(f"sqlite:///{folder / 'personamem.sqlite'}")
        yield url, KeyRing(catalog)
        catalog.close()


def _dead_llm_config(folder: Path) -> Path:
    """A pipeline whose LLM is an OpenAI-compatible server that refuses connections (port 9)."""
    config = folder.parent / f"{folder.name}.toml"
    config.write_text('[pipeline]\nllm = "any-model"\nllm_url = "http://127.0.0.1:9/v1"\nllm_timeout_s = 5\n')
    return config


@pytest.fixture
def key(served: tuple[str, KeyRing]) -> str:
    return served[1].create(f"t{next(_fresh)}")[0]


def _http(url: str, key: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"} if key else {}, timeout=60)


def test_every_route_needs_a_valid_key_and_reads_nothing_without(served: tuple[str, KeyRing]) -> None:
    url, keys = served
    key, _ = keys.create("auth")
    with _http(url, key) as http:
        assert http.post("/v1/records", json={"user_id": "alice", "text": "a secret"}).status_code == 201
    revoked, gone = keys.create("auth")
    keys.revoke(gone.key_id)
    routes = [
        ("GET", "/v1/users", None),
        ("GET", "/v1/records?user_id=alice", None),
        ("GET", "/v1/count", None),
        ("POST", "/v1/search", {"user_id": "alice", "query": "secret"}),
        ("POST", "/v1/context", {"user_id": "alice", "query": "secret"}),
        ("POST", "/v1/records", {"user_id": "alice", "text": "x"}),
        ("DELETE", "/v1/users?user_id=alice", None),
        ("GET", "/v1/memory?user_id=alice", None),
        ("POST", "/v1/memory/refresh", {"all": True}),
        ("POST", "/v1/rerank", {"user_id": "alice", "query": "secret", "candidates": ["a"]}),
    ]
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {revoked}"},
                    {"Authorization": key}, {"X-API-Key": key[:-2]}):  # fmt: skip
        for method, path, body in routes:
            answer = httpx.request(method, url + path, json=body, headers=headers)
            assert answer.status_code == 401, (headers, path)
            assert answer.headers["www-authenticate"] == "Bearer"
            assert "secret" not in answer.text and answer.json()["error"]["type"] == "AuthenticationError"
    with Client(url, key) as client:
        assert client.count("alice") == 1  # the 401s wrote and erased nothing
    with Client(url, revoked) as client, pytest.raises(AuthenticationError):
        client.users()
    with _http(url) as http:  # health and metrics are for operators' probes: no key, no tenant data
        assert http.get("/v1/health").json()["status"] == "ok"
        metrics = http.get("/v1/metrics").text
        assert 'personamem_requests_total{method="POST",route="/v1/search",status="401"}' in metrics
        assert "alice" not in metrics and "auth" not in metrics


_ids = st.sampled_from(["alice", "bob", "u/1", "ü ser?&=%"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    tenants=st.integers(2, 3),
    users=st.lists(_ids, min_size=1, max_size=3, unique=True),
    record_ids=st.lists(st.sampled_from(["1", "a/b", "x y"]), min_size=1, max_size=3, unique=True),
)
def test_tenants_never_see_each_other(
    served: tuple[str, KeyRing], tenants: int, users: list[str], record_ids: list[str]
) -> None:
    url, keys = served
    run = next(_fresh)
    names = [f"p{run}-{i}" for i in range(tenants)]
    clients = {name: Client(url, keys.create(name)[0]) for name in names}
    try:
        for name, client in clients.items():  # equal user ids and record ids in every tenant
            client.add_many(
                [{"user_id": u, "id": r, "text": f"{name} owns {u} {r}"} for u in users for r in record_ids]
            )
        for name, client in clients.items():
            assert client.users() == sorted(users) and client.count() == len(users) * len(record_ids)
            for user in users:
                assert {r.text for r in client.records(user)} == {
                    f"{name} owns {user} {r}" for r in record_ids
                }
                assert client.get(user, record_ids[0]).text == f"{name} owns {user} {record_ids[0]}"  # type: ignore[union-attr]
                for method in ("dense", "bm25", "hybrid"):
                    hits = client.search(user, " ".join(names) + " owns", k=10, method=method)
                    assert {h.record.text.split(" owns")[0] for h in hits} == {name}
                    assert {h.record.user_id for h in hits} == {user}
        first, *others = names
        assert clients[first].forget(users[0])
        assert sorted(clients[first].delete(users[-1], record_ids)) == (
            sorted(record_ids) if len(users) > 1 else []
        )
        for name in others:
            assert clients[name].count() == len(users) * len(record_ids)
    finally:
        for client in clients.values():
            client.close()


def test_bad_requests_get_a_4xx_with_a_message(served: tuple[str, KeyRing], key: str) -> None:
    url, _ = served
    cases = [
        ("POST", "/v1/search", b"{not json", 400, "not valid JSON"),
        ("POST", "/v1/search", {"user_id": "a", "query": "q", "k": 0}, 422, "k must be at least 1"),
        ("POST", "/v1/search", {"user_id": "a", "query": "q", "k": 5000}, 422, "at most 1000"),
        ("POST", "/v1/search", {"user_id": "a", "query": "q", "k": "five"}, 422, "k"),
        (
            "POST",
            "/v1/search",
            {"user_id": "a", "query": "q", "method": "magic"},
            400,
            "unknown method 'magic'",
        ),
        ("POST", "/v1/search", {"user_id": 7, "query": "q"}, 422, "user_id"),
        ("POST", "/v1/search", {"user_id": "a", "query": "q", "extra": 1}, 422, "extra"),
        ("POST", "/v1/search", [1, 2], 422, "body"),
        ("POST", "/v1/records", {"user_id": "a", "text": "   "}, 422, "text must be non-empty"),
        ("POST", "/v1/records", {"user_id": "a", "text": "x", "kind": "poem"}, 422, "kind"),
        ("POST", "/v1/records", {"text": "no owner"}, 422, "user_id"),
        ("POST", "/v1/records/batch", {"records": []}, 422, "records"),
        ("POST", "/v1/records/batch", {"records": ["fine", {"text": ""}], "user_id": "a"}, 422, "record 1"),
        ("PATCH", "/v1/records/1?user_id=a", {"text": "x"}, 422, "has no record"),
        ("GET", "/v1/records/1?user_id=a", None, 404, "has no record"),
        ("GET", "/v1/records?user_id=a&limit=0", None, 422, "limit"),
        ("POST", "/v1/context", {"user_id": "a", "query": "q", "pipeline": "magic"}, 400, "magic"),
        ("GET", "/v1/nowhere", None, 404, "no route GET /v1/nowhere"),
        ("PUT", "/v1/users", None, 405, ""),
    ]
    with _http(url, key) as http:
        for method, path, body, status, words in cases:
            content = body if isinstance(body, bytes) else None
            payload = None if isinstance(body, bytes) else body
            answer = http.request(method, path, content=content, json=payload,
                                  headers={"content-type": "application/json"})  # fmt: skip
            assert answer.status_code == status, (path, body, answer.text)
            error = answer.json()["error"]
            assert words in error["message"] and "Traceback" not in answer.text, (path, error)
        big = {"user_id": "a", "records": ["x" * 1000] * 17_000}  # > 16 MiB
        declared = http.post("/v1/records/batch", json=big)  # the length is in the headers
        chunked = http.post("/v1/records/batch", content=iter([json.dumps(big).encode()]))  # no length
        for answer in (declared, chunked):
            assert answer.status_code == 413, answer.text
            assert answer.json()["error"]["type"] == "PayloadTooLarge", answer.text
        assert http.get("/v1/count").json() == {"count": 0}  # nothing of the above was stored


def test_a_client_refuses_what_the_server_would_with_the_servers_message(
    served: tuple[str, KeyRing], key: str
) -> None:
    """Both build requests with the row's models (personamem.contract.ROUTES), so they agree."""
    url, _ = served
    many = ["x"] * 101
    cases = [  # (the raw request the server refuses, the same call through the client)
        ("/v1/search", {"user_id": "a", "query": "q", "k": 5000}, lambda c: c.search("a", "q", k=5000)),
        ("/v1/search", {"user_id": "a", "query": ""}, lambda c: c.search("a", "")),
        ("/v1/context", {"user_id": "a", "query": "q", "budget_tokens": 0},
         lambda c: c.context("a", "q", budget_tokens=0)),
        ("/v1/rerank", {"user_id": "a", "query": "q", "candidates": many},
         lambda c: c.rerank("a", "q", many)),
    ]  # fmt: skip
    with _http(url, key) as http, Client(url, key) as client:
        for path, body, call in cases:
            answer = http.post(path, json=body)
            assert answer.status_code == 422, answer.text
            with pytest.raises(InvalidInputError) as refused:
                call(client)
            assert str(refused.value) == answer.json()["error"]["message"], path


def test_a_client_gone_mid_batch_leaves_all_or_none(served: tuple[str, KeyRing], key: str) -> None:
    url, _ = served
    body = json.dumps({"user_id": "dc", "records": [f"note number {i}" for i in range(300)]}).encode()
    head = (f"POST /v1/records/batch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
    address = urlsplit(url)
    with Client(url, key) as client:
        with socket.create_connection((address.hostname, address.port)) as raw:
            raw.sendall(head + body[: len(body) // 2])  # and hang up half way through the body
        time.sleep(1.0)
        assert client.count("dc") == 0
        with socket.create_connection((address.hostname, address.port)) as raw:
            raw.sendall(head + body)  # the whole body, then hang up without reading the answer
        seen = set()
        deadline = time.monotonic() + 60
        while (n := client.count("dc")) < 300 and time.monotonic() < deadline:
            seen.add(n)
            time.sleep(0.05)
        assert n == 300 and seen <= {0}, seen  # one transaction: never a part of the batch


@pytest.mark.slow
def test_llm_down_still_answers_from_the_first_stage_flagged(served: tuple[str, KeyRing], key: str) -> None:
    url, _ = served
    with Client(url, key) as client, _http(url, key) as http:
        client.add_many(["I play the cello.", "I live in Lisbon."], user_id="ana")
        answer = http.post("/v1/search", json={"user_id": "ana", "query": "music", "method": "hyde"}).json()
        assert answer["degraded"] and answer["warnings"]
        assert answer["hits"][0]["record"]["text"] == "I play the cello."
        context = http.post(
            "/v1/context", json={"user_id": "ana", "query": "music", "pipeline": "hyde"}
        ).json()
        assert context["degraded"] and "cello" in context["text"]
        plain = client.context("ana", "music")
        assert not plain.warnings and "cello" in plain.text


def test_memory_routes_say_when_no_memory_is_configured(served: tuple[str, KeyRing], key: str) -> None:
    with Client(served[0], key) as client:
        client.add("ana", "I play the cello.")
        for call in (
            lambda: client.memory("ana"),
            lambda: client.refresh_memories(),
            lambda: client.rerank("ana", "music", ["a cello", "a drum"]),
        ):
            with pytest.raises(MethodError, match="no preference memory configured"):
                call()


def test_openapi_docs_list_the_routes(served: tuple[str, KeyRing]) -> None:
    with _http(served[0]) as http:
        assert http.get("/docs").status_code == 200
        paths = http.get("/openapi.json").json()["paths"]
    records = {"/v1/records", "/v1/records/batch", "/v1/records/delete", "/v1/records/{record_id}"}
    others = {"/v1/search", "/v1/context", "/v1/users", "/v1/count", "/v1/health", "/v1/metrics"}
    memory = {"/v1/memory", "/v1/memory/refresh", "/v1/rerank"}
    expected = records | others | memory
    assert expected <= set(paths)
