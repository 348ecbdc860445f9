"""The user cache: where personamem keeps what it makes once per machine, and how it makes it once.

Converted models, the ONNX encoder export, corpus vectors and ranx's compile lock live under
``$PERSONAMEM_CACHE`` (else ``$XDG_CACHE_HOME/personamem``). Processes that start together on a fresh
machine (the web workers of one ``serve``, a test suite's workers, parallel evaluations) would each
make the same thing; :func:`make_once` lets one make it while the others wait, then find it made.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from personamem.settings import settings

__all__ = ["default_cache_dir", "make_once"]


def default_cache_dir() -> Path:
    """Where converted models are kept: ``$PERSONAMEM_CACHE``, else ``$XDG_CACHE_HOME/personamem``."""
    if (cache := settings().cache) is not None:
        return cache
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "personamem"


def make_once(done: Path, make: Callable[[], object], *, lock: Path) -> None:
    """Run ``make`` unless the file ``done`` exists, holding the file lock ``lock`` meanwhile.

    ``make`` must leave ``done`` whole or absent (write elsewhere, then rename): a process that finds
    it, before the lock or after waiting for it, uses it as it is.
    """
    from filelock import FileLock

    if done.is_file():
        return
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock)):
        if not done.is_file():  # another process may have made it while this one waited
            make()
