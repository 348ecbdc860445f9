"""PURPLE checkpoints: a folder with the scorer's weights (safetensors) and a config file (JSON).

``model.safetensors`` and ``config.json`` are all inference needs; the ``training`` section of the
config records how it was trained (and, in ``last/``, with the trainer's ``engine/`` state, lets training
resume where it stopped). Safetensors rather than
pickles: a checkpoint from somebody else can be loaded without running their code.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from personamem.errors import CheckpointError
from personamem.profile.purple.config import PurpleConfig
from personamem.profile.purple.model import RecordScorer

__all__ = ["load_checkpoint", "save_checkpoint"]

FORMAT = 1


def save_checkpoint(
    folder: Path,
    scorer: RecordScorer,
    *,
    encoder: str,
    training: dict[str, Any] | None = None,
) -> None:
    """Write the checkpoint, replacing the folder's files (each file is written whole, then renamed)."""
    folder.mkdir(parents=True, exist_ok=True)
    _atomic(folder / "model.safetensors", lambda p: save_file(_contiguous(scorer.state_dict()), str(p)))
    config = {
        "format": FORMAT,
        "encoder": encoder,
        "model": scorer.config.model_dump(),
        "training": training or {},
    }
    _atomic(
        folder / "config.json", lambda p: p.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    )


def load_checkpoint(folder: Path, *, encoder: str | None = None) -> tuple[RecordScorer, dict[str, Any]]:
    """The scorer (in eval mode) and the training section of the config.

    Raises:
        CheckpointError: missing files, an unknown format, or a checkpoint trained on another encoder.
    """
    config_path, weights = folder / "config.json", folder / "model.safetensors"
    if not config_path.is_file() or not weights.is_file():
        raise CheckpointError(f"{folder}: not a PURPLE checkpoint (needs config.json and model.safetensors)")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("format") != FORMAT:
        raise CheckpointError(f"{folder}: checkpoint format {config.get('format')!r}, expected {FORMAT}")
    if encoder is not None and config["encoder"] != encoder:
        raise CheckpointError(
            f"{folder}: trained on token states of encoder {config['encoder']!r}, not {encoder!r}"
        )
    # a checkpoint from before the rank prior was a scorer without one
    scorer = RecordScorer(PurpleConfig(**{"rank_prior": 0.0, **config["model"]}))
    scorer.load_state_dict(load_file(str(weights)))
    return scorer.eval(), config["training"]


def _contiguous(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.detach().contiguous().cpu() for k, v in tensors.items()}


def _atomic(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    write(partial)
    partial.replace(path)
