"""The SDK's operations and their results, declared once for every way of reaching a memory.

:class:`MemoryApi` is the protocol of the operations a memory offers, in process
(:class:`~personamem.memory.PersonaMem`), over HTTP (:class:`~personamem.client.Client`) and, each
call awaited, in an event loop (:class:`~personamem.client.AsyncClient`). The pydantic models are the
one JSON shape of each result: ``Context.to_json()``, the REST answers, ``personamem context --json``
and the MCP tools dump them, and the clients read the server's answers back with ``model_validate``,
so a field added here reaches every surface at once. Nothing here imports FastAPI, so the SDK, the CLI
and the MCP server use it without the ``server`` extra.

A new operation is a method of :class:`MemoryApi`, a result model here and its row in
:data:`ROUTES` (verb, path, key scope, OpenAPI tag, request models from
:mod:`personamem.request_models`, answer model, status); then ``PersonaMem`` does it, ``remote.py``
sends it (one generator: the request built with the row's models, the answer read with its model)
and each client gets a one-line stub. The server answers it from the row alone when the request's
fields are the call's arguments by name and the answer model has ``of(result, notes)`` (an
:class:`Answer` does); otherwise it needs a handler, declared and checked at the row
(``personamem.server.routes.serves``). ``tests/test_contract_api.py`` fails until ``PersonaMem``,
``Client`` and ``AsyncClient`` all have it with the protocol's signature, and a behaviour test in
``personamem.testing.MemoryContract`` runs it in process and over HTTP, where
:meth:`~personamem.testing.MemoryContract.served` lets it compare the server's own JSON with the SDK's.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, Self, TypeVar, Unpack
from urllib.parse import quote

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainSerializer, RootModel, computed_field

from personamem.errors import InvalidInputError, PersonaMemDeprecationWarning
from personamem.interactions import FeedbackReport
from personamem.llm.base import Usage
from personamem.portability import Imported
from personamem.records import Record, RecordEvent
from personamem.request_models import (
    AddIn,
    BatchIn,
    ContextIn,
    CountQuery,
    DeleteIn,
    ExportQuery,
    HistoryQuery,
    ImportQuery,
    RecordsQuery,
    RefreshIn,
    RerankIn,
    SearchIn,
    SupersedeIn,
    TtlIn,
    UpdateIn,
    UserQuery,
)
from personamem.retrieval.base import Hit
from personamem.store.read import ReadOptions

if TYPE_CHECKING:
    from personamem.preference import PreferenceMemory
    from personamem.store.duplicates import DuplicatePolicy

__all__ = [
    "ROUTES",
    "Answer",
    "Built",
    "Context",
    "Count",
    "Deleted",
    "FeedbackResult",
    "Forgotten",
    "Hits",
    "JsonHits",
    "JsonRecords",
    "MemoryApi",
    "PreferenceAnswer",
    "PreferenceStatement",
    "Purged",
    "RecordBatch",
    "RecordHistory",
    "RecordPage",
    "Reranked",
    "Route",
    "Scope",
    "SearchResult",
    "StoredRecord",
    "Ttl",
    "Users",
    "hit_json",
    "method_of",
    "record_json",
]

M = TypeVar("M")

Scope = Literal["read", "write", "admin"]
"""The smallest API key scope that may call an operation (``personamem.store.keys.KeyScope``)."""


@dataclass(frozen=True)
class Route:
    """Where and how the REST server answers one operation: the row both sides read.

    ``body`` and ``query`` are the request's models (:mod:`personamem.request_models`): the server
    reads the request with them and the clients build it with them. ``response`` is the answer's
    model (None: not JSON, as an export's lines). ``scope`` is the key scope the call needs and
    ``tag`` the OpenAPI group it is listed under. ``{record_id}`` in a path is the record's id,
    percent-encoded (ids may hold ``/``); user ids travel in bodies and query strings, never in paths.

    An operation whose request fields are its arguments by name and whose answer model has
    ``of(result, notes)`` needs no handler: the server answers it from this row alone
    (``personamem.server.routes``).
    """

    verb: str
    path: str
    response: type[BaseModel] | None
    scope: Scope
    tag: str
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    status: int = 200

    @property
    def served(self) -> str:
        """The path as the server declares it (a record id may hold encoded slashes)."""
        return self.path.replace("{record_id}", "{record_id:path}")

    def to(self, record_id: str | None = None) -> str:
        """The path a client requests."""
        return self.path if record_id is None else self.path.format(record_id=quote(record_id, safe=""))


def record_json(record: Record) -> dict[str, Any]:
    """A record's one JSON shape: its fields and ``duplicate_of`` (``add``'s report, else null).

    ``duplicate_of`` is never stored (``Record.model_dump`` leaves it out, for storage and exports),
    so every answer that holds a record adds it here.
    """
    return {**record.model_dump(mode="json"), "duplicate_of": record.duplicate_of}


def hit_json(hit: Hit) -> dict[str, Any]:
    """A hit's one JSON shape: rank, score, the record's id and text, and the whole record.

    Id and text are repeated at the top for the readers that need only them (a script reading the
    CLI's JSON lines, an agent citing or forgetting a record over MCP); clients read ``record``.
    """
    record = hit.record
    return {
        "rank": hit.rank,
        "score": float(hit.score),
        "id": record.id,
        "text": record.text,
        "record": record_json(record),
    }


def _records_json(records: list[Record]) -> list[dict[str, Any]]:
    return [record_json(r) for r in records]


def _hits_json(hits: list[Hit]) -> list[dict[str, Any]]:
    return [hit_json(h) for h in hits]


JsonRecords = Annotated[list[Record], PlainSerializer(_records_json, return_type=list[dict[str, Any]])]
"""Records that dump as :func:`record_json` and validate from it."""
JsonHits = Annotated[list[Hit], PlainSerializer(_hits_json, return_type=list[dict[str, Any]])]
"""Hits that dump as :func:`hit_json` and validate from it (``id`` and ``text`` are read from ``record``)."""


class Hits(list[Hit]):
    """A search's hits, best first, and what the call was (still a list: callers ignoring it see no change).

    Attributes:
        interaction_id: the logged call's id (None: logging is off or the user unknown).
        usage: tokens the call cost, as :attr:`Context.usage` counts them.
        timings_ms: milliseconds per stage that ran.
    """

    def __init__(
        self,
        hits: Iterable[Hit] = (),
        *,
        interaction_id: str | None = None,
        usage: Usage | None = None,
        timings_ms: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__(hits)
        self.interaction_id = interaction_id
        self.usage = Usage() if usage is None else usage
        self.timings_ms = dict(timings_ms or {})


class Context(BaseModel):
    """What the LLM should see for one query, and what it cost to find.

    Attributes:
        text: the rendered context, within budget: the preference memory under ``Preferences:``,
            then the records under ``Records:``; the record lines alone without a memory.
        hits: the records in ``text``, in order, with the score of the stage that placed them
            (``records`` in JSON).
        dropped: profile records left out because they did not fit the budget.
        tokens: tokens ``text`` takes.
        budget_tokens: the budget it was fitted to.
        usage: tokens this call cost: the LLM's (outputs served from the cache cost none) and the
            word pieces the sentence encoder ran (``encoder_tokens``; an encoder of your own counts none).
        timings_ms: milliseconds per stage.
        warnings: LLM stages that fell back to the stage without them (a stale memory among
            them), and why; a memory cut to fit the budget is noted here too.
        memory: the preference memory as ``text`` shows it (``""``: empty, or no room); None when
            the pipeline has none.
        interaction_id: the logged call's id, for :meth:`PersonaMem.feedback
            <personamem.memory.PersonaMem.feedback>` (None: logging is off, or the user is unknown).
        first_stage: which first stage served the call (``first_stage``, ``query_encoder``,
            ``dense_weight`` and ``rrf_k`` where hybrid fused) and why (``chosen_by``: what
            ``personamem improve`` fitted it on, or ``default``).
    """

    model_config = ConfigDict(frozen=True, validate_by_name=True, serialize_by_alias=True)

    text: str
    hits: JsonHits = Field(validation_alias=AliasChoices("records", "hits"), serialization_alias="records")
    dropped: JsonHits
    tokens: int
    budget_tokens: int
    usage: Usage = Field(default_factory=Usage)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)
    memory: str | None = None
    interaction_id: str | None = None
    first_stage: dict[str, Any] = Field(default_factory=dict)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def degraded(self) -> bool:
        """Whether an LLM stage fell back (``warnings`` say which and why)."""
        return bool(self.warnings)

    def to_json(self) -> dict[str, Any]:
        """The context's one JSON shape: what ``POST /v1/context`` answers and ``context --json`` prints."""
        return self.model_dump(mode="json")

    @classmethod
    def of(cls, result: Context, notes: Sequence[str] = ()) -> Context:
        """The answer for a context call: the context itself, whose ``warnings`` already hold ``notes``.

        So ``POST /v1/context`` is served from its row (``server/routes.py``'s ``row_handler``).
        """
        return result


class SearchResult(BaseModel):
    """A search's one JSON shape: ``POST /v1/search`` and the MCP ``recall`` tool answer it."""

    model_config = ConfigDict(frozen=True)

    hits: JsonHits
    interaction_id: str | None = None
    usage: Usage = Field(default_factory=Usage)
    """Tokens the call cost, as ``Context.usage`` counts them."""
    timings_ms: dict[str, float] = Field(default_factory=dict)
    """Milliseconds per stage that ran."""
    warnings: list[str] = Field(default_factory=list)
    """LLM stages that fell back, and why (collected by the server around the call)."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def degraded(self) -> bool:
        """Whether an LLM stage fell back (``warnings`` say which and why)."""
        return bool(self.warnings)

    @classmethod
    def of(cls, hits: Hits, notes: Sequence[str] = ()) -> SearchResult:
        """The result of a search that returned ``hits`` and noted ``notes`` (``collect_fallbacks``)."""
        return cls(
            hits=list(hits),
            interaction_id=hits.interaction_id,
            usage=hits.usage,
            timings_ms=hits.timings_ms,
            warnings=list(notes),
        )

    def to_hits(self) -> Hits:
        """The SDK's :class:`Hits`, as ``PersonaMem.search`` returns them."""
        return Hits(
            self.hits, interaction_id=self.interaction_id, usage=self.usage, timings_ms=self.timings_ms
        )


class RecordPage(BaseModel):
    """A page of a user's records and their total count (``GET /v1/records``, MCP ``list_records``)."""

    count: int
    records: JsonRecords


class Answer(BaseModel):
    """An answer that holds one call's result: its first field, and ``warnings`` where it has them.

    :meth:`of` is what the server answers for an operation it serves from its row alone.
    """

    @classmethod
    def of(cls, result: Any, notes: Sequence[str] = ()) -> Self:
        """The answer for ``result``, with the LLM fallbacks noted during the call (``collect_fallbacks``)."""
        first = next(iter(cls.model_fields))
        noted = {"warnings": list(notes)} if "warnings" in cls.model_fields else {}
        return cls.model_validate({first: result, **noted})


class RecordHistory(Answer):
    """A record's events, oldest first (``GET /v1/history``, MCP ``record_history``)."""

    events: list[RecordEvent]


class RecordBatch(BaseModel):
    """The records a batch stored, in the order given (``POST /v1/records/batch``)."""

    records: JsonRecords


class Deleted(Answer):
    """The ids a delete erased (``POST /v1/records/delete``, MCP ``forget_record``)."""

    deleted: list[str]


class Forgotten(Answer):
    """Whether the user existed before ``forget`` erased them."""

    forgotten: bool


class FeedbackResult(BaseModel):
    """The interaction a feedback report was attached to."""

    interaction_id: str


class Count(Answer):
    """Records of one user, or of every user."""

    count: int


class Users(Answer):
    """Users with at least one record, sorted."""

    users: list[str]


class Purged(Answer):
    """Expired records a purge erased."""

    purged: int


class Ttl(Answer):
    """The default time-to-live of new records in seconds (None: they do not expire)."""

    seconds: float | None

    @classmethod
    def of(cls, result: Any, notes: Sequence[str] = ()) -> Self:
        """The answer for :meth:`PersonaMem.ttl <personamem.memory.PersonaMem.ttl>`'s timedelta (or None)."""
        return cls(seconds=None if result is None else result.total_seconds())

    def to_timedelta(self) -> timedelta | None:
        """As :meth:`PersonaMem.ttl <personamem.memory.PersonaMem.ttl>` returns it."""
        return None if self.seconds is None else timedelta(seconds=self.seconds)


class Built(Answer):
    """Preference memories a refresh built."""

    built: int


class Reranked(Answer):
    """Candidate indices, best first, and the LLM fallbacks met on the way."""

    order: list[int]
    warnings: list[str] = Field(default_factory=list)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def degraded(self) -> bool:
        """Whether an LLM stage fell back (``warnings`` say which and why)."""
        return bool(self.warnings)


class StoredRecord(RootModel[Record]):
    """One record as an answer holds it (:func:`record_json`): ``add``, ``supersede``, ``get``, ``update``."""

    root: Annotated[Record, PlainSerializer(record_json, return_type=dict[str, Any])]


class PreferenceStatement(BaseModel):
    """One statement of a preference memory and the ids of the records that support it."""

    text: str
    evidence: list[str]


class PreferenceAnswer(BaseModel):
    """A preference memory as ``GET /v1/memory`` and the MCP ``preferences`` tool answer it.

    The fields of ``PreferenceMemory.to_json`` (read back with ``PreferenceMemory.from_json``) and
    ``warnings``: why a rebuild failed or did not finish (``stale`` is then true).
    """

    user_id: str
    within: dict[str, list[PreferenceStatement]]
    cross: list[PreferenceStatement]
    revision: str | None
    extractor: str
    notes: list[str]
    stale: bool
    seconds: float
    text: str
    words: int
    warnings: list[str] = Field(default_factory=list)

    @classmethod
    def of(cls, memory: PreferenceMemory, notes: Sequence[str] = ()) -> Self:
        """The answer for ``memory``, with the fallbacks its rebuild noted."""
        return cls.model_validate({**memory.to_json(), "warnings": list(notes)})


ROUTES: dict[str, Route] = {
    # records: one user's records; the tenant's time-to-live
    "add": Route("POST", "/v1/records", StoredRecord, "write", "records", body=AddIn, status=201),
    "add_many": Route("POST", "/v1/records/batch", RecordBatch, "write", "records", body=BatchIn, status=201),
    "supersede": Route(
        "POST", "/v1/records/supersede", StoredRecord, "write", "records", body=SupersedeIn, status=201
    ),
    "delete": Route("POST", "/v1/records/delete", Deleted, "write", "records", body=DeleteIn),
    "update": Route(
        "PATCH", "/v1/records/{record_id}", StoredRecord, "write", "records", body=UpdateIn, query=UserQuery
    ),
    "get": Route("GET", "/v1/records/{record_id}", StoredRecord, "read", "records", query=UserQuery),
    "records": Route("GET", "/v1/records", RecordPage, "read", "records", query=RecordsQuery),
    "history": Route("GET", "/v1/history", RecordHistory, "read", "records", query=HistoryQuery),
    "ttl": Route("GET", "/v1/ttl", Ttl, "admin", "records"),
    "set_ttl": Route("PUT", "/v1/ttl", Ttl, "admin", "records", body=TtlIn),
    "purge": Route("POST", "/v1/purge", Purged, "admin", "records"),
    "export": Route("GET", "/v1/export", None, "read", "records", query=ExportQuery),
    "import_user": Route("POST", "/v1/import", Imported, "write", "records", query=ImportQuery, status=201),
    # retrieval
    "search": Route("POST", "/v1/search", SearchResult, "read", "retrieval", body=SearchIn),
    "context": Route("POST", "/v1/context", Context, "read", "retrieval", body=ContextIn),
    "feedback": Route("POST", "/v1/feedback", FeedbackResult, "write", "retrieval", body=FeedbackReport),
    # memory: the users' preference memories
    "memory": Route("GET", "/v1/memory", PreferenceAnswer, "read", "memory", query=UserQuery),
    "refresh_memories": Route("POST", "/v1/memory/refresh", Built, "write", "memory", body=RefreshIn),
    "rerank": Route("POST", "/v1/rerank", Reranked, "write", "memory", body=RerankIn),
    # users
    "users": Route("GET", "/v1/users", Users, "read", "users"),
    "forget": Route("DELETE", "/v1/users", Forgotten, "write", "users", query=UserQuery),
    "count": Route("GET", "/v1/count", Count, "read", "users", query=CountQuery),
}
"""Each :class:`MemoryApi` operation's route row: the server declares and reads it from here
(``personamem/server/routes.py``) and the clients build and read it from here (``personamem/remote.py``)."""


def method_of(method: M, pipeline: M, *, stacklevel: int = 3) -> M:
    """The method a ``context`` call runs: ``method``, or the deprecated ``pipeline=`` with a warning.

    The rule: ``method=`` picks what one call runs (a method name, or in process a config);
    ``pipeline=`` configures a memory when it is opened (``PersonaMem.open(path, pipeline=...)``).

    Raises:
        InvalidInputError: both are given.
    """
    if pipeline is None:
        return method
    if method is not None:
        raise InvalidInputError("give method= only: pipeline= is its deprecated name, not a second choice")
    warnings.warn(
        "context(pipeline=...) is deprecated: pass method=... (pipeline= configures a memory when it "
        "is opened)",
        PersonaMemDeprecationWarning,
        stacklevel=stacklevel,
    )
    return pipeline


class MemoryApi(Protocol):
    """The operations every memory offers: ``PersonaMem`` in process, ``Client`` over HTTP.

    ``AsyncClient`` offers the same methods as coroutines. Arguments, results and exceptions are the
    same whichever answers; :class:`~personamem.memory.PersonaMem` documents each in full.
    """

    def add(
        self,
        user_id: str,
        text: str = "",
        *,
        duplicates: DuplicatePolicy | str | None = None,
        duplicate_threshold: float | None = None,
        **fields: Any,
    ) -> Record:
        """Remember one record of ``user_id``; returns it with its id (and ``duplicate_of``)."""
        ...

    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Record]:
        """Remember many records; all are validated before any is written."""
        ...

    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them; returns the ids deleted."""
        ...

    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record; returns the new record."""
        ...

    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        ...

    def supersede(self, user_id: str, old_id: str, text: str = "", **fields: Any) -> Record:
        """Store a record that replaces ``old_id`` as the current fact; the old one stays in history."""
        ...

    def ttl(self) -> timedelta | None:
        """The default time-to-live of new records (None: they do not expire)."""
        ...

    def set_ttl(self, ttl: timedelta | float | None) -> None:
        """Make new records expire ``ttl`` (a timedelta or seconds) after they are added; None: never."""
        ...

    def purge(self) -> int:
        """Erase the expired records now; returns how many."""
        ...

    def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """The user's top ``k`` records for ``query`` by ``method`` (None: the pipeline the memory serves)."""
        ...

    def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context:
        """What to paste into the LLM's prompt for ``query``, within the budget."""
        ...

    def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """Report what happened after a logged ``search`` or ``context`` call."""
        ...

    def memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory."""
        ...

    def refresh_memories(
        self,
        user_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 8,
    ) -> int:
        """Build the missing or stale preference memories ahead of time; returns how many were built."""
        ...

    def rerank(self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Indices of ``candidates``, best first, by the user's preference memory."""
        ...

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        ...

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        ...

    def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of the user's record, oldest first; an erased record's without its text."""
        ...

    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's export (JSON Lines) to ``path``; returns the lines after the header."""
        ...

    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export, as its user or as ``user_id``; importing twice changes nothing."""
        ...

    def users(self) -> list[str]:
        """Users with at least one record."""
        ...

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        ...
