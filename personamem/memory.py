"""``PersonaMem``: the facade a chatbot backend talks to.

One object per process, shared across threads: it owns the store and one pipeline per method name
or config, built on first use and kept (a PURPLE checkpoint or an LLM is loaded once).

The class defines the operations every surface shares (:class:`~personamem.contract.MemoryApi`'s,
documented there) and composes the rest: ``mem.serving`` (:class:`~personamem.serving.Serving`: the
pipeline each call runs), ``mem.inspection`` (:class:`~personamem.inspection.Inspection`: what the
server and the inspector read besides the records), the tenant views, ``mem.trials``,
``mem.webhooks``, ``mem.jobs``; ``improve`` is the SDK's one door into the trainers
(:mod:`~personamem.improving`), ``aadd``/``asearch``/``acontext`` the coroutine twins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack

import numpy as np
from sqlalchemy.engine import make_url

from personamem.async_twins import twin
from personamem.components import Components
from personamem.conflicts import ConflictDetector
from personamem.contract import Context, Hits, MemoryApi, method_of
from personamem.encoder import Encoder
from personamem.errors import (
    ConfigError,
    ConflictFallbackWarning,
    InvalidInputError,
    MethodError,
    warn_fallback,
)
from personamem.improving import improve_served
from personamem.inspection import Inspection
from personamem.interactions import FeedbackReport
from personamem.jobs import Jobs
from personamem.llm.base import FrozenLLM
from personamem.methods import ServedMethods
from personamem.pipeline import Pipeline, PipelineConfig
from personamem.portability import Imported, export_lines, read_export, write_export
from personamem.preference import PreferenceMemories, PreferenceMemory, SetwiseReranker
from personamem.profile import ProfileSelector
from personamem.records import Record, RecordEvent, RecordKind, check_user_id, parse_record, parse_records
from personamem.retrieval import DenseRetriever, Hit
from personamem.serving import Serving, TenantViews, pinned_at_open, stored_pipeline
from personamem.store import Store
from personamem.store.duplicates import DUPLICATE_THRESHOLD, DuplicatePolicy, check_duplicates
from personamem.store.read import NOW, Read, ReadOptions
from personamem.telemetry import traced
from personamem.webhooks import Webhooks

if TYPE_CHECKING:
    from rich.progress import Progress

    from personamem.improving import ImproveResult

__all__ = ["PersonaMem", "open_memory", "stored_pipeline"]


class PersonaMem(MemoryApi):
    """Per-user memory: add what users said or did, search it per user, build their context, forget them.

    Its operations are :class:`~personamem.contract.MemoryApi`'s (documented there), so ``Client``
    (HTTP) answers them alike. ``pipeline=`` configures the memory (here and in :meth:`open`);
    ``method=`` picks what one :meth:`search` or :meth:`context` call runs.

    Args:
        store: where the records live.
        pipeline: the configured pipeline (defaults: no LLM, hybrid, top 5, 512 tokens); a method
            name given to :meth:`search` or :meth:`context` applies its stages over this config's
            LLM, deadline, seed and budget.
        llm: the frozen LLM for LLM stages; without it, ``pipeline.llm`` names one to load when
            first needed.
        components: the loaded LLMs and extractors to share (:meth:`tenant` passes its own, so a
            model loads once for every view); leave it out otherwise.

    Examples:
        >>> with PersonaMem.open("~/.personamem") as mem:  # doctest: +SKIP
        ...     mem.add("alice", "I'm vegetarian and allergic to peanuts.", kind="knowledge")
        ...     hits = mem.search("alice", "what should I cook tonight?", k=3)
        ...     prompt_part = mem.context("alice", "what should I cook tonight?").text
    """

    def __init__(
        self,
        store: Store,
        *,
        pipeline: PipelineConfig | None = None,
        llm: FrozenLLM | None = None,
        components: Components | None = None,
    ) -> None:
        self.store = store
        self.serving = Serving(store, pipeline=pipeline, llm=llm, components=components)
        self.inspection = Inspection(store, self.serving)
        self.trials = self.serving.trials  # a candidate on trial against the live pipeline (interleaving)
        self.webhooks = Webhooks(store)  # this view's tenant's webhooks and dead letters
        self.jobs = Jobs(store)  # this view's tenant's bulk imports, run in the background
        # what add does with a near-duplicate, unless a call says otherwise (see store/duplicates.py)
        self.duplicates = DuplicatePolicy.KEEP
        self.duplicate_threshold = DUPLICATE_THRESHOLD
        self._views = TenantViews()

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        encoder: Encoder | None = None,
        pipeline: PipelineConfig | str | Path | None = None,
        llm: FrozenLLM | None = None,
    ) -> Self:
        """Memory in a local folder (SQLite and an embedded Chroma); created if missing.

        ``pipeline`` is a config, or the path of a TOML file with a ``[pipeline]`` table; given, it
        is served instead of the store's live pipeline (with a warning where they differ).
        """
        store = Store.open(path, encoder=encoder)
        return cls(store, pipeline=pinned_at_open(store, pipeline), llm=llm)

    @classmethod
    def connect(
        cls,
        sql_url: str,
        *,
        chroma_url: str | None = None,
        chroma_path: str | Path | None = None,
        encoder: Encoder | None = None,
        pipeline: PipelineConfig | str | Path | None = None,
        llm: FrozenLLM | None = None,
    ) -> Self:
        """Memory on a SQLAlchemy database and a Chroma server or folder; PostgreSQL alone needs neither.

        ``PersonaMem.connect("postgresql+psycopg://...")`` keeps the vectors in the same database
        with pgvector (its ``vector`` extension must be installed on the server).
        """
        store = Store.connect(sql_url, chroma_url=chroma_url, chroma_path=chroma_path, encoder=encoder)
        return cls(store, pipeline=pinned_at_open(store, pipeline), llm=llm)

    def tenant(self, name: str) -> Self:
        """This memory as tenant ``name`` sees it: its own users, even where ids equal another's.

        Isolation is the store's (:meth:`Store.for_tenant`), so every method, pipeline and adapter
        built on the returned object reads and erases that tenant's records only. It shares this
        object's store, pipeline config and loaded LLMs, is made once per name and kept (with its
        pipelines and caches); closing it does nothing.

        Raises:
            InvalidInputError: a tenant name that is not 1-64 letters, digits, ``_``, ``.``, ``-``.
        """
        return self._views.get(name, self._view)

    def _view(self, name: str) -> Self:
        serving = self.serving
        view = type(self)(self.store.for_tenant(name), pipeline=serving.pinned, components=serving.components)
        view.duplicates, view.duplicate_threshold = self.duplicates, self.duplicate_threshold
        view.served_methods = self.served_methods
        return view

    @property
    def served_methods(self) -> ServedMethods | None:
        """The method names :meth:`search`, :meth:`context`, :meth:`pipeline` and :meth:`selector` take.

        None (the default, for the SDK and the CLI): any name, a file or folder on this machine
        included. A server sets a :class:`~personamem.methods.ServedMethods` (``create_app`` and
        ``personamem mcp`` do), so a request cannot name a path: the name is checked before anything
        is read. Setting it sets every tenant view's too, so REST, the inspector and MCP share one
        rule. A :class:`~personamem.pipeline.PipelineConfig` passed in process is not checked.
        """
        return self.serving.served_methods

    @served_methods.setter
    def served_methods(self, policy: ServedMethods | None) -> None:
        def change() -> None:
            self.serving.served_methods = policy

        for view in self._views.after(change):
            view.served_methods = policy

    @property
    def config(self) -> PipelineConfig:
        """The pipeline served to calls that name no method (see :attr:`Serving.config`)."""
        return self.serving.config

    @config.setter
    def config(self, config: PipelineConfig | None) -> None:
        """Serve ``config`` in this object whatever the store's live pipeline is (None: follow the store)."""
        self.serving.config = config

    def pipeline(self, method: PipelineConfig | str | None = None) -> Pipeline:
        """The pipeline a call with ``method`` runs (see :meth:`Serving.pipeline`)."""
        return self.serving.pipeline(method)

    def selector(self, name: str) -> ProfileSelector:
        """The profile selector ``name``, for a framework's own candidates (:meth:`Serving.selector`)."""
        return self.serving.selector(name)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release connections; the data stays on disk."""
        self.store.close()

    def improve(self, *, progress: Progress | None = None, **settings: Any) -> ImproveResult:
        """Fit the first stage to this store and put it live in the store only if it validates better.

        The SDK's door to ``personamem improve`` (keyword settings as its options, e.g.
        ``max_synthetic=600``; ``progress`` shows its steps); on success every process that serves
        the store's live pipeline (this one included, unless it was opened with ``pipeline=``) serves
        the new one. Returns the :class:`~personamem.trainers.adapter.improve.ImproveResult`.

        Raises:
            InsufficientDataError: too few users or questions (the message gives the counts).
        """
        return improve_served(self, progress=progress, **settings)

    @traced("add")
    def add(
        self,
        user_id: str,
        text: str = "",
        *,
        duplicates: DuplicatePolicy | str | None = None,
        duplicate_threshold: float | None = None,
        **fields: Any,
    ) -> Record:
        """Remember one record of ``user_id`` (:meth:`MemoryApi.add`); ``conflicts`` on, it may supersede."""
        policy, threshold = check_duplicates(
            self.duplicates if duplicates is None else duplicates,
            self.duplicate_threshold if duplicate_threshold is None else duplicate_threshold,
        )
        record = parse_record({"user_id": user_id, "text": text, **fields})
        if self.config.conflicts and record.kind is RecordKind.KNOWLEDGE:
            replaced = _replaced(self.store, self.serving.llm(), record)
            if replaced is not None:
                return self.store.supersede(record.user_id, replaced.id, record)
        return self.store.add(record, duplicates=policy, threshold=threshold)

    aadd = twin(add)

    @traced("add_many")
    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 256,
    ) -> list[Record]:
        """Remember many records; all are validated before any is written (:meth:`MemoryApi.add_many`).

        ``batch_size`` is records per SQL transaction; ``len(records)`` makes the whole call one
        transaction, so after any crash all of it or none of it is stored (the server's batch route
        does this).
        """
        parsed = parse_records(records, user_id=user_id)
        self.store.add_many(parsed, progress=progress, batch_size=max(batch_size, 1))
        return parsed

    @traced("delete")
    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them (:meth:`MemoryApi.delete`)."""
        ids = [record_ids] if isinstance(record_ids, str) else list(record_ids)
        for record_id in ids:
            if not isinstance(record_id, str) or not record_id:
                raise InvalidInputError(f"record ids must be non-empty strings, got {record_id!r}")
        return self.store.delete(check_user_id(user_id), ids)

    @traced("update")
    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record; returns the new record (:meth:`MemoryApi.update`)."""
        if "id" in changes or "user_id" in changes:
            raise InvalidInputError("update cannot change a record's id or user; delete it and add a new one")
        current = self.get(user_id, record_id)
        if current is None:
            raise InvalidInputError(f"user {user_id!r} has no record {record_id!r}")
        record = parse_record({**current.model_dump(), **changes})
        return self.store.add(record).model_copy(update={"duplicate_of": None})

    @traced("forget")
    def forget(self, user_id: str) -> bool:
        """Erase the user: records, vectors and cached derived data. False if unknown."""
        return self.store.forget(check_user_id(user_id))

    @traced("supersede")
    def supersede(self, user_id: str, old_id: str, text: str = "", **fields: Any) -> Record:
        """Record that a new fact replaces record ``old_id`` (:meth:`MemoryApi.supersede`)."""
        if not isinstance(old_id, str) or not old_id:
            raise InvalidInputError(f"old_id must be a non-empty record id, got {old_id!r}")
        record = parse_record({"user_id": user_id, "text": text, **fields})
        return self.store.supersede(record.user_id, old_id, record)

    @traced("ttl")
    def ttl(self) -> timedelta | None:
        """The default time-to-live of new records (this tenant's, else the store's); None: keep."""
        seconds = self.store.ttl
        return None if seconds is None else timedelta(seconds=seconds)

    @traced("set_ttl")
    def set_ttl(self, ttl: timedelta | float | None) -> None:
        """Make new records expire ``ttl`` after they are added (:meth:`MemoryApi.set_ttl`)."""
        self.store.set_ttl(ttl.total_seconds() if isinstance(ttl, timedelta) else ttl)

    @traced("purge")
    def purge(self, *, all_tenants: bool = False) -> int:
        """Erase the expired records now (:meth:`MemoryApi.purge`); ``all_tenants``: every tenant's too."""
        return self.store.purge_expired(all_tenants=all_tenants)

    @traced("search")
    def search(
        self,
        user_id: str,
        query: str,
        k: int = 5,
        method: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Hits:
        """The user's top ``k`` records by ``method``, a name or config (:meth:`MemoryApi.search`)."""
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        parsed = Read.of(**read)  # checked before the pipeline is built
        return self.pipeline(method).search(user_id, query, k, parsed, draft=self.serving.draft(method))

    asearch = twin(search)

    @traced("context")
    def context(
        self,
        user_id: str,
        query: str,
        *,
        budget_tokens: int | None = None,
        method: PipelineConfig | str | None = None,
        pipeline: PipelineConfig | str | None = None,
        **read: Unpack[ReadOptions],
    ) -> Context:
        """What to paste into the LLM's prompt for ``query`` (:meth:`MemoryApi.context`).

        In process ``method`` may be a config; ``pipeline`` is its deprecated name (a
        :class:`~personamem.errors.PersonaMemDeprecationWarning`; both: InvalidInputError).
        """
        chosen, parsed = method_of(method, pipeline), Read.of(**read)
        draft = self.serving.draft(chosen)
        return self.pipeline(chosen).context(
            user_id, query, budget_tokens=budget_tokens, draft=draft, read=parsed
        )

    acontext = twin(context)

    @traced("feedback")
    def feedback(
        self,
        interaction_id: str,
        *,
        answer: str | None = None,
        rating: float | None = None,
        used_record_ids: Sequence[str] | None = None,
    ) -> None:
        """Report what happened after a logged call (:meth:`MemoryApi.feedback`), for its trial too."""
        report = FeedbackReport.of(
            interaction_id, answer=answer, rating=rating, used_record_ids=used_record_ids
        )
        self.store.interactions.feedback(report)
        self.trials.credit(interaction_id)  # a call served interleaved counts for its trial

    @traced("export")
    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's export (JSON Lines) to ``path`` (:meth:`MemoryApi.export`)."""
        user = check_user_id(user_id)
        calls = self.inspection.interactions(user) if interactions else []
        return write_export(path, export_lines(user, self.records(user), calls))

    @traced("import_user")
    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export, as its user or ``user_id`` (:meth:`MemoryApi.import_user`)."""
        data = read_export(path, user_id=None if user_id is None else check_user_id(user_id))
        written = self.store.add_many(data.records)
        logged = self.store.interactions.import_(data.interactions) if data.interactions else 0
        return Imported(records=written, interactions=logged)

    @traced("memory")
    def memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory, rebuilt once per history revision (:meth:`MemoryApi.memory`)."""
        return self.serving.preference_memories().get(check_user_id(user_id))

    @traced("refresh_memories")
    def refresh_memories(
        self,
        user_ids: Sequence[str] | None = None,
        *,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 8,
    ) -> int:
        """Build the missing or stale preference memories now (:meth:`MemoryApi.refresh_memories`)."""
        memories = self.serving.preference_memories  # asked for after the arguments are checked
        return _refresh(self.store, memories, user_ids, progress=progress, batch_size=batch_size)

    @traced("rerank")
    def rerank(self, user_id: str, query: str, candidates: Sequence[str], k: int | None = None) -> list[int]:
        """Order ``candidates`` by the user's preference memory, best first (:meth:`MemoryApi.rerank`)."""
        return _rerank(lambda: self.memory(user_id), self.serving.llm, query, candidates, k)

    @traced("search_vector")
    def search_vector(
        self, user_id: str, vector: np.ndarray, k: int = 5, **read: Unpack[ReadOptions]
    ) -> list[Hit]:
        """The user's top ``k`` records for a ready query vector (e.g. a personalized one from PBR).

        The vector must come from the store's encoder space (``self.store.encoder``). The read
        options are :meth:`search`'s.
        """
        _check_vector(vector, self.store.encoder.dim, k)
        return DenseRetriever(self.store).search_vector(check_user_id(user_id), vector, k, Read.of(**read))

    @traced("get")
    def get(self, user_id: str, record_id: str) -> Record | None:
        """The user's record with this id, or None."""
        return self.store.get(check_user_id(user_id), _record_id(record_id))

    @traced("records")
    def records(self, user_id: str) -> list[Record]:
        """All of the user's records, in insertion order."""
        return self.store.records(check_user_id(user_id))

    @traced("history")
    def history(self, user_id: str, record_id: str) -> list[RecordEvent]:
        """The events of the user's record, oldest first (:meth:`MemoryApi.history`)."""
        return self.store.history(check_user_id(user_id), _record_id(record_id))

    @traced("users")
    def users(self) -> list[str]:
        """Users with at least one record."""
        return self.store.users()

    @traced("count")
    def count(self, user_id: str | None = None) -> int:
        """Records of one user, or of all users."""
        return self.store.count(None if user_id is None else check_user_id(user_id))


def _record_id(record_id: object) -> str:
    if not isinstance(record_id, str):
        raise InvalidInputError(f"record_id must be a string, got {record_id!r}")
    return record_id


def _check_vector(vector: np.ndarray, dim: int, k: int) -> None:
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    if vector.shape != (dim,):
        raise ValueError(f"vector must have shape ({dim},), got {vector.shape}")


def _replaced(store: Store, llm: FrozenLLM | None, record: Record) -> Record | None:
    """The current knowledge record ``record`` replaces, by the LLM (``conflicts`` on); None if none.

    A failing LLM is a warning and None: the record is added without detection.
    """
    if llm is None:
        raise ConfigError("conflicts = true needs an LLM: set the pipeline's llm or pass one")
    detector = ConflictDetector(llm)
    vector = store.encoder.encode([record.text])[0]
    neighbours = store.nearest(record.user_id, vector, detector.candidates + 1, NOW)
    try:
        return detector.replaced(record, neighbours)
    except Exception as error:  # any LLM failure: the write goes on without detection
        message = f"conflict detection failed ({type(error).__name__}: {error}); added without it"
        warn_fallback(message, ConflictFallbackWarning)
        return None


def _refresh(
    store: Store,
    memories: Callable[[], PreferenceMemories],
    user_ids: Sequence[str] | None,
    *,
    progress: Callable[[int], None] | None,
    batch_size: int,
) -> int:
    """Build the missing or stale memories of ``user_ids`` (None: every user) in ``store``; how many.

    ``progress`` gets steps that add up to the number of users asked for, skipped ones included
    (as :meth:`PersonaMem.refresh_memories` documents); ``memories`` is asked for after the
    arguments are checked, so a bad argument is named before a missing memory is.
    """
    if isinstance(user_ids, str):
        raise InvalidInputError("user_ids must be a sequence of user ids, not one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    found = memories()
    users = store.users() if user_ids is None else [check_user_id(u) for u in user_ids]
    known = [u for u in dict.fromkeys(users) if store.revision(u) is not None]
    reported = 0

    def advance(done: int) -> None:  # the service counts users done so far; callers add steps
        nonlocal reported
        if progress is not None:
            progress(done - reported)
        reported = done

    built = found.refresh(known, batch_size=batch_size, progress=advance)
    if progress is not None and reported < len(users):
        progress(len(users) - reported)
    return built


def _rerank(
    memory: Callable[[], PreferenceMemory],
    llm: Callable[[], FrozenLLM | None],
    query: str,
    candidates: Sequence[str],
    k: int | None,
) -> list[int]:
    """Indices of ``candidates``, best first, by the setwise reranker shown ``memory()`` and ``query``.

    As :meth:`PersonaMem.rerank` documents; the arguments are checked before ``memory`` and ``llm``
    are asked for (a build or a load), and the memory before the LLM.
    """
    if not isinstance(query, str) or isinstance(candidates, str):
        raise InvalidInputError("query must be a string and candidates a sequence of strings")
    texts = list(candidates)
    if not all(isinstance(text, str) for text in texts):
        raise InvalidInputError("candidates must be strings")
    if k is not None and k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    shown = memory()
    ranker = llm()
    if ranker is None:
        raise MethodError(
            "rerank needs a frozen LLM and none is configured (set the pipeline's llm, e.g. --llm "
            "smollm2-135m, or pass llm= to PersonaMem.open)"
        )
    return SetwiseReranker(ranker).rank(query, shown.text(), texts, k) if texts else []


def open_memory(
    path: str | Path,
    *,
    sql_url: str | None = None,
    chroma_url: str | None = None,
    pipeline: PipelineConfig | str | Path | None = None,
) -> PersonaMem:
    """The memory that the CLI's and the server's settings name: a local folder unless a SQL URL is given.

    With ``sql_url``, vectors go to the Chroma server at ``chroma_url``; without one, a PostgreSQL
    URL keeps them in the database (pgvector) unless ``path/chroma`` holds them from before, and
    another database keeps them in ``path/chroma``.

    Raises:
        ConfigError: ``chroma_url`` without ``sql_url`` (SQL is the source of truth).
    """
    if sql_url:
        if chroma_url:
            return PersonaMem.connect(sql_url, chroma_url=chroma_url, pipeline=pipeline)
        if vectors_in_database(path, sql_url):
            return PersonaMem.connect(sql_url, pipeline=pipeline)
        return PersonaMem.connect(sql_url, chroma_path=Path(path) / "chroma", pipeline=pipeline)
    if chroma_url:
        raise ConfigError("a Chroma server URL needs a SQL URL too (the SQL side is the source of truth)")
    return PersonaMem.open(path, pipeline=pipeline)


def vectors_in_database(path: str | Path, sql_url: str) -> bool:
    """Whether :func:`open_memory` without a Chroma server keeps vectors in the SQL database (pgvector).

    True for PostgreSQL, unless ``path/chroma`` holds the vectors of a store made before pgvector.
    """
    return make_url(sql_url).get_backend_name() == "postgresql" and not (Path(path) / "chroma").is_dir()
