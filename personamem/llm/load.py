"""One place that turns a model name into a frozen LLM, so the SDK, the CLI and the harness agree.

A name is a packaged model (:data:`~personamem.llm.packaged.LOCAL_MODELS`) or a local transformers
folder; with a URL it is the model an OpenAI-compatible server serves. The runtime picks the local
engine: CTranslate2 (int8, the fast CPU path) or transformers (float32, the reference, and the one
trainers take gradients through).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, TypeAlias, get_args

from personamem.llm.base import FrozenLLM

__all__ = ["DEFAULT_RUNTIME", "REFERENCE_RUNTIME", "RUNTIMES", "Runtime", "load_llm"]

Runtime: TypeAlias = Literal["ctranslate2", "transformers"]
"""The local engines, named here only: configs, the CLI's ``--llm-runtime`` and TOML read this type."""
RUNTIMES: tuple[Runtime, ...] = get_args(Runtime)
DEFAULT_RUNTIME: Runtime = "ctranslate2"
"""The pipeline's: its LLM stages generate, and CTranslate2 decodes ~2.6x faster on a CPU."""
REFERENCE_RUNTIME: Runtime = "transformers"
"""The harness's and the trainers': scores that are the measurement or the reward must not move with
int8 rounding or with which other requests share the batch (CTranslate2's int8 scores do, by nats)."""


def load_llm(
    name: str,
    *,
    runtime: Runtime = DEFAULT_RUNTIME,
    url: str | None = None,
    threads: int | None = None,
    cache_dir: Path | None = None,
    device: str = "cpu",
) -> FrozenLLM:
    """The frozen LLM ``name`` names, on ``runtime`` (or served at ``url``).

    Args:
        name: a packaged model (or alias), a local transformers folder, or the model ``url`` serves.
        runtime: the local engine (ignored with ``url``).
        url: an OpenAI-compatible server's base URL (``.../v1``); None runs the model here.
        cache_dir: where converted copies are kept (default: the user cache).
        threads: CPU threads for the CTranslate2 runtime (default
            :func:`~personamem.llm.ct2.default_threads`); the transformers runtime uses torch's setting.
        device: where the transformers runtime puts the model (``cpu``, ``cuda``, ``cuda:1``); the
            CTranslate2 runtime runs on the CPU.

    Raises:
        LLMError: an unknown name, a model that is not installed or fails its checksum.
    """
    if url is not None:
        from personamem.llm.openai_backend import OpenAICompatibleLLM

        return OpenAICompatibleLLM(url, name)
    if runtime == "ctranslate2":
        from personamem.llm.ct2 import CTranslate2LLM

        return CTranslate2LLM.local(name, cache_dir=cache_dir, threads=threads)
    if runtime == "transformers":
        from personamem.llm.hf import TransformersLLM

        return TransformersLLM.local(name, cache_dir=cache_dir, device=device)
    raise ValueError(f"unknown LLM runtime {runtime!r}; choose from {', '.join(RUNTIMES)}")
