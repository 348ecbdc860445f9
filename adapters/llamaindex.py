"""LlamaIndex integration: per-user retrieval, profile selection, long-term chat memory and a local LLM.

``pip install "personamem[llamaindex]"``. Every component is bound to one ``user_id`` and reads and
writes only that user's records, so two users' chats in one process never see each other's memory:
isolation comes from the store's per-user scoping, not from metadata filters a caller must remember.

- :class:`PersonaMemRetriever`: a ``BaseRetriever`` over one user's records, ranking with any method
  of :mod:`personamem.methods` (``dense``, ``hybrid``, ``pbr``, ``listwise``,
  ``purple:<checkpoint folder>``, ``pipeline:<file.toml>``...) or a
  :class:`~personamem.pipeline.PipelineConfig`, exactly as ``PersonaMem.search`` does. It honours
  ``QueryBundle.embedding``: a bundle that carries a ready query vector (e.g. a personalized one) is
  searched densely with that vector instead.
- :class:`PersonaMemProfilePostprocessor`: a node postprocessor that runs a
  :class:`~personamem.profile.ProfileSelector` (by name from ``PersonaMem.selector``: ``relevance``,
  ``listwise``, ``purple:<checkpoint folder>``...) over retrieved nodes from any retriever and keeps
  the profile, best first.
- :class:`PersonaMemMemoryBlock`: a ``BaseMemoryBlock`` for ``llama_index.core.memory.Memory`` that
  stores flushed chat messages as the user's conversation records, injects ``PersonaMem.context``
  (the pipeline's profile, fitted to a token budget) for the latest user message, and reports the
  assistant's reply to that message as feedback on the logged context call.
- :class:`PersonaMemLLM` and :class:`PersonaMemEmbedding`: a personamem
  :class:`~personamem.llm.FrozenLLM` and :class:`~personamem.encoder.Encoder` as LlamaIndex models, so
  chat engines run offline and nothing falls back to OpenAI or tiktoken.

The retriever (for text queries) and the memory block call only the operations of
:class:`~personamem.contract.MemoryApi`, so they work over a :class:`~personamem.client.Client` of a
``personamem serve`` as well as in process; the postprocessor, the LLM and the embedding run models
of this process.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import warnings
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
from pydantic import SkipValidation, StrictStr, ValidationError

from personamem.client import AsyncClient
from personamem.contract import Hits, MemoryApi
from personamem.encoder import Encoder
from personamem.errors import (
    InvalidInputError,
    MethodError,
    MissingExtraError,
    PersonaMemError,
    PersonaMemWarning,
)
from personamem.llm.base import FrozenLLM, Generations, Prompt
from personamem.memory import PersonaMem
from personamem.pipeline import Context, PipelineConfig
from personamem.profile import ProfileSelector
from personamem.records import Record, RecordKind, check_user_id
from personamem.retrieval.base import Hit
from personamem.store.filters import parse_filters
from personamem.store.read import ReadOptions, epoch

try:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.base.llms.types import (
        ChatMessage,
        ChatResponse,
        ChatResponseGen,
        CompletionResponse,
        CompletionResponseGen,
        LLMMetadata,
        MessageRole,
    )
    from llama_index.core.bridge.pydantic import ConfigDict, Field, PrivateAttr, model_validator
    from llama_index.core.callbacks import CallbackManager
    from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
    from llama_index.core.llms.custom import CustomLLM
    from llama_index.core.memory.memory import BaseMemoryBlock
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import BaseNode, MetadataMode, NodeWithScore, QueryBundle, TextNode
except ImportError as exc:
    raise MissingExtraError(["llama-index-core"], "llamaindex") from exc

__all__ = [
    "PersonaMemEmbedding",
    "PersonaMemLLM",
    "PersonaMemMemoryBlock",
    "PersonaMemProfilePostprocessor",
    "PersonaMemRetriever",
]

# node metadata useful to code but noise in a prompt or an embedding (as are empty fields)
_BOOKKEEPING_KEYS = frozenset({"record_id", "user_id", "rank", "interaction_id"})


def _node(hit: Hit, interaction_id: str | None = None) -> NodeWithScore:
    """A hit as a LlamaIndex node whose id is the record id (ids are unique per user).

    ``interaction_id`` (where the pipeline logs interactions) is what ``PersonaMem.feedback`` takes.
    """
    record = hit.record
    metadata: dict[str, Any] = {
        **record.metadata,
        "record_id": record.id,
        "user_id": record.user_id,
        "kind": record.kind.value,
        "category": record.category,
        "timestamp": record.timestamp.isoformat() if record.timestamp else None,
        "rank": hit.rank,
        **({} if interaction_id is None else {"interaction_id": interaction_id}),
    }
    hidden = [key for key, value in metadata.items() if key in _BOOKKEEPING_KEYS or value is None]
    node = TextNode(
        id_=record.id,
        text=record.text,
        metadata=metadata,
        excluded_llm_metadata_keys=hidden,
        excluded_embed_metadata_keys=list(hidden),
    )
    return NodeWithScore(node=node, score=hit.score)


class PersonaMemRetriever(BaseRetriever):
    """One user's records as LlamaIndex nodes, best first, in process or from a server.

    ``memory`` is any :class:`~personamem.contract.MemoryApi`: a :class:`PersonaMem` in process, a
    :class:`~personamem.client.Client` over a ``personamem serve`` (``PersonaMemRetriever(Client(url,
    key), user_id)``), or an :class:`~personamem.client.AsyncClient` for ``aretrieve`` alone. A text
    query calls only the contract's ``search``, so the nodes are the hits ``memory.search`` returns:
    with a profile selector, the profile first, then the rest of the candidates.

    ``method`` is a name from :mod:`personamem.methods` (``dense``, ``bm25``, ``hybrid``, ``pbr``,
    ``listwise``, ``purple:<checkpoint folder>``, ``pipeline:<file.toml>``...), applied over the
    memory's configured pipeline (none: that pipeline itself, as ``search`` ranks with no method);
    ``pipeline`` is a whole :class:`PipelineConfig` instead (give one or the other), an object of this
    process that only a ``PersonaMem`` takes. Over a ``PersonaMem`` the pipeline is built here (a
    PURPLE checkpoint is loaded once per memory), so an unknown name, a missing checkpoint or an LLM
    method on a memory without an LLM fails at construction; over a client the server answers the same
    ``MethodError`` at the first query, since the contract has no cheap call that builds a method.

    Only facts current now are found, unless ``as_of`` names another time or ``include_superseded``
    asks for every version (see :meth:`PersonaMem.supersede`); ``filters`` keeps the records it
    admits, as in :meth:`PersonaMem.search`.

    A query bundle with an ``embedding`` is searched densely with that vector (``method`` and
    ``pipeline`` do not apply): it must be in the store encoder's space, e.g. a personalized query
    vector. That search is in process only (the contract sends text, not vectors).

    Raises:
        MethodError: an unknown method (the message lists the choices), both ``method`` and
            ``pipeline``, a ``pipeline`` with a client, or a method that needs an LLM on a memory
            without one.
        InvalidInputError: an ``as_of`` that is not a time, or a bad filter.
        CheckpointError: a PURPLE checkpoint that cannot be loaded.
    """

    def __init__(
        self,
        memory: MemoryApi | AsyncClient,
        user_id: str,
        *,
        k: int = 4,
        method: str | None = None,
        pipeline: PipelineConfig | None = None,
        as_of: datetime | str | None = None,
        include_superseded: bool = False,
        filters: Mapping[str, Any] | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        if method is not None and pipeline is not None:
            raise MethodError(f"give method ({method!r}) or pipeline, not both")
        if isinstance(memory, PersonaMem):
            memory.pipeline(method if pipeline is None else pipeline)  # built and kept by the memory now
        elif pipeline is not None:
            raise MethodError(
                "pipeline= (a PipelineConfig) runs in process only: give a PersonaMem as memory, or "
                "name a method the server serves with method="
            )
        super().__init__(callback_manager=callback_manager)
        self.memory = memory
        self.user_id = check_user_id(user_id)
        self.k = k
        self.method = method
        self.pipeline = pipeline
        epoch(as_of)  # a bad time or filter fails here, not on the first query
        parse_filters(filters)
        self.as_of, self.include_superseded, self.filters = as_of, include_superseded, filters

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        memory = self.memory
        if isinstance(memory, AsyncClient):
            raise TypeError("this retriever holds an AsyncClient: call aretrieve, or give it a Client")
        if query_bundle.embedding is not None:
            return self._search_vector(query_bundle.embedding)
        # a config only with a PersonaMem (checked in __init__), whose search takes one as its method
        ranking: Any = self.method if self.pipeline is None else self.pipeline
        found = memory.search(self.user_id, query_bundle.query_str, self.k, ranking, **self._reading())
        return [_node(hit, found.interaction_id) for hit in found]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """Awaits an ``AsyncClient``; else runs the sync search in a thread, sparing the event loop."""
        memory = self.memory
        if not isinstance(memory, AsyncClient):
            return await asyncio.to_thread(self._retrieve, query_bundle)
        if query_bundle.embedding is not None:
            return self._search_vector(query_bundle.embedding)  # refuses: a client has no vector search
        found: Hits = await memory.search(
            self.user_id, query_bundle.query_str, self.k, self.method, **self._reading()
        )
        return [_node(hit, found.interaction_id) for hit in found]

    def _reading(self) -> ReadOptions:
        """The read options every search passes: ``as_of``, ``include_superseded``, ``filters``."""
        return {"as_of": self.as_of, "include_superseded": self.include_superseded, "filters": self.filters}

    def _search_vector(self, embedding: Sequence[float]) -> list[NodeWithScore]:
        if not isinstance(self.memory, PersonaMem):
            raise InvalidInputError(
                "QueryBundle.embedding is searched in process only (the server takes text): give a "
                "PersonaMem as memory, or a bundle without an embedding"
            )
        encoder = self.memory.store.encoder
        vector = np.asarray(embedding, dtype=np.float32)
        if vector.shape != (encoder.dim,):
            raise ValueError(
                f"QueryBundle.embedding has shape {vector.shape}, but this memory's encoder "
                f"{encoder.name!r} makes vectors of shape ({encoder.dim},): embed the query in the store "
                "encoder's space (e.g. with PersonaMemEmbedding over mem.store.encoder)"
            )
        hits = self.memory.search_vector(self.user_id, vector, self.k, **self._reading())
        return [_node(hit) for hit in hits]


def _record(node: BaseNode, user_id: str) -> Record | None:
    """The node as one of ``user_id``'s records; None for a node without text (it cannot be profile)."""
    metadata = node.metadata
    owner = metadata.get("user_id", user_id)
    if owner != user_id:
        raise ValueError(f"node {node.node_id!r} belongs to user {owner!r}, not {user_id!r}")
    text = node.get_content(metadata_mode=MetadataMode.NONE)
    if not text.strip():
        return None
    fields = {
        key: metadata[key] for key in ("kind", "category", "timestamp") if metadata.get(key) is not None
    }
    try:
        return Record(user_id=user_id, text=text, id=node.node_id, **fields)
    except ValidationError:  # a foreign node whose "kind" or "timestamp" means something else
        return Record(user_id=user_id, text=text, id=node.node_id)


