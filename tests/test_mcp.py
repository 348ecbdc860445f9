"""The MCP tools: over stdio (``personamem mcp``), over HTTP (``/mcp`` in ``personamem serve``), in process.

Real parts throughout: the mcp SDK's own clients (stdio, streamable HTTP, in-process), a real store and
the real encoder; the HTTP tests run a real ``personamem serve`` with two tenants' keys. The one stand-in
is the shipped ``FakeLLM`` behind the preference memory, there only to count that no LLM call is made.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from personamem import PersonaMem, PipelineConfig, SentenceEncoder
from personamem.contract import SearchResult
from personamem.mcp_server import build_server
from personamem.methods import SERVED_BY_DEFAULT
from personamem.preference import PreferenceMemory, Statement
from personamem.preference.service import NAMESPACE
from personamem.store import KeyRing
from personamem.store.sql import SqlCatalog
from personamem.testing import FakeLLM
from personamem.testing.servers import personamem_server

TOOLS = {
    "remember",
    "recall",
    "context",
    "report_answer",
    "forget_record",
    "list_records",
    "record_history",
    "preferences",
}
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mcp_langgraph_agent.py"
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _text(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def _ok(result: CallToolResult) -> Any:
    assert not result.is_error, _text(result)
    return result.structured_content


async def _call(client: Client, tool: str, **arguments: Any) -> Any:
    return _ok(await client.call_tool(tool, arguments))


@asynccontextmanager
async def _over_http(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


@pytest.mark.slow
async def test_stdio_agent_sees_described_tools_remembers_recalls_and_gets_errors_it_can_read(
    tmp_path: Path,
) -> None:
    command = ["-m", "personamem", "--store", str(tmp_path / "store"), "mcp"]
    async with Client(StdioServerParameters(command=sys.executable, args=command, env=OFFLINE)) as client:
        tools = (await client.list_tools()).tools
        assert {tool.name for tool in tools} == TOOLS
        for tool in tools:
            assert tool.description and len(tool.description) > 40, tool.name
            properties = tool.input_schema["properties"]
            undocumented = [name for name, schema in properties.items() if not schema.get("description")]
            assert undocumented == [], f"{tool.name}: {undocumented}"

        bees = "I keep bees on my roof."
        stored = await _call(client, "remember", user_id="alice", text=bees, kind="knowledge")
        assert (stored["user_id"], stored["kind"], stored["text"]) == ("alice", "knowledge", bees)
        await _call(client, "remember", user_id="bob", text="I collect vintage typewriters.")
        found = await _call(client, "recall", user_id="alice", query="do I have any pets or animals?")
        hits = found["hits"]
        assert [(h["id"], h["text"], h["rank"]) for h in hits] == [(stored["id"], stored["text"], 1)]
        assert isinstance(hits[0]["score"], float)  # the default's learned score: higher is better
        assert SearchResult.model_validate(found).model_dump(mode="json") == found  # the REST search shape
        assert hits[0]["record"] == stored  # a record's one shape, as remember returned it
        context = (await _call(client, "context", user_id="alice", query="what are my hobbies?"))["result"]
        assert "bees" in context and "typewriters" not in context

        for bad in ("", "   "):
            refused = await client.call_tool("recall", {"user_id": bad, "query": "bees"})
            assert refused.is_error and "user_id must be a non-empty string" in _text(refused)
        refused = await client.call_tool("recall", {"user_id": "alice", "query": "bees", "method": "nope"})
        assert refused.is_error and "unknown method 'nope'" in _text(refused)
        assert all(name in _text(refused) for name in SERVED_BY_DEFAULT.names())  # what stdio serves
        refused = await client.call_tool("recall", {"user_id": "alice", "query": "bees", "k": 0})
        assert refused.is_error and "k" in _text(refused)

        # the server survived every refusal; one record goes, the other user's stays
        forget = {"user_id": "alice", "record_id": stored["id"]}
        assert (await _call(client, "forget_record", **forget)) == {"deleted": [stored["id"]]}
        assert (await _call(client, "forget_record", **forget)) == {"deleted": []}  # already gone
        assert (await _call(client, "list_records", user_id="alice"))["count"] == 0
        listed = await _call(client, "list_records", user_id="bob")
        assert [r["text"] for r in listed["records"]] == ["I collect vintage typewriters."]


@pytest.fixture
def logged_mem(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[PersonaMem]:
    """A memory that logs every call, so `context` names an interaction to report the answer on."""
    config = PipelineConfig(log_interactions=True)
    with PersonaMem.open(tmp_path / "logged", encoder=encoder, pipeline=config) as memory:
        yield memory


async def test_an_agent_reports_its_answer_on_the_context_it_was_given(logged_mem: PersonaMem) -> None:
    logged_mem.add("ana", "I keep bees on my roof.")
    logged_mem.add("bo", "I collect vintage typewriters.")
    async with Client(build_server(logged_mem)) as client:
        [tool] = [t for t in (await client.list_tools()).tools if t.name == "report_answer"]
        hints = tool.annotations
        assert hints is not None and not hints.read_only_hint and not hints.destructive_hint
        assert hints.idempotent_hint  # reporting again replaces the answer

        given = await client.call_tool("context", {"user_id": "ana", "query": "what are my hobbies?"})
        interaction_id = _ok(given)["interaction_id"]
        assert [block.text for block in given.content if isinstance(block, TextContent)] == [
            _ok(given)["result"],  # what the model reads first is still the bare context
            f"(interaction_id {interaction_id}: pass it to report_answer with the answer you give)",
        ]
        for user, named in (("bo", interaction_id), ("ana", "0" * 32)):  # another user's call, and none
            refused = await client.call_tool(
                "report_answer", {"user_id": user, "interaction_id": named, "answer": "Beekeeping."}
            )
            assert refused.is_error and f"user {user!r} has no logged interaction {named!r}" in _text(refused)
        [logged] = logged_mem.inspection.interactions("ana")
        assert logged.feedback is None

        answer = {"user_id": "ana", "interaction_id": interaction_id, "answer": "You keep bees."}
        assert await _call(client, "report_answer", **answer, rating=1) == {"reported": True}
        [logged] = logged_mem.inspection.interactions("ana")
        assert logged.feedback is not None
        assert (logged.feedback.answer, logged.feedback.rating) == ("You keep bees.", 1.0)

        unlogged = await client.call_tool("context", {"user_id": "nobody", "query": "hobbies"})
        assert _ok(unlogged)["interaction_id"] is None and len(unlogged.content) == 1  # no user, no log


async def test_list_records_pages_in_insertion_order(mem: PersonaMem) -> None:
    mem.add_many([f"Fact number {i} about my garden." for i in range(7)], user_id="ana")
    async with Client(build_server(mem)) as client:
        page = await _call(client, "list_records", user_id="ana", limit=3, offset=5)
        assert page["count"] == 7
        assert [r["text"] for r in page["records"]] == [f"Fact number {i} about my garden." for i in (5, 6)]
        assert (await _call(client, "list_records", user_id="nobody")) == {"count": 0, "records": []}


async def test_preferences_reads_the_stored_memory_and_never_calls_the_llm(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    llm = FakeLLM()
    config = PipelineConfig(preference_memory="atomic", first_stage="dense")
    with PersonaMem.open(tmp_path / "store", encoder=encoder, pipeline=config, llm=llm) as mem:
        mem.add_many([{"id": "r0", "text": "I'm vegan.", "category": "food"}], user_id="ana")
        mem.store.flush()
        memories = mem.pipeline().memories
        assert memories is not None
        built = PreferenceMemory(
            "ana",
            within={"food": [Statement("Eats no animal products.", ("r0",))]},
            revision=mem.store.revision("ana"),
            extractor=memories.name,
        )
        assert mem.store.set_latest("ana", NAMESPACE, memories.name, built.to_json())
        async with Client(build_server(mem)) as client:
            found = await _call(client, "preferences", user_id="ana")
            assert found["within"] == {"food": [{"text": "Eats no animal products.", "evidence": ["r0"]}]}
            assert (found["text"], found["stale"]) == (built.text(), False)
            mem.add("ana", "I started eating fish again.", category="food")
            mem.store.flush()
            assert (await _call(client, "preferences", user_id="ana"))["stale"] is True
            nobody = await _call(client, "preferences", user_id="nobody")
            assert (nobody["within"], nobody["cross"], nobody["stale"]) == ({}, [], False)
            mem.add("bo", "I collect stamps.")  # records, and no memory built from them yet
            never_built = await _call(client, "preferences", user_id="bo")
            assert (never_built["within"], never_built["stale"]) == ({}, True)
            # one view of a stored memory: the inspector's /v1/ui/memory returns the SDK's stored_memory
            for user in ("ana", "nobody", "bo"):
                assert await _call(client, "preferences", user_id=user) == {
                    **mem.inspection.stored_memory(user).to_json(),
                    "warnings": [],  # the shape of GET /v1/memory: nothing fell back, it only read
                }
        assert llm.calls == 0


async def test_preferences_without_a_preference_memory_says_so(mem: PersonaMem) -> None:
    async with Client(build_server(mem)) as client:
        refused = await client.call_tool("preferences", {"user_id": "ana"})
        assert refused.is_error and "keeps no preference memory" in _text(refused)


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.enable_socket
async def test_http_tools_need_a_key_and_see_only_the_keys_tenant(tmp_path: Path) -> None:
    catalog = SqlCatalog(f"sqlite:///{tmp_path / 'personamem.sqlite'}")
    acme, acme_key = KeyRing(catalog).create("acme")
    other, _ = KeyRing(catalog).create("other")
    catalog.close()
    with personamem_server(tmp_path) as url:
        async with _over_http(url, {"Authorization": f"Bearer {acme}"}) as a:
            assert {tool.name for tool in (await a.list_tools()).tools} == TOOLS
            stored = await _call(a, "remember", user_id="alice", text="My locker code is 4711.")
            hits = (await _call(a, "recall", user_id="alice", query="locker code"))["hits"]
            assert [h["id"] for h in hits] == [stored["id"]]
            history = await _call(a, "record_history", user_id="alice", record_id=stored["id"])
            [added] = history["events"]  # the key is the actor of what its calls wrote
            assert (added["event"], added["actor"]) == ("added", f"key:{acme_key.key_id}@acme")
        async with _over_http(url, {"X-API-Key": other}) as b:  # the REST API's other header
            assert (await _call(b, "recall", user_id="alice", query="locker code"))["hits"] == []
            assert (await _call(b, "list_records", user_id="alice"))["count"] == 0
            history = await _call(b, "record_history", user_id="alice", record_id=stored["id"])
            assert history == {"events": []}
            forget = {"user_id": "alice", "record_id": stored["id"]}
            assert (await _call(b, "forget_record", **forget)) == {"deleted": []}
            assert "4711" not in (await _call(b, "context", user_id="alice", query="locker code"))["result"]
            await _call(b, "remember", user_id="alice", text="I prefer window seats.")
        async with _over_http(url, {"Authorization": f"Bearer {acme}"}) as a:
            listed = await _call(a, "list_records", user_id="alice")
            assert [r["text"] for r in listed["records"]] == ["My locker code is 4711."]

        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        accept = {"Accept": "application/json, text/event-stream"}
        for headers in ({}, {"Authorization": "Bearer pm_nothere_secret"}, {"X-API-Key": "not-a-key"}):
            answer = httpx.post(f"{url}/mcp", json=call, headers={**accept, **headers}, timeout=30)
            assert answer.status_code == 401, headers
            assert answer.json()["error"]["type"] == "AuthenticationError"
            assert answer.headers["www-authenticate"] == "Bearer"
        with pytest.raises(ExceptionGroup) as refused:  # the SDK's task groups wrap its error
            async with _over_http(url, {}) as anonymous:
                await anonymous.list_tools()
        assert refused.group_contains(MCPError, match="error response")
        assert httpx.get(f"{url}/v1/health", timeout=30).json()["status"] == "ok"


@pytest.mark.slow
def test_example_langgraph_agent_drives_the_tools_over_stdio(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE},
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    maya, tom = out.split("== tom")
    assert "vegan" in maya and "barbecue" not in maya.lower()
    assert "Barbecue" in tom and "vegan" not in tom
    assert "forgot 1 record" in maya
    assert "trails" not in maya.split("forgot 1 record")[1]
    assert maya.count("(answer reported)") == 2 and tom.count("(answer reported)") == 1  # each context's


def _python(script: str, store: Path) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh interpreter (its imports are its own), given the store folder."""
    return subprocess.run(
        [sys.executable, "-c", script, str(store)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **OFFLINE},
        check=False,
    )


