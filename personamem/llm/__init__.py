"""The frozen-LLM layer: one protocol (log-likelihood, generation), local and remote backends."""

from personamem.llm.base import (
    FrozenLLM,
    Generations,
    LLMError,
    Message,
    Prompt,
    Sampling,
    SamplingOptions,
    Scores,
    Usage,
)
from personamem.llm.budget import Fitted, fit_to_budget
from personamem.llm.ct2 import CTranslate2LLM
from personamem.llm.hf import TransformersLLM
from personamem.llm.load import load_llm
from personamem.llm.openai_backend import OpenAICompatibleLLM
from personamem.llm.vllm_backend import VLLMBackend

__all__ = [
    "CTranslate2LLM",
    "Fitted",
    "FrozenLLM",
    "Generations",
    "LLMError",
    "Message",
    "OpenAICompatibleLLM",
    "Prompt",
    "Sampling",
    "SamplingOptions",
    "Scores",
    "TransformersLLM",
    "Usage",
    "VLLMBackend",
    "fit_to_budget",
    "load_llm",
]