class PersonaMemProfilePostprocessor(BaseNodePostprocessor):
    """Keeps the ``k`` nodes a :class:`~personamem.profile.ProfileSelector` picks, in profile order.

    In process only: the selector runs here, on nodes that are not the memory's records, and the
    contract has no operation that selects among a caller's candidates, so :meth:`from_memory` takes a
    :class:`PersonaMem` (its ``selector``), not a client.

    The nodes may come from any retriever; each becomes a candidate record of ``user_id`` (a node whose
    metadata names another user is refused). Selected nodes keep their metadata and get the selector's
    score. Nodes without text are dropped, as are repeats of a node id.
    """

    user_id: StrictStr = Field(description="Whose profile is being built.")
    selector: ProfileSelector = Field(exclude=True, description="Picks and orders the profile.")
    k: int = Field(default=4, ge=1, description="Most nodes kept.")

    @classmethod
    def from_memory(
        cls, memory: PersonaMem, user_id: str, *, k: int = 4, selector: str = "relevance"
    ) -> PersonaMemProfilePostprocessor:
        """The memory's selector called ``selector``, e.g. a trained ``purple:<checkpoint folder>``.

        ``relevance`` (cosine to the query with the memory's encoder, the default), ``listwise``
        (with the memory's LLM), ``purple:<checkpoint folder>``, ``earliest``, ``random``: see
        ``PersonaMem.selector``, which builds it once per memory and name.

        Raises:
            MethodError: an unknown selector, or ``listwise`` on a memory without an LLM.
            CheckpointError: a PURPLE checkpoint that cannot be loaded.
        """
        return cls(user_id=user_id, selector=memory.selector(selector), k=k)

    @classmethod
    def class_name(cls) -> str:
        """Name LlamaIndex serializes the component under."""
        return "PersonaMemProfilePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        if query_bundle is None:
            raise ValueError(f"{type(self).__name__} selects for a query: pass query_bundle or query_str")
        by_id: dict[str, NodeWithScore] = {}
        candidates: list[Record] = []
        for scored in nodes:
            record = _record(scored.node, self.user_id)
            if record is not None and record.id not in by_id:
                by_id[record.id] = scored
                candidates.append(record)
        hits = self.selector.select(self.user_id, query_bundle.query_str, candidates, self.k)
        return [NodeWithScore(node=by_id[hit.record.id].node, score=hit.score) for hit in hits]


