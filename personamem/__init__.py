"""personamem: per-user memory for LLM applications."""