_MCP_ON_FIRST_CALL = """
import sys
from fastapi.testclient import TestClient
from personamem import PersonaMem
from personamem.server import create_app

with TestClient(create_app(PersonaMem.open(sys.argv[1]))) as http:
    assert http.get("/v1/health").json()["status"] == "ok"
    print("before /mcp:", "mcp" in sys.modules)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    answer = http.post("/mcp", json=call, headers={"Accept": "application/json, text/event-stream"})
    print(answer.status_code, answer.json()["error"]["type"], "after /mcp:", "mcp" in sys.modules)
"""


@pytest.mark.slow
def test_a_server_loads_the_mcp_sdk_on_the_first_mcp_call(tmp_path: Path) -> None:
    """A third of a worker's start was importing the SDK; a server no agent calls never pays it."""
    done = _python(_MCP_ON_FIRST_CALL, tmp_path / "store")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["before /mcp: False", "401 AuthenticationError after /mcp: True"]


_WITHOUT_MCP = """
import importlib.abc, sys

class NoMcp(importlib.abc.MetaPathFinder):  # as if the mcp extra were not installed
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] == "mcp":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, NoMcp())
from fastapi.testclient import TestClient
from personamem import PersonaMem
from personamem.cli import main
from personamem.server import create_app

with TestClient(create_app(PersonaMem.open(sys.argv[1]))) as http:
    answer = http.post("/mcp", json={})
    print(answer.status_code, answer.json()["error"]["message"])
    assert http.get("/v1/health").json()["status"] == "ok"
sys.exit(main(["--store", sys.argv[1], "mcp"]))
"""


