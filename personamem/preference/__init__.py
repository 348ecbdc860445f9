"""MemRerank's preference memory: extracted once per history, cached per user, read by a setwise reranker.

:mod:`~personamem.preference.memory` is the memory and its written form, ``extractor`` the prompted
(or trained) LLM that writes it, ``service`` the per-user cache with its stale/deadline rules,
``setwise`` the 5-way LLM reranker that consumes it, and ``quality`` the deterministic checks that
regularize training. Training itself is in ``trainers/memrerank``.
"""

from personamem.preference.extractor import ExtractorStyle, PromptedExtractor
from personamem.preference.memory import PreferenceMemory, Statement, parse_memory
from personamem.preference.quality import QualityReport, memory_quality
from personamem.preference.service import PreferenceMemories
from personamem.preference.setwise import SetwiseReranker, heap_top_k

__all__ = [
    "ExtractorStyle",
    "PreferenceMemories",
    "PreferenceMemory",
    "PromptedExtractor",
    "QualityReport",
    "SetwiseReranker",
    "Statement",
    "heap_top_k",
    "memory_quality",
    "parse_memory",
]
