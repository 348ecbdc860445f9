"""Test support that ships with the library: contract tests every store backend must pass.

Subclass :class:`MemoryContract` in your test suite and provide a ``mem`` fixture that yields an
empty :class:`~personamem.PersonaMem` on your backend (like LangChain's standard test suites).
"""

from personamem.testing.contracts import MemoryContract

__all__ = ["MemoryContract"]
