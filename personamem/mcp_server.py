"""The memory as MCP tools: ``personamem mcp`` (stdio) and ``/mcp`` in ``personamem serve`` (HTTP).

Eight tools, each one ``PersonaMem`` call: ``remember`` (:meth:`~PersonaMem.add`, or
:meth:`~PersonaMem.supersede` when it ``replaces`` a record), ``recall``
(:meth:`~PersonaMem.search`), ``context`` (:meth:`~PersonaMem.context`), ``report_answer``
(:meth:`~PersonaMem.feedback` on a logged ``context`` or ``recall``, checked to be the named user's),
``forget_record`` (:meth:`~PersonaMem.delete` of one record), ``list_records``
(:meth:`~PersonaMem.records`, a page), ``record_history`` (:meth:`~PersonaMem.history`) and
``preferences`` (the stored preference memory, read without an LLM call). Erasing a whole user
is left to the SDK, the CLI and the REST API: an agent should not be one tool call from it.

Over stdio every call works on the memory the command opened. Over HTTP a gate in front of the
transport resolves the request's API key to its tenant exactly as the REST routes do (a request
without a valid key, or over its key's rate, never reaches the transport) and hands the tools that
tenant's view and the key's scope, so isolation is the store's, as everywhere else; the key is the
actor of the writes its calls make, as in the REST API. A tool that
writes (``remember``, ``forget_record``, ``report_answer``: those without ``read_only_hint``) needs a
``write`` key; a ``read`` key's call is refused as a tool error naming both scopes. The transport is
stateless, so ``serve --workers N`` needs no session affinity. Answers are
:mod:`personamem.contract`'s JSON shapes, the REST API's: a record is ``record_json``'s,
``recall`` a ``SearchResult`` (each hit with its rank, score, id, text and whole record, and the
call's ``usage`` and ``timings_ms``), ``context`` the bare text plus a :class:`ContextAnswer` (and,
for a logged call, a second text naming the interaction id to report the answer on),
``list_records`` a ``RecordPage``, ``record_history`` a ``RecordHistory``, ``forget_record`` a
``Deleted``. A
:class:`~personamem.errors.PersonaMemError` becomes a tool error with its message (what the REST API
puts in ``error.message``); anything else is logged and reported as a failed call without details,
and the server keeps serving.

(No ``from __future__ import annotations``: the SDK reads the tools' annotations to build their
JSON schemas.)
"""

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from personamem.contract import (
    Deleted,
    PreferenceAnswer,
    RecordHistory,
    RecordPage,
    SearchResult,
    record_json,
)
from personamem.errors import InvalidInputError, PersonaMemError
from personamem.llm.base import Usage
from personamem.memory import PersonaMem
from personamem.methods import SERVED_BY_DEFAULT, ServedMethods
from personamem.records import JsonScalar, RecordKind, check_user_id
from personamem.store.history import key_actor, set_actor
from personamem.store.keys import ApiKey, KeyScope, require_scope

__all__ = ["HttpEndpoint", "build_server", "http_endpoint", "run_stdio"]

MAX_K = 100
"""Most hits one ``recall`` returns (an agent's context, not a bulk export)."""
MAX_PAGE = 1000
"""Most records one ``list_records`` page holds."""
_SCOPE_KEY = "personamem.memory"
"""Where the HTTP gate leaves the tenant's memory in the request's ASGI scope for the tools."""
_KEY_SCOPE_KEY = "personamem.key_scope"
"""Where it leaves the API key's :class:`~personamem.store.keys.KeyScope`."""

INSTRUCTIONS = (
    "Long-term memory of each user, kept by personamem. Before answering a user, call `context` (the text "
    "to put in your prompt) or `recall` (the matching records with ids and scores) with their user id and "
    "message; once you have answered, pass the answer to `report_answer` with the interaction id `context` "
    "gave, so the memory learns what helped. Call `remember` with a durable fact, preference or event the "
    "user shared. Use "
    "`list_records` to see what is stored and `forget_record` to erase one record the user asks you to "
    "forget. Every call names one user; users never see each other's records."
)

UserId = Annotated[
    str,
    Field(description="Whose memory: the application's id for the user (a non-empty string, e.g. 'alice')."),
]
RecordId = Annotated[
    str, Field(description="The id of one of the user's records (from remember, recall or list_records).")
]
Query = Annotated[
    str,
    Field(description="The user's message or question, in their words; matched by meaning.", min_length=1),
]
Filters = Annotated[
    dict[str, Any] | None,
    Field(
        description='Only records matching this filter, e.g. {"metadata.topic": "food", "timestamp": '
        '{"gte": "2025-01-01"}} or {"or": [{"kind": "knowledge"}, {"metadata.source": {"in": '
        '["chat-1"]}}]}. Fields: kind, category, role, timestamp, valid_from, valid_until, metadata.<key>; a '
        "value means equals, or an object of operators eq, ne, in, nin, gt, gte, lt, lte, contains; "
        "'and'/'or' take a list of filters, 'not' one. Times are ISO 8601. Default: no filter."
    ),
]


