"""Test support that ships with the library: contract tests and a scripted fake LLM.

Subclass :class:`MemoryContract` (fixture ``mem``: an empty PersonaMem on your backend) or
:class:`FrozenLLMContract` (fixture ``llm``: your backend) in your test suite, like LangChain's
standard test suites. :class:`FakeLLM` drives control-flow tests (retries, parsing, fallbacks) only.
"""

from personamem.testing.contracts import MemoryContract
from personamem.testing.llm import FakeLLM, FrozenLLMContract

__all__ = ["FakeLLM", "FrozenLLMContract", "MemoryContract"]
