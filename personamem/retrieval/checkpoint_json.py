"""What every query-side checkpoint (tower, adapter) checks: its JSON's format, and its record encoder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from personamem.encoder import Encoder
from personamem.errors import CheckpointError

__all__ = ["check_record_encoder", "read_checkpoint_json"]


def read_checkpoint_json(path: Path, expected_format: str, kind: str) -> dict[str, Any]:
    """The JSON object at ``path``, whose ``format`` must be ``expected_format``.

    Raises:
        CheckpointError: unreadable, not JSON, not an object, or another format (``kind`` names
            the checkpoint in the message).
    """
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: unreadable ({exc})") from None
    if not isinstance(info, dict) or info.get("format") != expected_format:
        found = info.get("format") if isinstance(info, dict) else None
        raise CheckpointError(f"{path}: {kind} format {found!r}, expected {expected_format}")
    return info


def check_record_encoder(
    folder: Path, info: dict[str, Any], record_encoder: Encoder, what: str, remedy: str
) -> None:
    """Refuse a checkpoint trained against another record encoder (or width) than the store's.

    Its query vectors would be compared with vectors of another space, which ranks silently wrong.

    Raises:
        CheckpointError: the names or widths differ; ``what`` names the checkpoint and ``remedy``
            says what to do instead.
    """
    trained_on, dim = info.get("record_encoder"), info.get("dim")
    if trained_on != record_encoder.name or dim != record_encoder.dim:
        raise CheckpointError(
            f"{folder}: this {what} was trained against record encoder {trained_on!r} ({dim} dims), but the "
            f"store's records are embedded by {record_encoder.name!r} ({record_encoder.dim} dims); {remedy}"
        )
