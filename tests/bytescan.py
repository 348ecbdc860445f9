"""Find a store's secrets in its files: byte strings, and vectors stored as float32 at any alignment.

Chroma keeps a vector in its HNSW files normalized again for cosine space, so the bytes there can
differ from the vector given in the last bits: vectors are matched on their first four components
within a tolerance, not byte for byte.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def store_files(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path.

    A file deleted between the listing and its read (a store's background thread may be sweeping,
    Chroma replacing a segment's files) holds nothing any more, so it is left out.
    """
    files: dict[str, bytes] = {}
    for folder, _, names in os.walk(root):  # a folder deleted mid-walk is skipped, not an error
        for name in names:
            path = Path(folder) / name
            try:
                if path.is_file():
                    files[str(path.relative_to(root))] = path.read_bytes()
            except FileNotFoundError:
                continue
    return files


def files_containing(files: dict[str, bytes], needle: bytes) -> list[str]:
    """Names of the files that hold ``needle``."""
    return [name for name, data in files.items() if needle in data]


def vectors_in(files: dict[str, bytes], vectors: np.ndarray, tol: float = 1e-6) -> set[int]:
    """Rows of ``vectors`` whose first four components appear, as float32 within ``tol``, in a file."""
    heads = np.asarray(vectors, dtype=np.float32)[:, :4]
    found: set[int] = set()
    for data in files.values():
        for offset in range(4):
            usable = (len(data) - offset) // 4 * 4
            floats = np.frombuffer(data[offset : offset + usable], dtype="<f4")
            if len(floats) < 4:
                continue
            order = np.argsort(floats, kind="stable")
            ordered = floats[order]
            low = np.searchsorted(ordered, heads[:, 0] - tol)
            high = np.searchsorted(ordered, heads[:, 0] + tol, side="right")
            for row, (start, stop) in enumerate(zip(low, high, strict=True)):
                if row in found:
                    continue
                for i in order[start:stop]:
                    with np.errstate(invalid="ignore", over="ignore"):  # random bytes read as floats
                        close = i + 4 <= len(floats) and np.all(np.abs(floats[i : i + 4] - heads[row]) < tol)
                    if close:
                        found.add(row)
                        break
    return found
