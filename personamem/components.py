"""What a memory and its tenant views load once and share: frozen LLMs and preference extractors.

An LLM takes seconds and gigabytes to load, and a trained extractor loads a checkpoint; a server
answers every API key through a tenant view of one memory, so every view must use the same copy,
loaded once under one lock. A view keeps what is its own (pipelines and preference memories over
its store); :class:`Components` keeps what is not.
"""

from __future__ import annotations

import threading

from personamem.llm.base import FrozenLLM
from personamem.pipeline.config import PipelineConfig
from personamem.pipeline.stages import build_extractor
from personamem.preference import PromptedExtractor

__all__ = ["Components"]


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
