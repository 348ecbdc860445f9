"""LangChain adapter: retriever, profile compressor, persistent chat history, an LLM and an answer reporter.

A user's memory becomes a retriever, a :class:`~personamem.profile.ProfileSelector` a document
compressor, chat turns retrievable records, and a frozen LLM a LangChain LLM so chains run offline;
:class:`PersonaMemAnswerReporter`, a callback handler, reports each chain's answer as feedback on
the retrievals it drew on, so ``improve`` learns from traffic without application code.

The retriever ranks with any method of :mod:`personamem.methods` (``dense``, ``hybrid``, ``pbr``,
``listwise``, ``purple:<checkpoint folder>``, ``pipeline:<file.toml>``...) or a
:class:`~personamem.pipeline.PipelineConfig`, exactly as ``PersonaMem.search`` does; the compressor
takes a selector by name (``relevance``, ``listwise``, ``purple:<checkpoint folder>``) from
``PersonaMem.selector``, so a trained PURPLE checkpoint can pick the profile from any retriever's
Documents. Methods and selectors that need an LLM use the one the memory was opened with.

The retriever, the chat history and the reporter call only the operations of
:class:`~personamem.contract.MemoryApi`, so they work over a :class:`~personamem.client.Client` of a
``personamem serve`` as well as in process; the compressor and the LLM run models of this process and
take a :class:`PersonaMem` or a model.

Install with ``pip install "personamem[langchain]"``. Every component is bound to one user, so a chain
built for a user can only ever read that user's records.

Not provided: a ``langchain_core.stores.BaseStore``. It is a flat key-value store over opaque values
with per-key delete; a user's memory is an append-only set of searchable records with no per-record
delete, so such a facade would either fake deletion or hide the user scoping in the keys.
"""

from __future__ import annotations

import threading
import uuid
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from personamem.errors import MissingExtraError, PersonaMemError, PersonaMemWarning

try:
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        BaseCallbackHandler,
        CallbackManagerForLLMRun,
        CallbackManagerForRetrieverRun,
        Callbacks,
    )
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.documents import BaseDocumentCompressor, Document
    from langchain_core.language_models.llms import LLM
    from langchain_core.messages import AIMessage, BaseMessage, ChatMessage, HumanMessage, SystemMessage
    from langchain_core.outputs import LLMResult
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import run_in_executor
except ImportError as exc:  # an adapter module: without its framework it has nothing to offer
    raise MissingExtraError(["langchain-core"], "langchain") from exc
from pydantic import ConfigDict, Field, SkipValidation, StrictStr, model_validator

from personamem.client import AsyncClient
from personamem.contract import Hits, MemoryApi
from personamem.llm.base import FrozenLLM, Prompt
from personamem.memory import PersonaMem
from personamem.pipeline import PipelineConfig
from personamem.profile import ProfileSelector
from personamem.records import Record, RecordKind, check_user_id, parse_record
from personamem.retrieval.base import Hit
from personamem.store.filters import parse_filters
from personamem.store.read import ReadOptions

__all__ = [
    "PersonaMemAnswerReporter",
    "PersonaMemChatMessageHistory",
    "PersonaMemCompressor",
    "PersonaMemLLM",
    "PersonaMemRetriever",
]

_MESSAGE_TYPES: dict[str, type[BaseMessage]] = {
    "user": HumanMessage,
    "assistant": AIMessage,
    "system": SystemMessage,
}
"""Message classes by the record's role (``Record.role``: LangChain's ``human`` is kept as ``user``)."""


def _hit_to_document(hit: Hit, interaction_id: str | None = None) -> Document:
    """A search hit as a Document; our keys win over same-named keys of the record's own metadata.

    They win because downstream code (and :class:`PersonaMemCompressor`) trusts ``user_id`` and
    ``record_id`` to say whose record this is. ``interaction_id`` (where the pipeline logs
    interactions) is what ``PersonaMem.feedback`` takes.
    """
    record = hit.record
    extra = {} if interaction_id is None else {"interaction_id": interaction_id}
    return Document(
        page_content=record.text,
        id=record.id,
        metadata={
            **record.metadata,
            "record_id": record.id,
            "user_id": record.user_id,
            "kind": record.kind.value,
            "score": hit.score,
            "rank": hit.rank,
            "category": record.category,
            "timestamp": record.timestamp.isoformat() if record.timestamp else None,
            **extra,
        },
    )


