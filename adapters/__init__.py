"""Integrations with LLM frameworks (LangChain, LlamaIndex, LangGraph), as ``personamem.adapters``."""
