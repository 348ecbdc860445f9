"""The framework adapters call only the contract's operations, so a ``Client`` of a server serves them.

Each retriever (LangChain, LlamaIndex) and the LangGraph store's query search ranks over
``Client(url, key)`` exactly as over the in-process memory the key's tenant sees, with and without
a filter; an ``AsyncClient`` is awaited natively. The LlamaIndex memory block and the LangChain chat
history work over a client too. What needs this process (a ``PipelineConfig``, a query vector) is
refused over a client with an error that names the alternative. The data and the server (its
``served`` fixture) are ``test_default_everywhere``'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.client import AsyncClient, Client
from personamem.errors import InvalidInputError, MethodError
from personamem.methods import method_config
from tests import test_default_everywhere
from tests.test_default_everywhere import FILTER, QUERY, RECORDS, TENANT, TOPICS, USER, K

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")
pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.schema import QueryBundle
from pydantic import ValidationError

from personamem.adapters.langchain import PersonaMemChatMessageHistory
from personamem.adapters.langchain import PersonaMemRetriever as LangChainRetriever
from personamem.adapters.langgraph import PersonaMemStore
from personamem.adapters.llamaindex import PersonaMemMemoryBlock
from personamem.adapters.llamaindex import PersonaMemRetriever as LlamaIndexRetriever

pytestmark = [pytest.mark.slow, pytest.mark.server, pytest.mark.enable_socket]

served = test_default_everywhere.served  # its store and server, started once for this module too


@pytest.fixture(scope="module")
def acme(served: tuple[Path, str, str], encoder: SentenceEncoder) -> tuple[Path, str, str]:
    """``served``'s store with lg's LangGraph items in tenant acme too, its server, and a write key."""
    with PersonaMem.open(served[0], encoder=encoder) as mem:
        graph = PersonaMemStore(mem.tenant(TENANT))  # the same texts as ana's records
        for record, topic in zip(RECORDS, TOPICS, strict=True):
            graph.put(("lg", "memories"), str(record["id"]), {"text": record["text"], "topic": topic})
        return served[0], served[1], mem.store.keys.create(TENANT)[0]


@pytest.fixture
def local(acme: tuple[Path, str, str], encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """The tenant in process, as the server's key sees it."""
    with PersonaMem.open(acme[0], encoder=encoder) as mem:
        yield mem.tenant(TENANT)


@pytest.fixture
def client(acme: tuple[Path, str, str]) -> Iterator[Client]:
    with Client(acme[1], acme[2]) as remote:
        yield remote


def _rankings(memory: Any, filters: dict[str, Any] | None) -> dict[str, list[str]]:
    """Ana's ranking for QUERY through each adapter over ``memory`` (lg's items rank as ana's records)."""
    read = {} if filters is None else {"filters": filters}
    ids = {record["text"]: record["id"] for record in RECORDS}
    items = PersonaMemStore(memory, **read).search(("lg",), query=QUERY, limit=K)
    return {
        "search": [hit.record.id for hit in memory.search(USER, QUERY, k=K, **read)],
        "langchain": [
            str(d.id) for d in LangChainRetriever(memory=memory, user_id=USER, k=K, **read).invoke(QUERY)
        ],
        "llamaindex": [n.node_id for n in LlamaIndexRetriever(memory, USER, k=K, **read).retrieve(QUERY)],
        "langgraph": [ids[item.value["text"]] for item in items],
    }


@pytest.mark.parametrize("filters", [None, FILTER], ids=["all", "filtered"])
def test_every_adapter_ranks_over_a_client_as_in_process(
    local: PersonaMem, client: Client, filters: dict[str, Any] | None
) -> None:
    want = [hit.record.id for hit in local.search(USER, QUERY, k=K, filters=filters)]
    assert len(want) == K
    for memory in (local, client):
        found = _rankings(memory, filters)
        assert found == dict.fromkeys(found, want), type(memory).__name__


async def test_an_async_client_is_awaited(acme: tuple[Path, str, str], local: PersonaMem) -> None:
    want = [hit.record.id for hit in local.search(USER, QUERY, k=3, filters=FILTER)]
    async with AsyncClient(acme[1], acme[2]) as remote:
        chain = LangChainRetriever(memory=remote, user_id=USER, k=K, filters=FILTER)
        assert [str(doc.id) for doc in await chain.ainvoke(QUERY, k=3)] == want
        index = LlamaIndexRetriever(remote, USER, k=3, filters=FILTER)
        assert [n.node_id for n in await index.aretrieve(QUERY)] == want
        with pytest.raises(TypeError, match="call ainvoke"):
            chain.invoke(QUERY)
        with pytest.raises(TypeError, match="call aretrieve"):
            index.retrieve(QUERY)


async def test_the_memory_block_and_chat_history_over_a_client(local: PersonaMem, client: Client) -> None:
    block = PersonaMemMemoryBlock(memory=client, user_id=USER, budget_tokens=60, pipeline="bm25")
    here = PersonaMemMemoryBlock(memory=local, user_id=USER, budget_tokens=60, pipeline="bm25")
    assert block.context(QUERY).text == here.context(QUERY).text != ""

    history = PersonaMemChatMessageHistory(client, "chatter", "s1")
    history.add_messages([HumanMessage("I'm learning the oboe."), AIMessage("Nice: which method book?")])
    assert [m.text for m in PersonaMemChatMessageHistory(local, "chatter", "s1").messages] == [
        "I'm learning the oboe.",
        "Nice: which method book?",
    ]
    history.clear()
    assert local.records("chatter") == []


def test_what_needs_this_process_is_refused_over_a_client(client: Client) -> None:
    config = method_config("bm25")
    with pytest.raises(ValidationError, match="runs in process only: give a PersonaMem"):
        LangChainRetriever(memory=client, user_id=USER, pipeline=config)
    with pytest.raises(MethodError, match="runs in process only: give a PersonaMem"):
        LlamaIndexRetriever(client, USER, pipeline=config)
    with pytest.raises(ValidationError, match="runs in process only: give a PersonaMem"):
        PersonaMemMemoryBlock(memory=client, user_id=USER, pipeline=config)
    with pytest.raises(InvalidInputError, match="in process only"):
        LlamaIndexRetriever(client, USER).retrieve(QueryBundle(query_str=QUERY, embedding=[0.0] * 384))
    with pytest.raises(ValidationError, match="must be a PersonaMem, a Client or an AsyncClient"):
        LangChainRetriever(memory="http://localhost", user_id=USER)  # type: ignore[arg-type]
    # an unknown method is not checked at construction over a client: the server refuses it
    retriever = LangChainRetriever(memory=client, user_id=USER, method="tfidf")
    with pytest.raises(MethodError, match="unknown method 'tfidf'"):
        retriever.invoke(QUERY)
