"""A real small filesystem for tests and benchmarks that fill the disk: a tmpfs, and ballast to fill it.

A full disk cannot be faked faithfully: SQLite, the OS and Chroma's Rust core each fail their own way
(and Chroma once hung), so the tests fill a real filesystem. Mounting one needs root; where that is
not possible, :func:`tmpfs` raises :class:`OSError` with the reason, for the caller to skip.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

__all__ = ["MAX_FILLED", "ballast", "tmpfs"]

MAX_FILLED = 1 << 30
"""The largest filesystem :func:`ballast` fills: a tmpfs unmounted under a running test once made it
fill the disk beneath (62 GB)."""


@contextlib.contextmanager
def tmpfs(where: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``where`` (made if absent) until the block ends.

    Raises:
        OSError: not root, no ``mount``, or the mount failed (a container without the right).
    """
    mount, umount = shutil.which("mount"), shutil.which("umount")
    if os.name != "posix" or os.geteuid() != 0:
        raise OSError("mounting a tmpfs needs root")
    if mount is None or umount is None:
        raise OSError("no mount/umount command on PATH")
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise OSError(f"mount -t tmpfs failed: {done.stderr.strip() or done.returncode}")
    try:
        yield where
    finally:
        # lazily if something still holds a file there: the mount goes once it is let go
        if subprocess.run([umount, str(where)], capture_output=True).returncode != 0:
            subprocess.run([umount, "-l", str(where)], capture_output=True, check=True)


def ballast(path: Path, *, leave: int) -> int:
    """Write a file at ``path`` that leaves ``leave`` bytes free on its filesystem; return its size.

    Raises:
        RuntimeError: ``path``'s folder is not the root of a mounted filesystem of at most
            :data:`MAX_FILLED` bytes (a :func:`tmpfs`): nothing else is ever filled.
    """
    usage = shutil.disk_usage(path.parent)
    if not os.path.ismount(path.parent) or usage.total > MAX_FILLED:
        raise RuntimeError(f"{path.parent} is not a small mounted filesystem; it is not filled")
    size = max(0, usage.free - leave)
    with path.open("wb") as file:
        file.truncate(0)
        for start in range(0, size, 1 << 20):
            file.write(b"\1" * min(1 << 20, size - start))  # written, not sparse: tmpfs counts pages
    return size
