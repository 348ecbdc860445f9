"""A memory over one store: how it is opened, which pipeline each call runs, and its tenant views.

The base of :class:`~personamem.memory.PersonaMem` (which documents the constructor's arguments): one
object per process, shared across threads, serving the config given at open or else the store's live
pipeline, and resolving method names to pipelines built once (:class:`~personamem.components.Pipelines`).
A tenant's view is an object of the same class over the tenant's store, sharing this one's components.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from types import TracebackType
from typing import Self

from personamem.components import Components, Pipelines
from personamem.encoder import Encoder
from personamem.errors import (
    ConfigError,
    MethodError,
    PersonaMemWarning,
    PipelineFallbackWarning,
    warn_fallback,
)
from personamem.interleaving import Draft
from personamem.jobs import Jobs
from personamem.llm.base import FrozenLLM
from personamem.methods import ServedMethods, method_config
from personamem.pipeline import Pipeline, PipelineConfig, load_pipeline
from personamem.pipeline.config import pipeline_config
from personamem.preference import PreferenceMemories, PreferenceMemory
from personamem.profile import ProfileSelector
from personamem.records import check_user_id
from personamem.retrieval import BM25Retriever
from personamem.store import Store
from personamem.store.duplicates import DUPLICATE_THRESHOLD, DuplicatePolicy
from personamem.trials import Trials
from personamem.webhooks import Webhooks

__all__ = ["Serving", "stored_pipeline"]


class Serving:
    """A store, the pipelines served over it, and the views its tenants get (see the module)."""

    def __init__(
        self,
        store: Store,
        *,
        pipeline: PipelineConfig | None = None,
        llm: FrozenLLM | None = None,
        components: Components | None = None,
    ) -> None:
        self.store = store
        self._pinned = pipeline  # None: serve the store's live pipeline (see config)
        self._live: tuple[str | None, PipelineConfig] = (None, PipelineConfig())  # (stored table, parsed)
        # LLMs and extractors, loaded once for this memory and its tenant views (they pass theirs)
        self._components = components or Components(llm)
        self._lock = threading.Lock()  # this object's pipeline builds
        self._bm25 = BM25Retriever(store)  # the per-user BM25 indexes its pipelines share
        self._pipelines = Pipelines(store, self._components, self._bm25, self._lock)
        self._methods: dict[str, PipelineConfig] = {}  # a pipeline:<file> is read once
        self._tenants: dict[str, Self] = {}
        self._views_lock = threading.Lock()  # making tenant views
        # what add does with a near-duplicate, unless a call says otherwise (see store/duplicates.py)
        self.duplicates = DuplicatePolicy.KEEP
        self.duplicate_threshold = DUPLICATE_THRESHOLD
        self._served: ServedMethods | None = None
        self.trials = Trials(store)  # a candidate on trial against the live pipeline (interleaving)
        self.webhooks = Webhooks(store)  # this view's tenant's webhooks and dead letters
        self.jobs = Jobs(store)  # this view's tenant's bulk imports, run in the background

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

        ``pipeline`` is a config, or the path of a TOML file with a ``[pipeline]`` table.
        """
        return cls._opened(Store.open(path, encoder=encoder), _pinned(pipeline), llm)

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
        return cls._opened(store, _pinned(pipeline), llm)

    @classmethod
    def _opened(cls, store: Store, pipeline: PipelineConfig | None, llm: FrozenLLM | None) -> Self:
        """The memory over ``store``; a pipeline given at open wins over the store's live one, and says so."""
        stored = store.live_pipeline
        live = None if pipeline is None or stored is None else stored_pipeline(stored)
        if live is not None and pipeline != live:
            warnings.warn(
                f"serving the pipeline given at open, not the store's live pipeline "
                f"({live.chosen_by or 'set in the store'}); "
                "open without pipeline= (the CLI: without --config or ./personamem.toml) to serve it",
                PersonaMemWarning,
                stacklevel=3,
            )
        return cls(store, pipeline=pipeline, llm=llm)

    def tenant(self, name: str) -> Self:
        """This memory as tenant ``name`` sees it: its own users, even where ids equal another's.

        Isolation is the store's (:meth:`Store.for_tenant`), so every method, pipeline and adapter
        built on the returned object reads and erases that tenant's records only. It shares this
        object's store, pipeline config and loaded LLMs, is made once per name and kept (with its
        pipelines and caches); closing it does nothing.

        Raises:
            InvalidInputError: a tenant name that is not 1-64 letters, digits, ``_``, ``.``, ``-``.
        """
        view = self._tenants.get(name)  # not under the build lock: no tenant waits for another's build
        if view is not None:
            return view
        with self._views_lock:
            view = self._tenants.get(name)
            if view is None:  # kept: its pipelines and BM25 caches outlive the call
                view = type(self)(
                    self.store.for_tenant(name), pipeline=self._pinned, components=self._components
                )
                view.duplicates, view.duplicate_threshold = self.duplicates, self.duplicate_threshold
                view.served_methods = self.served_methods
                self._tenants[name] = view
            return view

    @property
    def served_methods(self) -> ServedMethods | None:
        """The method names :meth:`search`, :meth:`context`, :meth:`pipeline` and :meth:`selector` take.

        None (the default, for the SDK and the CLI): any name, a file or folder on this machine
        included. A server sets a :class:`~personamem.methods.ServedMethods` (``create_app`` and
        ``personamem mcp`` do), so a request cannot name a path: the name is checked before anything
        is read. Setting it sets every tenant view's too, so REST, the inspector and MCP share one
        rule. A :class:`~personamem.pipeline.PipelineConfig` passed in process is the caller's own
        code and is not checked.
        """
        return self._served

    @served_methods.setter
    def served_methods(self, policy: ServedMethods | None) -> None:
        with self._views_lock:
            self._served = policy
            views = list(self._tenants.values())
        for view in views:
            view.served_methods = policy

    @property
    def config(self) -> PipelineConfig:
        """The pipeline this memory serves when a call names no method.

        The one given at open or construction (``pipeline=``), else the store's live pipeline (what
        ``personamem improve`` validated and put live, kept with the data so every process and server
        worker serves it; a tenant's view serves its tenant's), else the package default
        (:class:`~personamem.pipeline.PipelineConfig`'s defaults). A live pipeline changed by another
        process is served within :data:`~personamem.store.settings.FRESH_S` seconds.
        """
        if self._pinned is not None:
            return self._pinned
        stored = self.store.live_pipeline
        if stored != self._live[0]:
            self._live = (stored, stored_pipeline(stored))
            self._methods.clear()  # methods take the LLM, seed and budget from this config
        return self._live[1]

    @config.setter
    def config(self, config: PipelineConfig | None) -> None:
        """Serve ``config`` in this object whatever the store's live pipeline is (None: follow the store)."""
        self._pinned = config
        self._methods.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release connections; the data stays on disk."""
        self.store.close()

    def pipeline(self, method: PipelineConfig | str | None = None) -> Pipeline:
        """The pipeline for a method name or config (default: the configured one), built once and kept.

        Raises:
            MethodError: an unknown name, one :attr:`served_methods` does not serve, or one that
                needs an LLM when none is configured.
        """
        if method is None:
            return self._pipelines.get(self.config, "the configured pipeline")
        if isinstance(method, PipelineConfig):
            return self._pipelines.get(method, "the pipeline")
        # a served name (an alias's method) is checked as a string, before any file is read
        run = method if self.served_methods is None else self.served_methods.resolve(method)
        config = self._methods.get(run)
        if config is None:
            config = self._methods[run] = method_config(run, self.config)
        return self._pipelines.get(config, f"method {method!r}", method)

    def draft(self, method: PipelineConfig | str | None) -> Draft | None:
        """A call's interleaving with the candidate on trial (None: the live pipeline alone).

        Drawn on the trial's share of the calls that name no method and are logged; a memory opened
        with ``pipeline=`` serves that pipeline alone.
        """
        if method is not None or self._pinned is not None or not self.config.log_interactions:
            return None
        drawn = self.trials.draw()
        if drawn is None:
            return None
        trial, config = drawn
        return Draft(trial, self._pipelines.get(config, f"trial {trial.id}'s candidate"))

    def selector(self, name: str) -> ProfileSelector:
        """The profile selector called ``name`` (``relevance``, ``listwise``, ``purple:<folder>``...).

        For frameworks that bring their own candidates (a LangChain compressor, a LlamaIndex
        postprocessor); built once per name, with the configured LLM where it needs one.

        Raises:
            MethodError: an unknown selector, ``none``, an LLM selector without an LLM, or a
                ``purple:<folder>`` that :attr:`served_methods` does not serve.
            CheckpointError: a PURPLE checkpoint that cannot be loaded.
        """
        if name == "none":
            raise MethodError("selector 'none' selects nothing: name a selector such as relevance")
        if self.served_methods is not None:
            self.served_methods.check_selector(name)
        try:
            config = pipeline_config({**self.config.model_dump(), "selector": name}, source="selector")
        except ConfigError as exc:
            raise MethodError(str(exc)) from None
        found = self._pipelines.get(config, f"selector {name!r}").selector
        assert found is not None  # every name but "none" builds one
        return found

    def stored_memory(self, user_id: str) -> PreferenceMemory:
        """The user's preference memory as last built, without building one (no LLM call).

        ``stale`` as :meth:`~personamem.preference.PreferenceMemories.stored` says: the records
        changed since, or the user has records and no memory yet.

        Raises:
            MethodError: no preference memory is configured (as :meth:`memory`).
        """
        return self._preference_memories().stored(check_user_id(user_id))

    def _preference_memories(self) -> PreferenceMemories:
        """The configured pipeline's preference memories, or MethodError saying how to configure one."""
        found = self.pipeline().memories
        if found is None:
            raise MethodError(
                "no preference memory configured: set the pipeline's preference_memory to prompted or "
                "atomic (with llm), or memrerank:<checkpoint folder>"
            )
        return found

    def _llm(self) -> FrozenLLM | None:
        """The LLM given at construction, else the one the configured pipeline names (loaded once)."""
        return self._components.llm(self.config)


def _pinned(pipeline: PipelineConfig | str | Path | None) -> PipelineConfig | None:
    """The config a pipeline file or object given at open names (None: serve the store's live one)."""
    return load_pipeline(pipeline) if isinstance(pipeline, str | Path) else pipeline


def stored_pipeline(stored: str | None) -> PipelineConfig:
    """A store's live pipeline (:attr:`Store.live_pipeline`), validated; the default where none or broken.

    A table that no longer validates (written by another version, say) must not take every search
    down: it is a warning naming the problem, and the default serves until ``improve`` runs again
    or is rolled back.
    """
    if stored is None:
        return PipelineConfig()
    try:
        return pipeline_config(json.loads(stored), source="the store's live pipeline")
    except (ConfigError, ValueError) as exc:
        warn_fallback(
            f"{exc}; serving the package default (run 'personamem improve' again, or --rollback)",
            PipelineFallbackWarning,
        )
        return PipelineConfig()
