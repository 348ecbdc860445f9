"""The contract on the default backend: SQLite + embedded Chroma."""

from personamem.testing import MemoryContract


class TestLocalMemory(MemoryContract):
    pass