@pytest.mark.slow
def test_without_the_mcp_extra_serve_and_the_cli_name_the_install(tmp_path: Path) -> None:
    done = _python(_WITHOUT_MCP, tmp_path / "store")
    install = 'pip install "personamem[mcp]"'
    assert done.stdout.startswith(f"501 mcp not installed: {install}"), done.stdout + done.stderr[-2000:]
    assert done.returncode == 1 and install in done.stderr


async def test_an_agent_replaces_a_fact_and_recalls_as_of(mem: PersonaMem) -> None:
    async with Client(build_server(mem)) as client:
        old = await _call(client, "remember", user_id="ana", text="I live in Lisbon.", kind="knowledge")
        cello = await _call(
            client, "remember", user_id="ana", text="I play the cello in a community orchestra."
        )
        near = await _call(client, "remember", user_id="ana", text="I play cello in a community orchestra.")
        assert near["duplicate_of"] == cello["id"]
        new = await _call(
            client, "remember", user_id="ana", text="I moved to Porto.", kind="knowledge", replaces=old["id"]
        )
        assert new["supersedes"] == old["id"]
        now = await _call(client, "recall", user_id="ana", query="where do I live?", k=2)
        assert now["hits"][0]["text"] == "I moved to Porto."
        assert "I live in Lisbon." not in [h["text"] for h in now["hits"]]
        then = await _call(client, "recall", user_id="ana", query="where do I live?", as_of="2000-01-01")
        assert "I moved to Porto." not in [h["text"] for h in then["hits"]]  # it did not hold yet
        refused = await client.call_tool("remember", {"user_id": "ana", "text": "x", "replaces": "nope"})
        assert refused.is_error and "no record 'nope'" in _text(refused)
