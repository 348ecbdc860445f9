"""Integrations with LLM frameworks (LangChain, LlamaIndex), imported as ``personamem.adapters``."""
