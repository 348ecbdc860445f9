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
    """The operations every memory offers, documented once: here.

    :class:`~personamem.memory.PersonaMem` answers them in process, ``Client`` over HTTP and
    ``AsyncClient`` awaited; arguments, results and exceptions are the same whichever answers. A
    surface may add optional keywords of its own (``PersonaMem.add_many``'s ``batch_size``).
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
        """Remember one record of ``user_id``; returns the record that now holds it, with its id.

        ``fields`` are :class:`~personamem.records.Record` fields (``id``, ``kind``, ``category``,
        ``timestamp``, ``metadata``, ``input``, ``output``, ``valid_from``, ``valid_until``,
        ``expires_at``). Adding the same record again is a no-op. A near-duplicate of a current
        record (cosine ``duplicate_threshold``, default the memory's ``duplicate_threshold``) is
        named in the returned record's ``duplicate_of``; ``duplicates`` (default the memory's
        ``duplicates``, ``keep``) is ``keep`` (store it too), ``skip`` (return the existing record)
        or ``merge-metadata`` (add its metadata to the existing record and return that).

        Raises:
            InvalidRecordError: the record is not valid.
            InvalidInputError: an unknown ``duplicates`` policy or a threshold that is not a cosine.
        """
        ...

    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> list[Record]:
        """Remember many records; all are validated before any is written.

        Args:
            records: records, dicts with Record fields, or plain texts (of ``user_id``).
            user_id: owner of records that name none (a record naming another user is an error).
            progress: called with the count of records finished after each durable batch.

        Raises:
            InvalidRecordError: naming the position of the first bad record; nothing was written.
        """
        ...

    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them; returns the ids deleted.

        Ids the user does not have are skipped. The user's cached derived values (LLM outputs that
        may quote a deleted record) are dropped; the cost grows with the user's record count.

        Raises:
            InvalidInputError: a user id or record id that is not a non-empty string.
        """
        ...

    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record (``text``, ``category``, ``metadata``...); returns the new record.

        The record keeps its id; the new version is validated like any record, written as ``add``
        writes, and re-indexed.

        Raises:
            InvalidInputError: the user has no record ``record_id``, or ``changes`` include an
                ``id`` or a ``user_id`` (delete and add instead).
            InvalidRecordError: the changed record is not valid.
        """
        ...

    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        ...

    def supersede(self, user_id: str, old_id: str, text: str = "", **fields: Any) -> Record:
        """Record that a new fact replaces record ``old_id`` ("my name is Bob" after "...Alice").

        The old record stays in the user's history (until deleted) with its validity ended where
        the new one's begins (``valid_from``, default now); search and context show current facts,
        ``as_of=`` the facts of a past time, ``include_superseded=True`` all. ``fields`` are the new
        record's, as in :meth:`add`. Returns the new record as stored.

        Raises:
            InvalidInputError: the user has no record ``old_id``, or it is no longer current.
            InvalidRecordError: the new record is not valid.
        """
        ...

    def ttl(self) -> timedelta | None:
        """The default time-to-live of new records (the tenant's, else the store's); None: keep."""
        ...

    def set_ttl(self, ttl: timedelta | float | None) -> None:
        """Make new records expire ``ttl`` (a timedelta or seconds) after they are added; None: never.

        Stored with the data, so every process and the server apply it; set on a tenant's view
        (``PersonaMem.tenant``, or a server key's tenant), it is that tenant's default. A record's
        own ``expires_at`` wins.
        """
        ...

    def purge(self) -> int:
        """Erase the records whose expiry has passed, now; returns how many.

        A background sweep does this while the store is open (every ``PERSONAMEM_SWEEP_S``
        seconds, default 60; 0 turns it off); expired records are hidden from every read before
        either runs.
        """
        ...

    def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """The user's top ``k`` records for ``query`` by ``method`` (see :mod:`personamem.methods`).

        No method: the pipeline the memory serves (``PersonaMem.config``: the store's live pipeline,
        else the package default), as :meth:`context` ranks. A method with a profile selector ranks
        its profile first, then the other candidates. An unknown user gets an empty list. With
        ``log_interactions`` on, ``hits.interaction_id`` names the logged call for :meth:`feedback`.
        The read options (:class:`~personamem.store.read.ReadOptions`): only facts current now are
        searched, unless ``as_of`` (a datetime or ISO 8601 string; naive means UTC) names another
        time or ``include_superseded`` asks for every version; expired records never are.
        ``filters`` keeps only the records it admits, e.g. ``{"metadata.topic": "food",
        "timestamp": {"gte": "2025-01-01"}}`` (the grammar: :mod:`personamem.store.filters`); the
        top ``k`` is filled from those, whatever the method.

        Raises:
            MethodError: an unknown method, or one that needs an LLM when none is configured.
            InvalidInputError: an ``as_of`` that is not a time, or a bad filter (the message names the part).
        """
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
        """What to paste into the LLM's prompt for ``query``: the user's profile, within the budget.

        Args:
            user_id: whose memory.
            query: the user's message.
            budget_tokens: most tokens of context (default: the pipeline's ``budget_tokens``).
            method: a method name applied over the configured pipeline (default: the configured
                pipeline).
            read: :meth:`search`'s read options: the context is built from the facts current at
                ``as_of`` (default: now), or from every version, of the records ``filters`` admits
                (the preference memory, a summary of the whole history, is not narrowed).

        Raises:
            MethodError: an unknown method, or one that needs an LLM when none is configured.
            InvalidInputError: a bad filter or ``as_of``.
        """
        ...

    def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """Report what happened after a logged ``search`` or ``context`` call (its ``interaction_id``).

        Args:
            interaction_id: from ``Context.interaction_id`` or ``Hits.interaction_id``.
            answer: the answer the user accepted (what PURPLE learns to make likely).
            rating: the user's rating of it, higher is better.
            used_record_ids: the records the answer used (PG-Ret's and MemRerank's positives).

        Fields left None keep what an earlier call reported. A call served interleaved with a
        candidate on trial counts for that trial (``personamem/trials.py``), which this report may decide.

        Raises:
            InvalidInputError: an unknown interaction (logging off, another tenant's, or the user was
                forgotten), nothing to report, or a field of the wrong type (the checks are
                :class:`~personamem.interactions.FeedbackReport`'s, which the REST body shares).
        """
        ...

    def memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory, as the configured pipeline's context shows it.

        Built once per history revision: the first call after a write rebuilds it, waiting up to the
        pipeline's ``memory_timeout_s``; past it, or when the LLM fails, the older memory comes back
        with ``stale=True`` (and a :class:`~personamem.errors.MemoryFallbackWarning`). An unknown
        user or an empty history gives an empty memory without an LLM call.

        Raises:
            MethodError: the pipeline has no preference memory, or its extractor needs an LLM and
                none is configured.
        """
        ...

    def refresh_memories(
        self,
        user_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 8,
    ) -> int:
        """Build the missing or stale preference memories ahead of time; returns how many were built.

        Users whose memory is current are skipped, so an interrupted refresh resumes where it stopped;
        users without records have nothing to build and are skipped too.

        Args:
            user_ids: whose memories (None: every user).
            progress: called with the number of users finished after each batch (skipped ones
                included), so the calls add up to the number of users.
            batch_size: users per LLM call.

        Raises:
            MethodError: as :meth:`memory`.
            LLMError: the LLM failed; the batches before it are kept.
        """
        ...

    def rerank(self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Order ``candidates`` for the user's request by their preference memory; best first.

        MemRerank's setwise reranker: the configured LLM picks the best of up to five candidates at a
        time, shown the user's memory (:meth:`memory`) and ``query``, and a heap sort of such choices
        ranks the list (about ``N + k·log4 N`` choices for the top ``k`` of ``N``).

        Args:
            user_id: whose preferences.
            query: the request (may be empty: then the choice is what the user would pick).
            candidates: texts to order (products, answers, documents).
            k: how many indices to return (default: all).

        Returns:
            Indices into ``candidates``, best first.

        Raises:
            MethodError: as :meth:`memory`, or no LLM is configured.
            InvalidInputError: a candidate or the query is not a string.
        """
        ...

    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        ...

    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        ...

    def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of the user's record, oldest first: added, updated, superseded, then erased.

        Each says when and who (``"sdk"``, or the API key and tenant of a server request) and, while
        the record exists, its text as of that event. Erasure wins: after ``delete``, expiry or
        ``forget`` only the events, their times and actors are left, with no text. A record id the
        user never had has no events.
        """
        ...

    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's records (and, with ``interactions``, logged calls) to a JSON Lines file.

        The file imports into any store with :meth:`import_user` (the format is in
        :mod:`personamem.portability`); returns how many records and interactions it holds.
        """
        ...

    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export (from :meth:`export`), as that user or as ``user_id``.

        The file is validated whole first; records already here unchanged, and interactions already
        logged, are skipped, so importing twice changes nothing.

        Raises:
            IngestError: the file is not an export, or a line is not valid (the message names it).
        """
        ...

    def users(self) -> list[str]:
        """Users with at least one record."""
        ...

    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        ...
