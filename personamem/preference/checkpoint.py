"""Trained extractor checkpoints: a LoRA adapter (peft's folder) beside ``extractor.json``.

``extractor.json`` names the base model (a packaged name or folder) and the extractor settings the
adapter was trained with, so ``memory = "memrerank:<folder>"`` rebuilds the same prompt. Loading
merges the adapter into the base model's weights: inference then runs at the base model's speed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from personamem.errors import CheckpointError, MissingExtraError
from personamem.preference.extractor import PromptedExtractor

__all__ = ["ADAPTER", "CONFIG", "FORMAT", "load_extractor", "read_extractor_config", "write_extractor_config"]

FORMAT = 1
CONFIG = "extractor.json"
ADAPTER = "adapter"
"""Subfolder holding peft's ``adapter_config.json`` and ``adapter_model.safetensors``."""


def write_extractor_config(
    folder: Path, *, base_model: str, settings: dict[str, Any], training: dict[str, Any]
) -> None:
    """Write ``extractor.json`` (whole, then renamed); the trainer saves the adapter beside it."""
    folder.mkdir(parents=True, exist_ok=True)
    body = {"format": FORMAT, "base_model": base_model, "extractor": settings, "training": training}
    partial = folder / (CONFIG + ".partial")
    partial.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    partial.replace(folder / CONFIG)


def read_extractor_config(folder: Path) -> dict[str, Any]:
    """The checkpoint's ``extractor.json``.

    Raises:
        CheckpointError: a missing folder, config or adapter, or an unknown format.
    """
    config_path = folder / CONFIG
    if not config_path.is_file() or not (folder / ADAPTER / "adapter_config.json").is_file():
        raise CheckpointError(
            f"{folder}: not a MemRerank extractor checkpoint "
            f"(needs {CONFIG} and {ADAPTER}/adapter_config.json)"
        )
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("format") != FORMAT:
        raise CheckpointError(f"{folder}: checkpoint format {config.get('format')!r}, expected {FORMAT}")
    return config


def load_extractor(folder: str | Path) -> PromptedExtractor:
    """The trained extractor: base model plus merged adapter, on the transformers runtime.

    Raises:
        CheckpointError: see :func:`read_extractor_config`.
        MissingExtraError: peft is not installed (``pip install "personamem[train]"``).
    """
    folder = Path(folder)
    config = read_extractor_config(folder)
    try:
        from peft import PeftModel
    except ImportError:
        raise MissingExtraError(["peft"], "train") from None
    from personamem.llm.hf import TransformersLLM

    base = TransformersLLM.local(config["base_model"])
    merged = PeftModel.from_pretrained(base.model, str(folder / ADAPTER)).merge_and_unload()
    llm = TransformersLLM(merged, base.tokenizer, name=f"{base.name}+{folder.name}")
    settings = dict(config["extractor"])
    label = (
        f"memrerank:{folder.resolve()}:{(folder / ADAPTER / 'adapter_model.safetensors').stat().st_mtime_ns}"
    )
    return PromptedExtractor(llm, label=label, **settings)