class ContextAnswer(BaseModel):
    """The ``context`` tool's structured answer: the text the model reads, and what finding it cost.

    ``result`` is the text's key because the tool's structured answer was ``{"result": text}``
    before the cost was added; the plain content stays the bare text, which is what an agent reads.
    """

    result: str
    usage: Usage
    timings_ms: dict[str, float]
    interaction_id: str | None = None
    """The logged call's id for ``report_answer``; None when the server does not log calls (or the user
    has no records)."""


MemoryOf = Callable[[Context], PersonaMem]
_Tool = TypeVar("_Tool", bound=Callable[..., Any])


@contextlib.contextmanager
def _tool_errors() -> Iterator[None]:
    """A personamem error as a tool error carrying its message (what the model reads to correct itself)."""
    try:
        yield
    except PersonaMemError as exc:
        raise ToolError(str(exc)) from exc


@contextlib.contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Undo what ``MCPServer()`` does to the root logger (``logging.basicConfig``): the host owns logging."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@dataclass(frozen=True)
class _Tools:
    """What each group of tools registers with: the server, and the memory each call works on."""

    server: MCPServer
    memory_of: MemoryOf

    def tool(self, hints: ToolAnnotations) -> Callable[[_Tool], _Tool]:
        """Register a tool, its docstring (dedented) as its description, with ``hints`` for clients."""

        def register(fn: _Tool) -> _Tool:
            self.server.add_tool(fn, description=inspect.cleandoc(fn.__doc__ or ""), annotations=hints)
            return fn

        return register

    def memory(self, ctx: Context, needed: KeyScope) -> PersonaMem:
        """The memory of this call, once an HTTP request's key is found to have the ``needed`` scope."""
        _check_scope(ctx, needed)
        return self.memory_of(ctx)


def _build(memory_of: MemoryOf) -> MCPServer:
    """The eight tools over the memory ``memory_of`` gives each call."""
    with _root_logging_kept():
        server: MCPServer = MCPServer(
            "personamem", instructions=INSTRUCTIONS, version=version("personamem"), log_level="WARNING"
        )
    tools = _Tools(server, memory_of)
    _add_remember(tools)
    _add_retrieval_tools(tools)
    _add_report_answer(tools)
    _add_record_tools(tools)
    return server