class PersonaMemRetriever(BaseRetriever):
    """One user's records for a query, as Documents, best first, in process or from a server.

    ``memory`` is any :class:`~personamem.contract.MemoryApi`: a :class:`PersonaMem` in process, a
    :class:`~personamem.client.Client` over a ``personamem serve`` (``memory=Client(url, key)``), or an
    :class:`~personamem.client.AsyncClient` for ``ainvoke`` alone. The retriever calls only the
    contract's ``search``, so the Documents are the hits ``memory.search`` returns: with a profile
    selector, the profile first, then the rest of the candidates.

    ``method`` is a name from :mod:`personamem.methods` (``dense``, ``bm25``, ``hybrid``, ``pbr``,
    ``listwise``, ``purple:<checkpoint folder>``, ``pipeline:<file.toml>``...), applied over the
    memory's configured pipeline (none: that pipeline itself, as ``search`` ranks with no method).
    ``pipeline`` is a whole :class:`PipelineConfig` instead (give one or the other); a config is an
    object of this process, so it needs a ``PersonaMem`` (a client is refused: name a method the
    server serves). Over a ``PersonaMem`` the pipeline is built when the retriever is (a PURPLE
    checkpoint is loaded once per memory), so an unknown name, a missing checkpoint or an LLM method
    on a memory without an LLM fails here rather than on the first query. Over a client that check is
    left to the first query, where the server answers the same ``MethodError``: the contract has no
    cheap call that builds a method without searching for some user.

    Only facts current now are found, unless ``as_of`` names another time (a datetime or ISO 8601
    string) or ``include_superseded`` asks for every version (see :meth:`PersonaMem.supersede`);
    ``filters`` keeps the records it admits, as in :meth:`PersonaMem.search` (checked here).

    ``k`` may also be given per call (``retriever.invoke(query, k=2)``). Async calls await an
    ``AsyncClient``'s search, and otherwise run the sync search in LangChain's executor (the memory and
    the client are thread-safe); the async method is overridden also because LangChain's default
    wrapper drops call keywords such as ``k``.

    Examples:
        >>> retriever = PersonaMemRetriever(memory=mem, user_id="alice", k=3)  # doctest: +SKIP
        >>> retriever.invoke("what should I cook tonight?")  # doctest: +SKIP
        >>> PersonaMemRetriever(memory=Client(url, key), user_id="alice", method="hybrid")  # doctest: +SKIP
    """

    # a protocol pydantic cannot check with isinstance; _buildable checks what the retriever calls
    memory: SkipValidation[MemoryApi | AsyncClient]
    user_id: StrictStr  # strict: bytes would be coerced to another user's id
    k: int = Field(default=4, ge=1)
    method: str | None = None
    pipeline: PipelineConfig | None = None
    as_of: datetime | str | None = None
    include_superseded: bool = False
    filters: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _buildable(self) -> PersonaMemRetriever:
        if self.pipeline is not None and "method" in self.model_fields_set:
            raise ValueError("give method or pipeline, not both")
        parse_filters(self.filters)  # a bad filter fails here (InvalidInputError is a ValueError)
        if isinstance(self.memory, PersonaMem):
            # built (and kept by the memory) now, so a missing checkpoint or an LLM method on a memory
            # without an LLM fails here (MethodError is a ValueError; CheckpointError passes through)
            self.memory.pipeline(self.method if self.pipeline is None else self.pipeline)
        elif not callable(getattr(self.memory, "search", None)):
            raise ValueError(
                f"memory must be a PersonaMem, a Client or an AsyncClient, got {type(self.memory).__name__}"
            )
        elif self.pipeline is not None:
            raise ValueError(
                "pipeline= (a PipelineConfig) runs in process only: give a PersonaMem as memory, or "
                "name a method the server serves with method="
            )
        return self

    def _k(self, k: int | None) -> int:
        k = self.k if k is None else k
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        return k

    def _reading(self) -> ReadOptions:
        """The read options every search passes: ``as_of``, ``include_superseded``, ``filters``."""
        return {"as_of": self.as_of, "include_superseded": self.include_superseded, "filters": self.filters}

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        memory = self.memory
        if isinstance(memory, AsyncClient):
            raise TypeError("this retriever holds an AsyncClient: call ainvoke, or give it a Client")
        # a config only with a PersonaMem (_buildable), whose search takes one as its method
        ranking: Any = self.method if self.pipeline is None else self.pipeline
        hits = memory.search(self.user_id, query, self._k(k), ranking, **self._reading())
        return [_hit_to_document(hit, hits.interaction_id) for hit in hits]

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        memory = self.memory
        if not isinstance(memory, AsyncClient):
            return await run_in_executor(
                None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), k=k
            )
        hits: Hits = await memory.search(self.user_id, query, self._k(k), self.method, **self._reading())
        return [_hit_to_document(hit, hits.interaction_id) for hit in hits]


