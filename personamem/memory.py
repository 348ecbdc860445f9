"""``PersonaMem``: the facade a chatbot backend talks to.

One object per process, shared across threads: it owns the store and one pipeline per method name
or config, built on first use and kept (a PURPLE checkpoint or an LLM is loaded once).

The class defines the operations every surface shares (:class:`~personamem.contract.MemoryApi`'s,
which must be its own); it inherits the rest: opening, the pipeline each call runs and tenant views
(:mod:`~personamem.serving`), what the server and the inspector read besides the records
(:mod:`~personamem.inspection`), ``improve``, the SDK's one door into the trainers
(:mod:`~personamem.improving`), and the coroutine twins (:mod:`~personamem.async_twins`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Unpack

import numpy as np
from sqlalchemy.engine import make_url

from personamem.async_twins import AsyncTwins
from personamem.conflicts import ConflictDetector
from personamem.contract import Context, Hits, MemoryApi, method_of
from personamem.errors import (
    ConfigError,
    ConflictFallbackWarning,
    InvalidInputError,
    MethodError,
    warn_fallback,
)
from personamem.improving import Improving
from personamem.inspection import Inspection
from personamem.interactions import FeedbackReport
from personamem.llm.base import FrozenLLM
from personamem.pipeline import PipelineConfig
from personamem.portability import Imported, export_lines, read_export, write_export
from personamem.preference import PreferenceMemories, PreferenceMemory, SetwiseReranker
from personamem.records import Record, RecordEvent, RecordKind, check_user_id, parse_record, parse_records
from personamem.retrieval import DenseRetriever, Hit
from personamem.serving import Serving, stored_pipeline
from personamem.store import Store
from personamem.store.duplicates import DuplicatePolicy, check_duplicates
from personamem.store.read import NOW, Read, ReadOptions
from personamem.telemetry import traced

__all__ = ["PersonaMem", "open_memory", "stored_pipeline"]


class PersonaMem(Serving, Inspection, Improving, AsyncTwins, MemoryApi):
    """Per-user memory: add what users said or did, search it per user, build their context, forget them.

    Its operations are :class:`~personamem.contract.MemoryApi`'s, so ``Client`` (HTTP) answers them
    alike. ``pipeline=`` configures the memory (here and in :meth:`open`); ``method=`` picks what one
    :meth:`search` or :meth:`context` call runs.

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
        """Remember one record of ``user_id``; returns the record that now holds it, with its id.

        ``fields`` are :class:`~personamem.records.Record` fields (``id``, ``kind``, ``category``,
        ``timestamp``, ``metadata``, ``input``, ``output``, ``valid_from``, ``valid_until``,
        ``expires_at``). Adding the same record again is a no-op. A near-duplicate of a current
        record (cosine ``duplicate_threshold``, default this object's ``duplicate_threshold``) is
        named in the returned record's ``duplicate_of``; ``duplicates`` (default this object's
        ``duplicates``, ``keep``) is ``keep`` (store it too), ``skip`` (return the existing record)
        or ``merge-metadata`` (add its metadata to the existing record and return that).

        Raises:
            InvalidRecordError: the record is not valid.
            InvalidInputError: an unknown ``duplicates`` policy or a threshold that is not a cosine.
        """
        policy, threshold = check_duplicates(
            self.duplicates if duplicates is None else duplicates,
            self.duplicate_threshold if duplicate_threshold is None else duplicate_threshold,
        )
        record = parse_record({"user_id": user_id, "text": text, **fields})
        if self.config.conflicts and record.kind is RecordKind.KNOWLEDGE:
            replaced = _replaced(self.store, self._llm(), record)
            if replaced is not None:
                return self.store.supersede(record.user_id, replaced.id, record)
        return self.store.add(record, duplicates=policy, threshold=threshold)

    @traced("add_many")
    def add_many(
        self,
        records: Iterable[Record | Mapping[str, Any] | str],
        *,
        user_id: str | None = None,
        progress: Callable[[int], None] | None = None,
        batch_size: int = 256,
    ) -> list[Record]:
        """Remember many records; all are validated before any is written.

        Args:
            records: records, dicts with Record fields, or plain texts (of ``user_id``).
            user_id: owner of records that name none (a record naming another user is an error).
            progress: called with the count of records finished after each durable batch.
            batch_size: records per SQL transaction; ``len(records)`` makes the whole call one
                transaction, so after any crash all of it or none of it is stored (the server's
                batch route does this).

        Raises:
            InvalidRecordError: naming the position of the first bad record; nothing was written.
        """
        parsed = parse_records(records, user_id=user_id)
        self.store.add_many(parsed, progress=progress, batch_size=max(batch_size, 1))
        return parsed

    @traced("delete")
    def delete(self, user_id: str, record_ids: str | Sequence[str]) -> list[str]:
        """Delete records of ``user_id`` by id, leaving no trace of them; returns the ids deleted.

        Ids the user does not have are skipped. The user's cached derived values (LLM outputs that
        may quote a deleted record) are dropped; the cost grows with the user's record count.

        Raises:
            InvalidInputError: a user id or record id that is not a non-empty string.
        """
        ids = [record_ids] if isinstance(record_ids, str) else list(record_ids)
        for record_id in ids:
            if not isinstance(record_id, str) or not record_id:
                raise InvalidInputError(f"record ids must be non-empty strings, got {record_id!r}")
        return self.store.delete(check_user_id(user_id), ids)

    @traced("update")
    def update(self, user_id: str, record_id: str, /, **changes: Any) -> Record:
        """Replace fields of one record (``text``, ``category``, ``metadata``...); returns the new record.

        The record keeps its id; the new version is validated like any record, written as ``add``
        writes, and re-indexed.

        Raises:
            InvalidInputError: the user has no record ``record_id``, or ``changes`` include an
                ``id`` or a ``user_id`` (delete and add instead).
            InvalidRecordError: the changed record is not valid.
        """
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
        """Record that a new fact replaces record ``old_id`` ("my name is Bob" after "...Alice").

        The old record stays in the user's history (until deleted) with its validity ended where
        the new one's begins (``valid_from``, default now); search and context show current facts,
        ``as_of=`` the facts of a past time, ``include_superseded=True`` all. ``fields`` are the new
        record's, as in :meth:`add`. Returns the new record as stored.

        Raises:
            InvalidInputError: the user has no record ``old_id``, or it is no longer current.
            InvalidRecordError: the new record is not valid.
        """
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
        """Make new records expire ``ttl`` (a timedelta or seconds) after they are added; None: never.

        Stored with the data, so every process and the server apply it; set on a tenant's view
        (:meth:`tenant`), it is that tenant's default. A record's own ``expires_at`` wins.
        """
        self.store.set_ttl(ttl.total_seconds() if isinstance(ttl, timedelta) else ttl)

    @traced("purge")
    def purge(self, *, all_tenants: bool = False) -> int:
        """Erase the records whose expiry has passed, now; returns how many.

        A background sweep does this while the store is open (every ``PERSONAMEM_SWEEP_S``
        seconds, default 60; 0 turns it off); expired records are hidden from every read before
        either runs.
        ``all_tenants`` (not on a tenant's view) purges every tenant's records too.
        """
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
        """The user's top ``k`` records for ``query`` by ``method`` (see :mod:`personamem.methods`).

        No method: the pipeline this memory serves (:attr:`config`: the store's live pipeline, else
        the package default, hybrid with the shipped query adapter), as :meth:`context` ranks. A
        method with a profile selector ranks its profile first, then the other candidates. An
        unknown user gets an empty list. With ``log_interactions`` on, ``hits.interaction_id`` names
        the logged call for :meth:`feedback`. The read options (:class:`~personamem.store.read.ReadOptions`):
        only facts current now are searched, unless ``as_of`` (a datetime or ISO 8601 string; naive
        means UTC) names another time or ``include_superseded`` asks for every version; expired
        records never are. ``filters`` keeps only the records it admits, e.g. ``{"metadata.topic":
        "food", "timestamp": {"gte": "2025-01-01"}}`` (the grammar: :mod:`personamem.store.filters`);
        the top ``k`` is filled from those, whatever the method.

        Raises:
            MethodError: an unknown method, or one that needs an LLM when none is configured.
            InvalidInputError: an ``as_of`` that is not a time, or a bad filter (the message names the part).
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, got {k}")
        parsed = Read.of(**read)  # checked before the pipeline is built
        return self.pipeline(method).search(user_id, query, k, parsed, draft=self.draft(method))

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
        """What to paste into the LLM's prompt for ``query``: the user's profile, within the budget.

        Args:
            user_id: whose memory.
            query: the user's message.
            budget_tokens: most tokens of context (default: the pipeline's ``budget_tokens``).
            method: a method name applied over the configured pipeline, or another config
                (default: the configured pipeline).
            pipeline: the deprecated name of ``method`` (a
                :class:`~personamem.errors.PersonaMemDeprecationWarning`).
            read: :meth:`search`'s read options: the context is built from the facts current at
                ``as_of`` (default: now), or from every version, of the records ``filters`` admits
                (the preference memory, a summary of the whole history, is not narrowed).

        Raises:
            MethodError: an unknown method, or one that needs an LLM when none is configured.
            InvalidInputError: both ``method`` and ``pipeline``, or a bad filter.
        """
        chosen, parsed = method_of(method, pipeline), Read.of(**read)
        draft = self.draft(chosen)
        return self.pipeline(chosen).context(
            user_id, query, budget_tokens=budget_tokens, draft=draft, read=parsed
        )

    @traced("feedback")
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
        report = FeedbackReport.of(
            interaction_id, answer=answer, rating=rating, used_record_ids=used_record_ids
        )
        self.store.interactions.feedback(report)
        self.trials.credit(interaction_id)  # a call served interleaved counts for its trial

    @traced("export")
    def export(self, user_id: str, path: str | Path, *, interactions: bool = False) -> int:
        """Write the user's records (and, with ``interactions``, logged calls) to a JSON Lines file.

        The file imports into any store with :meth:`import_user` (the format is in
        :mod:`personamem.portability`); returns how many records and interactions it holds.
        """
        return write_export(path, export_lines(self, check_user_id(user_id), interactions=interactions))

    @traced("import_user")
    def import_user(self, path: str | Path, *, user_id: str | None = None) -> Imported:
        """Store a user's export (from :meth:`export`), as that user or as ``user_id``.

        The file is validated whole first; records already here unchanged, and interactions already
        logged, are skipped, so importing twice changes nothing.

        Raises:
            IngestError: the file is not an export, or a line is not valid (the message names it).
        """
        data = read_export(path, user_id=None if user_id is None else check_user_id(user_id))
        written = self.store.add_many(data.records)
        logged = self.store.interactions.import_(data.interactions) if data.interactions else 0
        return Imported(records=written, interactions=logged)

    @traced("memory")
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
        return self._preference_memories().get(check_user_id(user_id))

    @traced("refresh_memories")
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
        memories = self._preference_memories  # asked for after the arguments are checked
        return _refresh(self.store, memories, user_ids, progress=progress, batch_size=batch_size)

    @traced("rerank")
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
        return _rerank(lambda: self.memory(user_id), self._llm, query, candidates, k)

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
        """The events of the user's record, oldest first: added, updated, superseded, then erased.

        Each says when and who (``"sdk"``, or the API key and tenant of a server request) and, while
        the record exists, its text as of that event. Erasure wins: after ``delete``, expiry or
        ``forget`` only the events, their times and actors are left, with no text. A record id the
        user never had has no events.
        """
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
