"""Every operation of the contract on every surface, or listed here as absent with the reason.

A new ``MemoryApi`` operation fails this test until it has a row: the route its clients call (which
the server must answer), its CLI command and its MCP tool, each of the last two naming the command or
tool, or saying why there is none. ``Client`` and ``AsyncClient`` must have the method.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import typer.main
from fastapi import APIRouter
from fastapi.routing import iter_route_contexts
from mcp import Client as McpClient

from personamem import PersonaMem, SentenceEncoder, remote
from personamem.cli.app import app as cli
from personamem.client import AsyncClient, Client
from personamem.contract import ROUTES, MemoryApi
from personamem.errors import InvalidInputError
from personamem.mcp_server import build_server
from personamem.server.app import create_app
from personamem.server.auth import Writer
from personamem.server.routes import row_handler, serves

_NOT_FOR_AGENTS = "absent: an agent recalls and remembers; store administration stays with people"
_NOT_YET_CLI = "absent: no command yet (the SDK and both clients rerank candidates by the user's memory)"

_READ = {"read": {"as_of": None, "include_superseded": False, "filters": None}}  # search's and context's

SURFACES: dict[str, tuple[dict[str, Any], str, str]] = {
    # operation: (the remote call's arguments, CLI command, MCP tool)
    "add": ({"user_id": "u", "text": "t", "fields": {}}, "ingest", "remember"),
    "add_many": ({"records": ["t"], "user_id": "u", "progress": None}, "ingest", "remember"),
    "delete": ({"user_id": "u", "record_ids": ["r"]}, "delete", "forget_record"),
    "update": ({"user_id": "u", "record_id": "r", "changes": {"text": "t"}}, "update", _NOT_FOR_AGENTS),
    "forget": ({"user_id": "u"}, "forget", _NOT_FOR_AGENTS),
    "supersede": ({"user_id": "u", "old_id": "r", "text": "t", "fields": {}}, "supersede", "remember"),
    "ttl": ({}, "ttl", _NOT_FOR_AGENTS),
    "set_ttl": ({"ttl": 60}, "ttl", _NOT_FOR_AGENTS),
    "purge": ({}, "purge", _NOT_FOR_AGENTS),
    "search": ({"user_id": "u", "query": "q", "k": 1, "method": None, **_READ}, "search", "recall"),
    "context": (
        {"user_id": "u", "query": "q", "budget_tokens": None, "method": None, **_READ},
        "context",
        "context",
    ),
    "feedback": (
        {"interaction_id": "i", "answer": "a", "rating": None, "used_record_ids": None},
        "feedback",
        "report_answer",
    ),
    "memory": ({"user_id": "u"}, "memory", "preferences"),
    "refresh_memories": (
        {"user_ids": ["u"], "progress": None, "batch_size": 1},
        "memory refresh",
        _NOT_FOR_AGENTS,
    ),
    "rerank": ({"user_id": "u", "query": "q", "candidates": ["a"], "k": None}, _NOT_YET_CLI, _NOT_FOR_AGENTS),
    "get": ({"user_id": "u", "record_id": "r"}, "get", "list_records"),
    "records": ({"user_id": "u"}, "records", "list_records"),
    "history": ({"user_id": "u", "record_id": "r"}, "history", "record_history"),
    "export": ({"user_id": "u", "path": "{tmp}/out.jsonl", "interactions": False}, "export", _NOT_FOR_AGENTS),
    "import_user": ({"path": "{tmp}/in.jsonl", "user_id": None}, "import", _NOT_FOR_AGENTS),
    "users": ({}, "users", _NOT_FOR_AGENTS),
    "count": ({"user_id": None}, "users", _NOT_FOR_AGENTS),
}
_REMOTE = {"users": "list_users"}  # remote's name where it differs from the operation's


def _remote(name: str) -> Any:
    """The clients' call of ``name``: its generator in ``remote``, else ``remote.answered`` by its row."""
    found = getattr(remote, _REMOTE.get(name, name), None)
    return found if found is not None else functools.partial(remote.answered, name)


def _operations() -> list[str]:
    return sorted(n for n, v in vars(MemoryApi).items() if callable(v) and not n.startswith("_"))