def _message_id(session: str | None, timestamp: datetime, position: int, role: str, text: str) -> str:
    """Record id of one flushed message; a repeated text in one flush is still its own record."""
    canonical = json.dumps([session, timestamp.isoformat(), position, role, text], ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def _reply_to(messages: Sequence[ChatMessage], query: str) -> str | None:
    """The assistant's reply to the latest user message asking ``query``; None while there is none.

    The latest such message, not the first: a question asked again must not take an older answer.
    """
    asked = [i for i, m in enumerate(messages) if m.role == MessageRole.USER and m.content == query]
    if not asked:
        return None
    for message in messages[asked[-1] + 1 :]:
        if message.role == MessageRole.USER:
            return None
        if message.role == MessageRole.ASSISTANT and message.content and message.content.strip():
            return message.content
    return None


class PersonaMemMemoryBlock(BaseMemoryBlock[str]):
    """Long-term memory of one user for ``llama_index.core.memory.Memory``.

    Messages flushed from the short-term queue become the user's CONVERSATION records (metadata
    ``role``, ``session`` and ``position`` in the flush; the flush time as timestamp), so they persist
    with the rest of the user's history. Reading returns ``PersonaMem.context(...).text`` for the latest
    user message: the profile of the memory's configured pipeline (or of ``pipeline``, a method name or
    config), rendered one ``- text`` line per record and fitted to ``budget_tokens``. It is the very
    text ``PersonaMem.context`` gives any other caller, and the prompt PURPLE's reward is trained on,
    so a chat turn shows its words, not its speaker (the role stays in the record's metadata). The
    block is scoped by ``user_id`` alone: a ``Memory`` for another user needs its own block.

    Where the pipeline logs interactions, the block remembers its last context call and, once the
    messages it is given (read or flushed) hold the assistant's reply to that query (the first
    assistant text after the latest user message asking it, before the next user message), posts
    ``memory.feedback(interaction_id, answer=reply)`` once: an answer alone is enough for ``improve``
    to learn from. So a turn's reply is reported when the next turn reads the block, or when the
    short-term queue flushes it here; the final turn of a conversation may never be. A report that
    fails (an unknown interaction, a server that is down) is a
    :class:`~personamem.errors.PersonaMemWarning`: feedback never breaks the chat.

    It calls only the contract's ``context``, ``add_many`` and ``feedback``, so ``memory`` may be a
    :class:`PersonaMem` or a :class:`~personamem.client.Client` of a server; ``pipeline`` is then a
    method name the server serves (a config is an object of this process), checked by the server at
    the first turn rather than here (the contract has no cheap call that builds a method).

    Raises:
        ValidationError: an unknown method name or field, a method that needs an LLM on a memory
            without one (checked when the block is made, in process), or a config with a client.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    name: str = Field(default="UserProfile", description="The block's name (its tag in the prompt).")
    # a protocol pydantic cannot check with isinstance: SkipValidation takes any memory or client
    memory: SkipValidation[MemoryApi] = Field(exclude=True, description="Where the user's records live.")
    user_id: StrictStr = Field(description="Whose records are stored and read.")
    budget_tokens: int | None = Field(
        default=None, ge=0, description="Most tokens of context; None: the pipeline's budget_tokens."
    )
    pipeline: PipelineConfig | str | None = Field(
        default=None,
        description="A method name (see personamem.methods) or a pipeline config; None: the memory's own.",
    )
    _asked: tuple[str, str] | None = PrivateAttr(default=None)  # (interaction id, query) awaiting a reply

    @model_validator(mode="after")
    def _buildable(self) -> PersonaMemMemoryBlock:
        if isinstance(self.memory, PersonaMem):
            self.memory.pipeline(self.pipeline)  # built and kept by the memory now, not at the first turn
        elif isinstance(self.pipeline, PipelineConfig):
            raise ValueError(
                "a PipelineConfig runs in process only: give a PersonaMem as memory, or name a method "
                "the server serves"
            )
        return self

    def context(self, query: str) -> Context:
        """What this block shows the LLM for ``query``: its records, text, tokens and timings."""
        # a config only with a PersonaMem (_buildable), whose context takes one as its method
        method: Any = self.pipeline
        return self.memory.context(self.user_id, query, budget_tokens=self.budget_tokens, method=method)

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        await self._report_reply(messages or [])
        query = next((m.content for m in reversed(messages or []) if m.role == MessageRole.USER), None)
        if not query or not query.strip():
            return ""
        found = await asyncio.to_thread(self.context, query)
        self._asked = None if found.interaction_id is None else (found.interaction_id, query)
        return found.text

    async def _report_reply(self, messages: Sequence[ChatMessage]) -> None:
        """Post the reply to the last context call's query once ``messages`` hold it, then forget the call."""
        if self._asked is None:
            return
        interaction_id, query = self._asked
        reply = _reply_to(messages, query)
        if reply is None:
            return
        self._asked = None
        try:
            await asyncio.to_thread(self.memory.feedback, interaction_id, answer=reply)
        except PersonaMemError as exc:
            warnings.warn(
                f"PersonaMemMemoryBlock could not report the reply of interaction {interaction_id!r}: {exc}",
                PersonaMemWarning,
                stacklevel=2,
            )

    async def _aput(self, messages: list[ChatMessage]) -> None:
        await self._report_reply(messages)
        now = datetime.now(UTC)
        records = []
        for position, message in enumerate(messages):
            text = message.content
            if not text or not text.strip():
                continue
            session = message.additional_kwargs.get("session_id")
            session = None if session is None else str(session)
            role = message.role.value
            records.append(
                Record(
                    user_id=self.user_id,
                    text=text,
                    id=_message_id(session, now, position, role, text),
                    kind=RecordKind.CONVERSATION,
                    timestamp=now,
                    metadata={"role": role, "session": session, "position": position},
                )
            )
        if records:
            await asyncio.to_thread(self.memory.add_many, records)


class PersonaMemLLM(CustomLLM):
    """A personamem :class:`~personamem.llm.FrozenLLM` as a LlamaIndex LLM (a model of this process).

    Chat passes the messages as role/content dicts, so the model's own chat template renders them;
    completion passes the prompt as plain text. Streaming yields the whole answer as one chunk. Token
    usage is in each response's ``additional_kwargs``.
    """

    frozen_llm: FrozenLLM = Field(exclude=True, description="The model that generates.")
    max_tokens: int = Field(default=256, ge=1, description="Most tokens generated per answer.")
    temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature; 0 is greedy.")

    def __init__(self, frozen_llm: FrozenLLM, **kwargs: Any) -> None:
        super().__init__(frozen_llm=frozen_llm, **kwargs)

    @classmethod
    def class_name(cls) -> str:
        """Name LlamaIndex serializes the component under."""
        return "PersonaMemLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """Window and output size as the frozen LLM reports them."""
        return LLMMetadata(
            context_window=self.frozen_llm.context_window,
            num_output=self.max_tokens,
            is_chat_model=True,
            model_name=self.frozen_llm.name,
        )

    def tokenizer_fn(self, text: str) -> list[int]:
        """A LlamaIndex ``tokenizer_fn`` (``Memory``, ``Settings.tokenizer``) counting this model's tokens.

        LlamaIndex only measures ``len(tokenizer_fn(text))``; the FrozenLLM protocol exposes counts, not
        ids, so the list holds zeros. Using it keeps token budgets in this model's units and avoids
        tiktoken.
        """
        return [0] * self.frozen_llm.count_tokens(text)

    def _generate(self, prompt: Prompt, kwargs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        generations: Generations = self.frozen_llm.generate(
            [prompt],
            max_tokens=kwargs.get("max_tokens", self.max_tokens),
            temperature=kwargs.get("temperature", self.temperature),
            stop=kwargs.get("stop", ()),
        )
        usage = {
            "prompt_tokens": generations.usage.prompt_tokens,
            "completion_tokens": generations.usage.completion_tokens,
        }
        return generations[0][0], usage

    def _chat(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatResponse:
        prompt = [{"role": m.role.value, "content": m.content or ""} for m in messages]
        text, usage = self._generate(prompt, kwargs)
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=text, additional_kwargs=usage
        )

    def _complete(self, prompt: str, formatted: bool, kwargs: dict[str, Any]) -> CompletionResponse:
        if not formatted and self.completion_to_prompt is not None:  # typed Optional; LLM always sets one
            prompt = self.completion_to_prompt(prompt)
        text, usage = self._generate(prompt, kwargs)
        return CompletionResponse(text=text, delta=text, additional_kwargs=usage)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Answer the conversation (``max_tokens``, ``temperature``, ``stop`` may be overridden)."""
        return self._chat(messages, kwargs)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """The answer as a single chunk."""

        def chunks() -> ChatResponseGen:
            yield self._chat(messages, kwargs)

        return chunks()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Continue ``prompt`` as plain text."""
        return self._complete(prompt, formatted, kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """The continuation as a single chunk."""

        def chunks() -> CompletionResponseGen:
            yield self._complete(prompt, formatted, kwargs)

        return chunks()

    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """:meth:`chat` in a thread: CustomLLM's default would block the event loop while generating."""
        return await asyncio.to_thread(self.chat, messages, **kwargs)

    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """:meth:`complete` in a thread, for the same reason as :meth:`achat`."""
        return await asyncio.to_thread(self.complete, prompt, formatted, **kwargs)


class PersonaMemEmbedding(BaseEmbedding):
    """A personamem :class:`~personamem.encoder.Encoder` as a LlamaIndex embedding model.

    With the store's own encoder, LlamaIndex's query embeddings land in the space
    :class:`PersonaMemRetriever` searches, so a ``QueryBundle.embedding`` made by LlamaIndex fits it.
    """

    encoder: Encoder = Field(exclude=True, description="The model that embeds.")

    def __init__(self, encoder: Encoder, **kwargs: Any) -> None:
        # mypy checks this against the base's synthesized __init__, which lacks the subclass's field
        super().__init__(encoder=encoder, model_name=encoder.name, **kwargs)  # type: ignore[call-arg]

    @classmethod
    def class_name(cls) -> str:
        """Name LlamaIndex serializes the component under."""
        return "PersonaMemEmbedding"

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self.encoder.encode(texts).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._get_text_embeddings([text])[0]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._get_text_embeddings([query])[0]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return await asyncio.to_thread(self._get_query_embedding, query)
