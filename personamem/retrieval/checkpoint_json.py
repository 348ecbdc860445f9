"""The JSON file that names a checkpoint's format, read once for every kind of query-side checkpoint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from personamem.errors import CheckpointError

__all__ = ["read_checkpoint_json"]


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
