"""Which pipeline each call of a memory runs, and the views its tenants get.

:class:`Serving` is a collaborator of :class:`~personamem.memory.PersonaMem` (``mem.serving``), one
per memory and tenant view, shared across threads: it serves the config given at open or else the
store's live pipeline, and resolves method names to pipelines built once
(:class:`~personamem.components.Pipelines`) from components shared with every view
(:class:`~personamem.components.Components`). :class:`TenantViews` keeps a memory's views, made once
per tenant.
"""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, cast

from personamem.components import Components, Pipelines
from personamem.errors import (
    ConfigError,
    MethodError,
    PersonaMemWarning,
    PipelineFallbackWarning,
    warn_fallback,
)
from personamem.interleaving import Draft
from personamem.llm.base import FrozenLLM
from personamem.methods import ServedMethods, method_config
from personamem.pipeline import Pipeline, PipelineConfig, load_pipeline
from personamem.pipeline.config import pipeline_config
from personamem.preference import PreferenceMemories
from personamem.profile import ProfileSelector
from personamem.retrieval import BM25Retriever
from personamem.store import Store
from personamem.trials import Trials

__all__ = ["Serving", "TenantViews", "pinned_at_open", "stored_pipeline"]

V = TypeVar("V")


class Serving:
    """The pipelines a memory serves over ``store`` (see the module; the arguments are ``PersonaMem``'s)."""

    def __init__(
        self,
        store: Store,
        *,
        pipeline: PipelineConfig | None = None,
        llm: FrozenLLM | None = None,
        components: Components | None = None,
    ) -> None:
        self.store = store
        self.pinned = pipeline  # None: serve the store's live pipeline (see config)
        self._live: tuple[str | None, PipelineConfig] = (None, PipelineConfig())  # (stored table, parsed)
        # LLMs and extractors, loaded once for this memory and its tenant views (they pass theirs)
        self.components = components or Components(llm)
        self._lock = threading.Lock()  # this object's pipeline builds
        self._bm25 = BM25Retriever(store)  # the per-user BM25 indexes its pipelines share
        self._pipelines = Pipelines(store, self.components, self._bm25, self._lock)
        self._methods: dict[str, PipelineConfig] = {}  # a pipeline:<file> is read once
        self.served_methods: ServedMethods | None = None  # see PersonaMem.served_methods
        self.trials = Trials(store)  # a candidate on trial against the live pipeline (interleaving)

    @property
    def config(self) -> PipelineConfig:
        """The pipeline served when a call names no method.

        The one given at open or construction (``pipeline=``), else the store's live pipeline (what
        ``personamem improve`` validated and put live, kept with the data so every process and server
        worker serves it; a tenant's view serves its tenant's), else the package default
        (:class:`~personamem.pipeline.PipelineConfig`'s defaults). A live pipeline changed by another
        process is served within :data:`~personamem.store.settings.FRESH_S` seconds.
        """
        if self.pinned is not None:
            return self.pinned
        stored = self.store.live_pipeline
        if stored != self._live[0]:
            self._live = (stored, stored_pipeline(stored))
            self._methods.clear()  # methods take the LLM, seed and budget from this config
        return self._live[1]

    @config.setter
    def config(self, config: PipelineConfig | None) -> None:
        """Serve ``config`` whatever the store's live pipeline is (None: follow the store)."""
        self.pinned = config
        self._methods.clear()

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
        if method is not None or self.pinned is not None or not self.config.log_interactions:
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

    def preference_memories(self) -> PreferenceMemories:
        """The configured pipeline's preference memories, or MethodError saying how to configure one."""
        found = self.pipeline().memories
        if found is None:
            raise MethodError(
                "no preference memory configured: set the pipeline's preference_memory to prompted or "
                "atomic (with llm), or memrerank:<checkpoint folder>"
            )
        return found

    def llm(self) -> FrozenLLM | None:
        """The LLM given at construction, else the one the configured pipeline names (loaded once)."""
        return self.components.llm(self.config)


class TenantViews:
    """A memory's tenant views, each made once and kept (with its pipelines and caches)."""

    def __init__(self) -> None:
        self._views: dict[str, Any] = {}
        self._lock = threading.Lock()  # making views

    def get(self, name: str, make: Callable[[str], V]) -> V:
        """Tenant ``name``'s view, made by ``make`` on first use."""
        view = self._views.get(name)  # not under the lock: no tenant waits for another's view
        if view is not None:
            return cast("V", view)
        with self._lock:
            view = self._views.get(name)
            if view is None:
                view = self._views[name] = make(name)
            return cast("V", view)

    def after(self, change: Callable[[], None]) -> list[Any]:
        """Apply ``change`` while no view is being made; the views made before it, to pass it on to."""
        with self._lock:
            change()
            return list(self._views.values())


def pinned_at_open(store: Store, pipeline: PipelineConfig | str | Path | None) -> PipelineConfig | None:
    """The config a memory opened with ``pipeline=`` serves (a file is read); None: the store's live one.

    A pipeline given at open wins over the store's live one, and says so (a warning for the caller of
    ``PersonaMem.open`` or ``connect``).
    """
    pinned = load_pipeline(pipeline) if isinstance(pipeline, str | Path) else pipeline
    stored = store.live_pipeline
    live = None if pinned is None or stored is None else stored_pipeline(stored)
    if live is not None and pinned != live:
        warnings.warn(
            f"serving the pipeline given at open, not the store's live pipeline "
            f"({live.chosen_by or 'set in the store'}); "
            "open without pipeline= (the CLI: without --config or ./personamem.toml) to serve it",
            PersonaMemWarning,
            stacklevel=3,
        )
    return pinned


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
