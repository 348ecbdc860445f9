"""A search that names no method runs the store's live pipeline: one ranking on every surface.

The SDK, ``method="default"``, the CLI, the REST route (raw and through ``Client``), MCP ``recall``
and the LangChain, LlamaIndex and LangGraph components all rank alike; after a live pipeline is put
in the store, every one of them (a running server included) serves it. A filter (``filters=``,
``--filters``) narrows every one of them alike.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main
from personamem.client import Client
from personamem.store.settings import FRESH_S
from personamem.testing.servers import mcp_client, personamem_server

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

USER, QUERY, K, TENANT = "ana", "what should I cook tonight?", 6, "acme"
TEXTS = [
    "I'm vegan and cook lentils most nights.",
    "My favourite dish is a spicy tofu curry.",
    "I take the 8:15 train to work.",
    "Tonight I want to try cooking a new recipe.",
    "I play the cello on Sundays.",
    "Dinner should be quick: I get home late.",
    "I am allergic to peanuts.",
    "I live in Lisbon.",
]
TOPICS = ["food", "food", "travel", "food", "music", "food", "health", "travel"]
RECORDS = [{"id": f"r{i}", "text": text, "metadata": {"topic": TOPICS[i]}} for i, text in enumerate(TEXTS)]
# ana's records by topic, and lg's LangGraph items by the topic in their value: one filter for both
FILTER = {
    "or": [
        {"metadata.topic": {"in": ["food", "travel"]}},
        {"metadata.langgraph_value": {"contains": '"topic": "food"'}},
        {"metadata.langgraph_value": {"contains": '"topic": "travel"'}},
    ]
}


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory, encoder: SentenceEncoder
) -> Iterator[tuple[Path, str, str]]:
    """The store (ana's records store-wide and in tenant acme), a server over it, and acme's read key."""
    folder = tmp_path_factory.mktemp("default") / "store"
    with PersonaMem.open(folder, encoder=encoder) as mem:
        mem.add_many(RECORDS, user_id=USER)
        mem.tenant(TENANT).add_many(RECORDS, user_id=USER)
        from personamem.adapters.langgraph import PersonaMemStore

        graph = PersonaMemStore(mem)  # the same texts as LangGraph items of user "lg"
        for record in RECORDS:
            graph.put(("lg", "memories"), record["id"], {"text": record["text"], **record["metadata"]})
        key = mem.store.keys.create(TENANT, scope="read")[0]
    with personamem_server(folder) as url:
        yield folder, url, key


def _ids(hits: object) -> list[str]:
    return [hit.record.id for hit in hits]  # type: ignore[attr-defined]


def _served_rankings(url: str, key: str, filters: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """The tenant's ranking for QUERY with no method, through the REST route and ``Client``."""
    read = {} if filters is None else {"filters": filters}
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        answer = http.post("/v1/search", json={"user_id": USER, "query": QUERY, "k": K, **read})
        assert answer.status_code == 200, answer.text
    with Client(url, key) as client:
        return {
            "rest": [hit["id"] for hit in answer.json()["hits"]],
            "client": _ids(client.search(USER, QUERY, k=K, **read)),
        }


async def _mcp_ranking(url: str, key: str, filters: dict[str, Any] | None = None) -> list[str]:
    read = {} if filters is None else {"filters": filters}
    async with mcp_client(url, key) as client:
        result = await client.call_tool("recall", {"user_id": USER, "query": QUERY, "k": K, **read})
        assert not result.is_error and result.structured_content is not None
        return [hit["id"] for hit in result.structured_content["hits"]]


def _local_rankings(
    mem: PersonaMem, folder: Path, capsys: pytest.CaptureFixture[str], filters: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """The store-wide ranking for QUERY with no method, through the CLI and the framework components."""
    from personamem.adapters.langchain import PersonaMemRetriever as LangChainRetriever
    from personamem.adapters.langgraph import PersonaMemStore
    from personamem.adapters.llamaindex import PersonaMemRetriever as LlamaIndexRetriever

    read = {} if filters is None else {"filters": filters}
    capsys.readouterr()
    flags = [] if filters is None else ["--filters", json.dumps(filters)]
    assert (
        main(["--store", str(folder), "search", "--user", USER, QUERY, "-k", str(K), "--json", *flags]) == 0
    )
    ids = {record["text"]: record["id"] for record in RECORDS}
    graph = PersonaMemStore(mem, **read).search(("lg",), query=QUERY, limit=K)
    return {
        "cli": [json.loads(line)["id"] for line in capsys.readouterr().out.splitlines()],
        "langchain": [
            str(doc.id) for doc in LangChainRetriever(memory=mem, user_id=USER, k=K, **read).invoke(QUERY)
        ],
        "llamaindex": [
            node.node.node_id for node in LlamaIndexRetriever(mem, USER, k=K, **read).retrieve(QUERY)
        ],
        "langgraph": [ids[item.value["text"]] for item in graph],  # lg's items rank as ana's records
    }


async def _assert_every_surface_ranks(
    want: list[str],
    served: tuple[Path, str, str],
    mem: PersonaMem,
    capsys: pytest.CaptureFixture[str],
    filters: dict[str, Any] | None = None,
) -> None:
    """Every surface ranks ``want``; the running server is given FRESH_S to follow the store's pipeline."""
    folder, url, key = served
    deadline = time.monotonic() + FRESH_S + 5
    while _served_rankings(url, key, filters)["rest"] != want and time.monotonic() < deadline:
        time.sleep(0.5)
    surfaces = {**_local_rankings(mem, folder, capsys, filters), **_served_rankings(url, key, filters)}
    surfaces["mcp"] = await _mcp_ranking(url, key, filters)
    assert surfaces == dict.fromkeys(surfaces, want)


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.enable_socket
async def test_no_method_is_the_live_pipeline_on_every_surface(
    served: tuple[Path, str, str], encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    with PersonaMem.open(served[0], encoder=encoder) as mem:
        tenant = mem.tenant(TENANT)
        default = _ids(mem.search(USER, QUERY, k=K))
        assert default == _ids(mem.search(USER, QUERY, k=K, method="default"))
        assert default != _ids(mem.search(USER, QUERY, k=K, method="dense"))  # the test can tell them apart
        assert mem.pipeline().first_stage["query_encoder"] == "adapter:mixed"
        assert _ids(tenant.search(USER, QUERY, k=K)) == default  # same records, same ranking
        await _assert_every_surface_ranks(default, served, mem, capsys)

        # put a live pipeline in the store: every surface serves it, the running server within FRESH_S
        mem.store.set_live_pipeline({"first_stage": "bm25", "chosen_by": "a test"})
        live = _ids(mem.search(USER, QUERY, k=K, method="bm25"))
        assert live != default and _ids(mem.search(USER, QUERY, k=K)) == live
        assert _ids(tenant.search(USER, QUERY, k=K)) == live  # a tenant without its own follows the store's
        await _assert_every_surface_ranks(live, served, mem, capsys)
        assert _ids(mem.search(USER, QUERY, k=K, method="default")) == default  # names keep their meaning
        assert mem.store.rollback_live_pipeline() and _ids(mem.search(USER, QUERY, k=K)) == default


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.enable_socket
async def test_a_filter_narrows_every_surface_alike(
    served: tuple[Path, str, str], encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, url, key = served
    with PersonaMem.open(folder, encoder=encoder) as mem:
        mem.store.rollback_live_pipeline()  # whichever test ran first, the package default serves
        filtered = _ids(mem.search(USER, QUERY, k=K, filters=FILTER))
        assert len(filtered) == K and all(TOPICS[int(i[1:])] in ("food", "travel") for i in filtered)
        assert filtered != _ids(mem.search(USER, QUERY, k=K))  # the filter changed the answer
        await _assert_every_surface_ranks(filtered, served, mem, capsys, FILTER)
        from personamem.adapters.langgraph import PersonaMemStore

        listed = PersonaMemStore(mem, filters=FILTER).search(("lg",), limit=20)  # no query: a listing
        assert sorted(item.value["topic"] for item in listed) == sorted(
            t for t in TOPICS if t in ("food", "travel")
        )

        bad = {"timestamp": {"gtx": "2025-01-01"}}
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
            for route in ("/v1/search", "/v1/context"):
                answer = http.post(route, json={"user_id": USER, "query": QUERY, "filters": bad})
                assert answer.status_code == 422, answer.text
                error = answer.json()["error"]
                assert error["type"] == "InvalidInputError", error
                assert "unknown operator 'gtx' at timestamp" in error["message"]
        capsys.readouterr()
        assert main(["--store", str(folder), "search", "--user", USER, QUERY, "--filters", '{"kind": ']) == 2
        assert "--filters" in capsys.readouterr().err