def test_every_operation_has_a_row_and_a_route() -> None:
    assert sorted(SURFACES) == _operations() == sorted(ROUTES)


def test_both_clients_have_every_operation() -> None:
    for name in _operations():
        assert callable(getattr(Client, name, None)), name
        assert inspect.iscoroutinefunction(getattr(AsyncClient, name, None)), name


def _cli_commands() -> set[str]:
    def walk(command: Any, prefix: str = "") -> Iterator[str]:
        for name, sub in getattr(command, "commands", {}).items():
            yield prefix + name
            yield from walk(sub, f"{prefix}{name} ")

    return set(walk(typer.main.get_command(cli)))


async def test_every_cli_command_and_mcp_tool_named_exists(mem: PersonaMem) -> None:
    commands = _cli_commands()
    async with McpClient(build_server(mem)) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
    for name, (_, command, tool) in SURFACES.items():
        assert command.startswith("absent: ") or command in commands, (name, command)
        assert tool.startswith("absent: ") or tool in tools, (name, tool)


@pytest.fixture
def routes(tmp_path: Path, encoder: SentenceEncoder) -> Iterator[list[Any]]:
    with PersonaMem.open(tmp_path / "served", encoder=encoder) as memory:
        routes = iter_route_contexts(create_app(memory).routes)  # the included routers' routes too
        yield [r for r in routes if hasattr(r, "path_regex") and hasattr(r, "methods")]


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_the_route_each_client_call_uses_is_served(name: str, routes: list[Any], tmp_path: Path) -> None:
    arguments = {
        k: v.format(tmp=tmp_path) if isinstance(v, str) and "{tmp}" in v else v
        for k, v in SURFACES[name][0].items()
    }
    (tmp_path / "in.jsonl").write_text("")
    request = next(_remote(name)(**arguments))
    assert request.method == ROUTES[name].verb, name
    served = [r for r in routes if r.path_regex.match(request.path) and request.method in r.methods]
    assert served, f"{name}: the clients call {request.method} {request.path}, which no route answers"
    assert ROUTES[name].served in {r.path for r in served}, name  # the server declared it from ROUTES


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_the_server_answers_each_operation_with_its_rows_model(name: str, routes: list[Any]) -> None:
    row = ROUTES[name]
    served = next(r for r in routes if r.path == row.served and row.verb in r.methods)
    assert (served.response_model, served.status_code) == (row.response, row.status), name


def test_a_handler_that_does_not_read_the_rows_request_model_is_refused() -> None:
    def search(body: dict[str, Any]) -> None:  # a hand-read body: what the clients send is not checked
        del body

    with pytest.raises(TypeError, match="does not read SearchIn"):
        serves(APIRouter(tags=["retrieval"]), "search")(search)


def test_a_handler_that_needs_another_scope_than_its_row_is_refused() -> None:
    def purge(tenant: Writer) -> None:  # the row says admin: a write key would purge the tenant
        del tenant

    with pytest.raises(TypeError, match="needs a 'admin' key"):
        serves(APIRouter(tags=["records"]), "purge")(purge)
    with pytest.raises(TypeError, match="listed under 'records'"):
        serves(APIRouter(tags=["users"]), "purge")


def test_an_operation_the_row_cannot_serve_alone_needs_a_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="'delete' has no handler and takes no argument ids"):
        row_handler("delete")  # DeleteIn says ids, the call record_ids
    with pytest.raises(TypeError, match="'add' has no handler and its answer model has no of"):
        row_handler("add")
    row = ROUTES["history"]
    with monkeypatch.context() as patched:  # a record id in the path would never reach the call
        patched.setitem(ROUTES, "history", replace(row, path="/v1/history/{record_id}"))
        with pytest.raises(TypeError, match=r"'history' has no handler and its path \S+ holds a parameter"):
            row_handler("history")


def test_a_request_the_server_would_refuse_never_leaves_the_client() -> None:
    with pytest.raises(InvalidInputError, match=r"^body\.k: k must be at least 1"):
        next(remote.search("u", "q", 0, None, {}))
    with pytest.raises(InvalidInputError, match=r"^body\.batch_size: .* less than or equal to 64"):
        next(remote.refresh_memories(["u"], None, 65))