def _add_remember(tools: _Tools) -> None:
    """``remember``: the one tool that adds (or replaces) a record."""

    @tools.tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    def remember(
        user_id: UserId,
        text: Annotated[
            str,
            Field(
                description="What to remember, as one self-contained statement in the user's terms "
                "(e.g. 'I am vegetarian and allergic to peanuts.').",
                min_length=1,
            ),
        ],
        ctx: Context,
        kind: Annotated[
            RecordKind,
            Field(
                description="What the text is: knowledge (a fact or preference the user stated), "
                "conversation, dialog, purchase, post, qa, or note (anything else)."
            ),
        ] = RecordKind.NOTE,
        metadata: Annotated[
            dict[str, JsonScalar] | None,
            Field(
                description="Optional flat key-value pairs kept with the record (strings, numbers, booleans)."
            ),
        ] = None,
        replaces: Annotated[
            str | None,
            Field(
                description="The id of a stored record this statement replaces (e.g. a changed name or "
                "address): that record is kept as history and no longer recalled."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Store one memory of a user, searchable at once; returns the stored record with its id.

        Storing the same text again keeps one record; `duplicate_of` names a stored record that says nearly
        the same. Keep the returned id to forget or replace this record later.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.WRITE)
            user = check_user_id(user_id)
            if replaces is not None:
                return record_json(mem.supersede(user, replaces, text, kind=kind, metadata=metadata or {}))
            return record_json(mem.add(user, text, kind=kind, metadata=metadata or {}))


def _add_retrieval_tools(tools: _Tools) -> None:
    """``recall`` and ``context``: what the memory says about a query."""

    @tools.tool(ToolAnnotations(read_only_hint=True))
    def recall(
        user_id: UserId,
        query: Query,
        ctx: Context,
        k: Annotated[int, Field(description="How many records to return, best first.", ge=1, le=MAX_K)] = 5,
        method: Annotated[
            str | None,
            Field(
                description="How to rank; leave it out for the server's own ranking (its live pipeline: the "
                "learned default unless its operator improved it). Or name one: 'dense' (by meaning), 'bm25' "
                "(by shared words), "
                "'hybrid' (both), 'default' (the package default) or another method the server serves: "
                f"{', '.join(SERVED_BY_DEFAULT.names())}, and any its operator added (an unknown name's "
                "error lists them). Methods that need an LLM fail unless the server has one."
            ),
        ] = None,
        as_of: Annotated[
            str | None,
            Field(
                description="Recall the facts that held at this time (ISO 8601, e.g. '2025-01-31'); "
                "default: the facts current now."
            ),
        ] = None,
        filters: Filters = None,
    ) -> dict[str, Any]:
        """The user's stored records that best match the query, best first: id, text, score, the record.

        Only current facts: a replaced record is left out unless `as_of` names a time it held. An unknown
        user has no records (an empty list). Use `context` instead for text to put in a prompt.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.READ)
            hits = mem.search(check_user_id(user_id), query, k=k, method=method, as_of=as_of, filters=filters)
        return SearchResult.of(hits).model_dump(mode="json")

    @tools.tool(ToolAnnotations(read_only_hint=True))
    def context(
        user_id: UserId,
        query: Query,
        ctx: Context,
        budget: Annotated[
            int | None,
            Field(
                description="Most tokens of context to return (default: the server's configured budget).",
                ge=1,
            ),
        ] = None,
        filters: Filters = None,
    ) -> Annotated[CallToolResult, ContextAnswer]:
        """The text to put in your prompt before answering the user: what their memory says about the query.

        Fitted to the token budget, most relevant first (with the user's preferences first, where the server
        keeps them). An empty string means nothing is stored for this user.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.READ)
            found = mem.context(check_user_id(user_id), query, budget_tokens=budget, filters=filters)
        answer = ContextAnswer(
            result=found.text,
            usage=found.usage,
            timings_ms=found.timings_ms,
            interaction_id=found.interaction_id,
        )
        notes = [] if found.interaction_id is None else [_report_note(found.interaction_id)]
        return CallToolResult(
            content=[TextContent(type="text", text=found.text), *notes],
            structured_content=answer.model_dump(mode="json"),
        )


def _report_note(interaction_id: str) -> TextContent:
    """What tells the agent, beside the context it reads, how to report its answer on this call."""
    text = f"(interaction_id {interaction_id}: pass it to report_answer with the answer you give)"
    return TextContent(type="text", text=text)


def _add_report_answer(tools: _Tools) -> None:
    """``report_answer``: the agent's answer, as feedback on the logged call it drew on."""

    @tools.tool(ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True))
    def report_answer(
        user_id: UserId,
        interaction_id: Annotated[
            str,
            Field(
                description="The interaction_id that `context` (or `recall`) returned for this question.",
                min_length=1,
            ),
        ],
        answer: Annotated[
            str, Field(description="The answer you gave the user, in full, as you gave it.", min_length=1)
        ],
        ctx: Context,
        rating: Annotated[
            float | None,
            Field(
                description="How well the answer served the user, higher is better (e.g. 1 or 0), if known."
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Report the answer you gave after a `context` call, so the memory learns which records helped.

        Call it once you have answered, with the `interaction_id` from `context` (or `recall`). Reporting
        again replaces the answer. Fails for an id that is not one of this user's logged calls.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.WRITE)
            user = check_user_id(user_id)
            # feedback is scoped to the tenant, not the user: one user's agent must not report on another's
            if mem.inspection.interaction_user(interaction_id) != user:
                raise InvalidInputError(f"user {user!r} has no logged interaction {interaction_id!r}")
            mem.feedback(interaction_id, answer=answer, rating=rating)
        return {"reported": True}


def _add_record_tools(tools: _Tools) -> None:
    """Tools on stored records by id or page, and the stored preference memory."""

    @tools.tool(ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True))
    def forget_record(
        user_id: UserId,
        record_id: RecordId,
        ctx: Context,
    ) -> dict[str, Any]:
        """Erase one of the user's records for good (text, vector and anything derived from it).

        Returns the ids deleted: empty when the user has no record with this id.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.WRITE)
            return Deleted(deleted=mem.delete(check_user_id(user_id), [record_id])).model_dump(mode="json")

    @tools.tool(ToolAnnotations(read_only_hint=True))
    def list_records(
        user_id: UserId,
        ctx: Context,
        limit: Annotated[int, Field(description="Most records to return.", ge=1, le=MAX_PAGE)] = 50,
        offset: Annotated[
            int, Field(description="How many records to skip (to page through a long memory).", ge=0)
        ] = 0,
    ) -> dict[str, Any]:
        """The user's stored records in the order they were added, a page at a time, with the total count."""
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.READ)
            records = mem.records(check_user_id(user_id))
        page = RecordPage(count=len(records), records=records[offset : offset + limit])
        return page.model_dump(mode="json")

    @tools.tool(ToolAnnotations(read_only_hint=True))
    def record_history(
        user_id: UserId,
        record_id: RecordId,
        ctx: Context,
    ) -> dict[str, Any]:
        """What happened to one record, oldest first: added, updated, superseded, deleted, expired, forgotten.

        Each event has its time, who made it and the record's text as of then; an erased record's events
        have no text. Empty when the user never had a record with this id.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.READ)
            events = mem.history(check_user_id(user_id), record_id)
        return RecordHistory(events=events).model_dump(mode="json")

    @tools.tool(ToolAnnotations(read_only_hint=True))
    def preferences(user_id: UserId, ctx: Context) -> dict[str, Any]:
        """The user's preference memory as last built: distilled statements with the record ids behind them.

        Reads what is stored; it never runs the LLM. `text` is what `context` shows the model; `stale` is true
        when the user's records changed since it was built (the next `context` call rebuilds it). Fails when
        the server keeps no preference memory.
        """
        with _tool_errors():
            mem = tools.memory(ctx, KeyScope.READ)
            if mem.pipeline().memories is None:
                raise ToolError(
                    "this server keeps no preference memory (its pipeline's preference_memory is 'none'); "
                    "use `context` or `recall`"
                )
            return PreferenceAnswer.of(mem.inspection.stored_memory(user_id)).model_dump(mode="json")


def build_server(mem: PersonaMem, *, methods: ServedMethods | None = SERVED_BY_DEFAULT) -> MCPServer:
    """The MCP server whose every tool call works on ``mem`` (a local store, or one tenant's view).

    ``methods`` become ``mem.served_methods``: the agent picks ``recall``'s method, and an agent can
    be steered by what it reads, so by default it may name no file or folder
    (:class:`~personamem.methods.ServedMethods`); None lets it name any.
    """
    mem.served_methods = methods
    return _build(lambda _: mem)


def run_stdio(mem: PersonaMem, *, methods: ServedMethods | None = SERVED_BY_DEFAULT) -> None:
    """Serve ``mem`` over stdin/stdout until the client closes the pipe (what ``personamem mcp`` runs)."""
    build_server(mem, methods=methods).run("stdio")


class _Gate:
    """ASGI: a request whose key names a tenant goes on with that tenant's memory in its scope."""

    def __init__(
        self, authenticate: Callable[[Request], tuple[PersonaMem, ApiKey]], server: MCPServer
    ) -> None:
        self.authenticate = authenticate
        self.server = server

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # the key lookup reads SQL; raising here (a 401) is answered by the host app's error handler
        mem, key = await run_in_threadpool(self.authenticate, Request(scope))
        set_actor(key_actor(key.key_id, key.tenant))  # in this request's task, which runs its tools
        passed = {**scope, _SCOPE_KEY: mem, _KEY_SCOPE_KEY: key.scope}
        await self.server.session_manager.handle_request(passed, receive, send)


def _check_scope(ctx: Context, needed: KeyScope) -> None:
    """Refuse an HTTP call whose key's scope is below ``needed`` (stdio and in-process calls have no key)."""
    request = ctx.request_context.request
    if isinstance(request, Request):
        scope = request.scope.get(_KEY_SCOPE_KEY)
        require_scope(scope if isinstance(scope, KeyScope) else None, needed, "this tool")


def _memory_in_request(ctx: Context) -> PersonaMem:
    request = ctx.request_context.request
    mem = request.scope.get(_SCOPE_KEY) if isinstance(request, Request) else None
    if not isinstance(mem, PersonaMem):  # only the gate's requests reach the tools
        raise RuntimeError("an MCP request reached the tools without passing the API-key gate")
    return mem


@dataclass(frozen=True)
class HttpEndpoint:
    """The streamable-HTTP MCP endpoint of the REST app.

    Attributes:
        app: the ASGI app to route (``/mcp``): the key gate in front of the transport.
        server: the MCP server behind it.
    """

    app: ASGIApp
    server: MCPServer

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve requests while the block runs (enter it in the host app's lifespan); re-enterable."""
        # a session manager runs once; a fresh one per lifespan lets a test app start twice
        self.server.streamable_http_app(
            stateless_http=True,  # any worker answers any request: no session to find
            json_response=True,  # a tool call is one answer: no event stream to hold open
            # every request needs an API key, which a page rebinding a host name to us does not have
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        async with self.server.session_manager.run():
            yield


def http_endpoint(authenticate: Callable[[Request], tuple[PersonaMem, ApiKey]]) -> HttpEndpoint:
    """The MCP endpoint whose calls work on the memory ``authenticate`` gives the request.

    ``authenticate`` runs in a worker thread for every request; it returns the key's tenant view and
    the key (whose scope each tool checks, and which is the actor of the calls' writes), or raises
    (an ``HTTPException(401)`` for a missing or unknown key, a 429 over the key's rate), and nothing
    reaches the tools.
    """
    server = _build(_memory_in_request)
    return HttpEndpoint(_Gate(authenticate, server), server)
