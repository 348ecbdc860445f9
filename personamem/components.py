"""What a memory and its tenant views load and build once: the shared models, and each view's pipelines.

An LLM takes seconds and gigabytes to load, and a trained extractor loads a checkpoint; a server
answers every API key through a tenant view of one memory, so every view must use the same copy,
loaded once under one lock: :class:`Components`. A view keeps what is its own, the pipelines and
preference memories that read its store: :class:`Pipelines`, built from those components.
"""

from __future__ import annotations

import threading

from personamem.llm.base import FrozenLLM
from personamem.methods import check_llm
from personamem.pipeline import Pipeline
from personamem.pipeline.config import LLM_MEMORIES, PipelineConfig
from personamem.pipeline.stages import build_extractor
from personamem.preference import PreferenceMemories, PromptedExtractor
from personamem.retrieval import BM25Retriever
from personamem.store import Store

__all__ = ["Components", "Pipelines"]


class Components:
    """The loaded LLMs and extractors of one memory and all its tenant views; thread-safe.

    Args:
        llm: an LLM given in code; it serves every config (no other is loaded).
    """

    def __init__(self, llm: FrozenLLM | None = None) -> None:
        self.given = llm
        self._llms: dict[str, FrozenLLM] = {}
        self._extractors: dict[tuple[object, ...], PromptedExtractor] = {}
        self._lock = threading.Lock()

    def llm(self, config: PipelineConfig) -> FrozenLLM | None:
        """The given LLM, else the one ``config.llm`` names, loaded on first use (None: none named).

        With ``config.llm_url`` it is that server's model, reached through the OpenAI-compatible backend.
        """
        if self.given is not None or config.llm is None:
            return self.given
        name = f"{config.llm}@{config.llm_url}" if config.llm_url else config.llm
        if not config.llm_url:
            name = f"{name}:{config.llm_runtime}:{config.llm_threads}"
        with self._lock:
            if name not in self._llms:
                from personamem.llm.load import load_llm

                self._llms[name] = load_llm(
                    config.llm, runtime=config.llm_runtime, url=config.llm_url, threads=config.llm_threads
                )
            return self._llms[name]

    def extractor(self, config: PipelineConfig, writer: FrozenLLM | None) -> PromptedExtractor:
        """The extractor ``config.preference_memory`` names, written by ``writer``, built once.

        Raises:
            See :func:`~personamem.pipeline.stages.build_extractor`; ``none`` is the caller's to skip.
        """
        key = (config.preference_memory, config.memory_words, id(writer))
        with self._lock:
            found = self._extractors.get(key)
            if found is None:
                found = build_extractor(config, writer)
                assert found is not None, "preference_memory 'none' builds no extractor"
                self._extractors[key] = found
            return found


class Pipelines:
    """The pipelines built over ``store``, by config; thread-safe, and the hot path takes no lock.

    Args:
        store: the store (or tenant view of it) every pipeline reads.
        components: the LLMs and extractors shared with the other views.
        bm25: the per-user BM25 indexes every pipeline of the view shares.
        lock: held while a pipeline is built (the view's, so no other view waits on it).
    """

    def __init__(
        self, store: Store, components: Components, bm25: BM25Retriever, lock: threading.Lock
    ) -> None:
        self.store = store
        self.components = components
        self._bm25 = bm25
        self._lock = lock
        self._built: dict[PipelineConfig, Pipeline] = {}
        self._memories: dict[tuple[int, float | None], PreferenceMemories] = {}

    def get(self, config: PipelineConfig, what: str, name: str = "pipeline") -> Pipeline:
        """The pipeline for ``config``, built on first use (``what`` names it in errors, ``name`` in logs).

        Raises:
            MethodError: ``config`` needs an LLM and none is given or named.
        """
        found = self._built.get(config)
        if found is not None:
            return found
        with self._lock:
            found = self._built.get(config)
            if found is None:
                llm = self.components.llm(config) if config.needs_llm else self.components.given
                check_llm(what, config, llm)
                memories = self._memories_for(config, llm)
                found = self._built[config] = Pipeline(
                    self.store, config, llm=llm, bm25=self._bm25, memories=memories, name=name
                )
            return found

    def _memories_for(self, config: PipelineConfig, llm: FrozenLLM | None) -> PreferenceMemories | None:
        """The memories ``config`` names, shared by every pipeline that names the same (lock held).

        A method name applied over the config keeps its memory, so sharing spares the rebuilds (and a
        checkpoint's load) that one object per pipeline would repeat.
        """
        if config.preference_memory == "none":
            return None
        writer = llm if config.preference_memory in LLM_MEMORIES else None
        extractor = self.components.extractor(config, writer)  # a checkpoint loads once for every view
        key = (id(extractor), config.memory_timeout_s)  # the components keep each extractor: ids stay
        memories = self._memories.get(key)
        if memories is None:
            memories = self._memories[key] = PreferenceMemories(
                self.store, extractor, timeout_s=config.memory_timeout_s
            )
        return memories