class PersonaMemCompressor(BaseDocumentCompressor):
    """Picks and orders the profile from any retriever's Documents with a :class:`ProfileSelector`.

    In process only: the selector runs here, on Documents that are not the memory's records, and the
    contract has no operation that selects among a caller's candidates, so :meth:`from_memory` takes a
    :class:`PersonaMem` (its ``selector``), not a client.

    Documents become the user's candidate records (id from ``doc.id``, else ``metadata["record_id"]``,
    else a content hash; duplicates by id are kept once), the selector chooses up to ``k``, and the
    chosen Documents come back in profile order with ``profile_rank`` and ``profile_score`` added to a
    copy of their metadata. Empty Documents are dropped: they give a selector nothing to judge.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    user_id: StrictStr  # strict: bytes would be coerced to another user's id
    selector: ProfileSelector
    k: int = Field(default=4, ge=1)

    @classmethod
    def from_memory(
        cls, memory: PersonaMem, user_id: str, *, k: int = 4, selector: str = "relevance"
    ) -> PersonaMemCompressor:
        """The memory's selector called ``selector``, e.g. a trained ``purple:<checkpoint folder>``.

        ``relevance`` (cosine to the query, the default), ``listwise`` (with the memory's LLM),
        ``purple:<checkpoint folder>``, ``earliest``, ``random``: see ``PersonaMem.selector``, which
        builds it once per memory and name (a PURPLE checkpoint is loaded once).

        Raises:
            MethodError: an unknown selector, or ``listwise`` on a memory without an LLM.
            CheckpointError: a PURPLE checkpoint that cannot be loaded.
        """
        return cls(user_id=user_id, selector=memory.selector(selector), k=k)

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        """The selected Documents, best first.

        Raises:
            ValueError: a Document's ``metadata["user_id"]`` names another user; mixing users'
                records into one profile would leak personal data, so it is refused rather than
                filtered.
        """
        by_id: dict[str, tuple[Document, Record]] = {}
        for doc in documents:
            owner = doc.metadata.get("user_id")
            if owner is not None and owner != self.user_id:
                raise ValueError(f"a document belongs to user {owner!r}, not {self.user_id!r}")
            if doc.page_content.strip():
                record = _document_to_record(doc, self.user_id)
                by_id.setdefault(record.id, (doc, record))
        candidates = [record for _, record in by_id.values()]
        hits = self.selector.select(self.user_id, query, candidates, self.k)
        chosen = []
        for hit in hits:
            doc = by_id[hit.record.id][0]
            metadata = {**doc.metadata, "profile_rank": hit.rank, "profile_score": hit.score}
            chosen.append(doc.model_copy(update={"metadata": metadata}))
        return chosen


def _document_to_record(doc: Document, user_id: str) -> Record:
    """A candidate record; kind, category and timestamp are kept where the metadata has valid ones."""
    meta = doc.metadata
    category = meta.get("category")
    timestamp = meta.get("timestamp")
    if isinstance(timestamp, str):
        try:
            timestamp = datetime.fromisoformat(timestamp)
        except ValueError:
            timestamp = None
    return parse_record(
        {
            "user_id": user_id,
            "text": doc.page_content,
            "id": doc.id or str(meta.get("record_id") or ""),
            "kind": _kind(meta.get("kind")),
            "category": category if isinstance(category, str) else None,
            "timestamp": timestamp if isinstance(timestamp, datetime) else None,
            "metadata": {key: value for key, value in meta.items() if _is_json_scalar(value)},
        }
    )


def _kind(value: Any) -> RecordKind:
    try:
        return RecordKind(value)
    except ValueError:
        return RecordKind.NOTE


def _is_json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


class PersonaMemChatMessageHistory(BaseChatMessageHistory):
    """One chat session of one user, stored as conversation records so past turns become searchable.

    Each message is a :attr:`RecordKind.CONVERSATION` record with its text, a UTC timestamp and
    metadata ``role`` (``user``, ``assistant``, ``system``, or a ``ChatMessage``'s own role),
    ``session_id`` and ``position`` (its index in the session when written). The record id is the
    message's id, or a fresh random one. Only role and text are kept: a message comes back as a
    Human/AI/System message or a ``ChatMessage`` with its role, with the record id as its id; tool
    calls and attachments are not stored.

    Reading lists the user's records and keeps this session's, in insertion order: fine for chat-sized
    histories, linear in the user's record count. It calls only the contract's ``records``,
    ``add_many`` and ``delete``, so ``memory`` may be a :class:`PersonaMem` or a
    :class:`~personamem.client.Client` of a server.

    Note:
        LangChain deprecated ``BaseChatMessageHistory`` in langchain-core 1.6.4 (removal in 2.0) in
        favour of LangGraph short-term memory; this class serves chains built on
        ``RunnableWithMessageHistory`` until then.
    """

    def __init__(self, memory: MemoryApi, user_id: str, session_id: str) -> None:
        super().__init__()
        self.memory = memory
        self.user_id = check_user_id(user_id)
        self.session_id = session_id

    def _session_records(self) -> list[Record]:
        return [
            record
            for record in self.memory.records(self.user_id)
            if record.kind is RecordKind.CONVERSATION
            and "role" in record.metadata
            and "position" in record.metadata
            and record.metadata.get("session_id") == self.session_id
        ]

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]  # LangChain allows a property
        """The session's messages in the order they were added."""
        return [_record_to_message(record) for record in self._session_records()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Store the messages in one durable batch.

        Raises:
            ValueError: a message has no text (e.g. an AI message holding only tool calls): there
                is nothing to remember or search.
        """
        start = len(self._session_records())
        now = datetime.now(UTC)
        records = []
        for offset, message in enumerate(messages):
            text = str(message.text)
            if not text.strip():
                raise ValueError(f"message {offset} has no text to remember")
            role = message.role if isinstance(message, ChatMessage) else message.type
            records.append(
                {
                    "text": text,
                    "id": message.id or uuid.uuid4().hex,
                    "kind": RecordKind.CONVERSATION,
                    "timestamp": now,
                    "metadata": {"role": role, "session_id": self.session_id, "position": start + offset},
                }
            )
        self.memory.add_many(records, user_id=self.user_id)

    def clear(self) -> None:
        """Delete this session's messages, leaving no trace of them; the user's other records stay."""
        self.memory.delete(self.user_id, [record.id for record in self._session_records()])


def _record_to_message(record: Record) -> BaseMessage:
    role = record.role or ""
    message_type = _MESSAGE_TYPES.get(role)
    if message_type is None:
        return ChatMessage(content=record.text, role=role, id=record.id)
    return message_type(content=record.text, id=record.id)


class PersonaMemLLM(LLM):
    """A :class:`~personamem.llm.FrozenLLM` as a LangChain text LLM, so chains run offline.

    In process only, by nature: it runs a model of this process, not a memory's operation.

    With ``chat`` (the default) the prompt string is sent as one user message, so an instruct model
    sees its chat template: the default SmolLM2-135M-Instruct answers a raw prompt with an empty
    string or an echo of it. Set ``chat=False`` for base models. Extra call keywords (``temperature``,
    ``seed``, ``max_tokens``...) go to :meth:`FrozenLLM.generate`.
    """

    llm: FrozenLLM
    max_tokens: int = Field(default=64, ge=1)
    chat: bool = True

    @property
    def _llm_type(self) -> str:
        return "personamem"

    @property
    def _identifying_params(self) -> Mapping[str, Any]:
        return {"model": self.llm.name, "max_tokens": self.max_tokens, "chat": self.chat}

    def _call(
        self,
        prompt: str,
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> str:
        sent: Prompt = [{"role": "user", "content": prompt}] if self.chat else prompt
        options = {"max_tokens": self.max_tokens, **kwargs}
        return self.llm.generate([sent], stop=stop or (), **options)[0][0]


@dataclass
class _RootRun:
    """What one outermost run has shown so far: its runs, the interactions it read, its last LLM text."""

    runs: list[UUID] = field(default_factory=list)
    interaction_ids: dict[str, None] = field(default_factory=dict)  # an ordered set
    answer: str | None = None


class PersonaMemAnswerReporter(BaseCallbackHandler):
    """Reports a chain's answer as feedback on the logged retrievals it drew on, with no application code.

    Pass it for the whole run, ``chain.invoke(question, config={"callbacks": [reporter]})``. It follows
    the run tree by ``run_id``/``parent_run_id``, collects the ``interaction_id`` of every Document a
    retriever returned (:class:`PersonaMemRetriever`'s, where the pipeline logs interactions) and keeps
    the last LLM output. When the outermost run it saw ends, it calls ``memory.feedback(interaction_id,
    answer=text)`` for each interaction id met: an answer alone is enough for ``improve`` to learn from
    (:mod:`personamem.attribution` attributes it to the served records). A run that fails reports
    nothing, nor does one without an LLM answer or without logged retrievals.

    ``memory`` is a :class:`PersonaMem` or a :class:`~personamem.client.Client` (LangChain calls a sync
    handler from worker threads under ``ainvoke`` too). A report that fails (an unknown interaction, a
    server that is down) is a :class:`~personamem.errors.PersonaMemWarning`, never an error: feedback
    must not break the chain whose answer it reports. One reporter may serve concurrent runs; each
    run's state is dropped when it ends.
    """

    def __init__(self, memory: MemoryApi) -> None:
        if isinstance(memory, AsyncClient) or not callable(getattr(memory, "feedback", None)):
            raise TypeError(f"memory must be a PersonaMem or a Client, got {type(memory).__name__}")
        super().__init__()
        self.memory = memory
        self._lock = threading.Lock()
        self._root_of: dict[UUID, UUID] = {}
        self._roots: dict[UUID, _RootRun] = {}

    def _start(self, run_id: UUID, parent_run_id: UUID | None) -> None:
        """Place a run under its root; a run whose parent this handler never saw is a root itself."""
        with self._lock:
            root = run_id if parent_run_id is None else self._root_of.get(parent_run_id, run_id)
            self._root_of[run_id] = root
            self._roots.setdefault(root, _RootRun()).runs.append(run_id)

    def _root(self, run_id: UUID) -> _RootRun | None:
        """The state of the root ``run_id`` belongs to (call with the lock held)."""
        root = self._root_of.get(run_id)
        return None if root is None else self._roots.get(root)

    def _drop(self, run_id: UUID) -> _RootRun | None:
        """Forget a root run's state, if ``run_id`` is a root; that state, or None for an inner run."""
        with self._lock:
            if self._root_of.get(run_id) != run_id:
                return None
            state = self._roots.pop(run_id)
            for run in state.runs:
                self._root_of.pop(run, None)
            return state

    def _end(self, run_id: UUID) -> None:
        """A root run that ended well reports its answer; an inner run's end changes nothing."""
        state = self._drop(run_id)
        if state is not None and state.answer and state.answer.strip():
            for interaction_id in state.interaction_ids:
                self._report(interaction_id, state.answer)

    def _report(self, interaction_id: str, answer: str) -> None:
        try:
            self.memory.feedback(interaction_id, answer=answer)
        except PersonaMemError as exc:
            warnings.warn(
                f"PersonaMemAnswerReporter could not report the answer of interaction "
                f"{interaction_id!r}: {exc}",
                PersonaMemWarning,
                stacklevel=2,
            )

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: dict[str, Any],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the run under its root."""
        self._start(run_id, parent_run_id)

    def on_retriever_start(
        self,
        serialized: dict[str, Any],
        query: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the run under its root."""
        self._start(run_id, parent_run_id)

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the run under its root."""
        self._start(run_id, parent_run_id)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[BaseMessage]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the run under its root."""
        self._start(run_id, parent_run_id)

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        """Track the run under its root (an agent's tool may retrieve)."""
        self._start(run_id, parent_run_id)

    def on_retriever_end(
        self, documents: Sequence[Document], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Keep the interaction ids the Documents carry."""
        with self._lock:
            state = self._root(run_id)
            if state is not None:
                for doc in documents:
                    interaction_id = doc.metadata.get("interaction_id")
                    if isinstance(interaction_id, str) and interaction_id:
                        state.interaction_ids[interaction_id] = None
        self._end(run_id)

    def on_llm_end(
        self, response: LLMResult, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Keep the text as the root's answer so far (the last LLM to answer is the chain's answer)."""
        if response.generations and response.generations[0]:
            with self._lock:
                state = self._root(run_id)
                if state is not None:
                    state.answer = response.generations[0][0].text
        self._end(run_id)

    def on_chain_end(
        self, outputs: dict[str, Any], *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Report, if this is the root."""
        self._end(run_id)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """Report, if this is the root."""
        self._end(run_id)

    def on_chain_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """A failed root reports nothing (an inner failure may still be recovered, e.g. by a fallback)."""
        self._drop(run_id)

    def on_retriever_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """As :meth:`on_chain_error`."""
        self._drop(run_id)

    def on_llm_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """As :meth:`on_chain_error`."""
        self._drop(run_id)

    def on_tool_error(
        self, error: BaseException, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        """As :meth:`on_chain_error`."""
        self._drop(run_id)
