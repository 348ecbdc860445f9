"""The frozen-LLM protocol every learned component is fitted against.

Two capabilities: the log-likelihood of a target given a prompt (PURPLE's reward, MemRerank's and
PG-Ret's judgements) and generation (PBR's pseudo utterances). Prompts are plain strings or chat
messages; a backend renders messages with its model's chat template. Every call reports token usage.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, TypedDict, Unpack, overload, runtime_checkable

from personamem.errors import LLMError

__all__ = [
    "FrozenLLM",
    "Generations",
    "LLMError",
    "Message",
    "Prompt",
    "Sampling",
    "SamplingOptions",
    "Scores",
    "Usage",
    "cut_at_stop",
]

Message: TypeAlias = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": "..."}
Prompt: TypeAlias = str | Sequence[Message]


@dataclass(frozen=True)
class Sampling:
    """How :meth:`FrozenLLM.generate` decodes, declared once for every backend and wrapper.

    A new option is a field here and in :class:`SamplingOptions` (a test checks that they agree);
    backends read the resolved values, so a default lives nowhere else.

    Attributes:
        n: completions per prompt.
        max_tokens: most tokens one completion may take.
        temperature: 0 is greedy decoding; above 0 samples.
        top_p: nucleus sampling's probability mass (when sampling).
        seed: makes sampling repeatable; None draws fresh randomness.
        stop: strings that end a completion (not included in it).

    Raises:
        ValueError: ``n`` or ``max_tokens`` is below 1.
    """

    n: int = 1
    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    stop: Sequence[str] = ()

    def __post_init__(self) -> None:
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError("n and max_tokens must be at least 1")

    @property
    def greedy(self) -> bool:
        """Temperature 0: the backends decode greedily and ignore ``top_p`` and ``seed``."""
        return self.temperature <= 0


class SamplingOptions(TypedDict, total=False):
    """:class:`Sampling`'s fields as ``generate`` keywords, so call sites stay ``n=2, seed=3``."""

    n: int
    max_tokens: int
    temperature: float
    top_p: float
    seed: int | None
    stop: Sequence[str]


@dataclass(frozen=True)
class Usage:
    """Tokens a call consumed, so callers can log cost.

    Attributes:
        prompt_tokens: LLM prompt tokens.
        completion_tokens: LLM completion tokens.
        encoder_tokens: word pieces the sentence encoder ran (a search's query, a personalizer's
            expansions); an LLM backend's own usage has none.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    encoder_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """LLM tokens, prompt plus completion (the encoder's are a local model's, counted apart)."""
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.encoder_tokens + other.encoder_tokens,
        )


@dataclass(frozen=True)
class Scores(Sequence[float]):
    """Log-likelihoods of targets, one per request; indexes like ``list[float]``.

    Attributes:
        logprobs: sum of the target tokens' log-probabilities (natural log), per request.
        token_logprobs: each target token's log-probability, per request.
        usage: prompt tokens are the prompt + target tokens scored; completion tokens are what a
            server generated alongside (some refuse to score with ``max_tokens=0``), else 0.
    """

    logprobs: list[float]
    token_logprobs: list[list[float]]
    usage: Usage = field(default_factory=Usage)

    @property
    def token_counts(self) -> list[int]:
        """Number of target tokens per request (for per-token normalisation)."""
        return [len(t) for t in self.token_logprobs]

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        return self.logprobs[index]

    def __len__(self) -> int:
        return len(self.logprobs)

    def __iter__(self) -> Iterator[float]:
        return iter(self.logprobs)


@dataclass(frozen=True)
class Generations(Sequence[list[str]]):
    """Sampled completions, ``n`` per prompt; indexes like ``list[list[str]]``."""

    texts: list[list[str]]
    usage: Usage = field(default_factory=Usage)

    @overload
    def __getitem__(self, index: int) -> list[str]: ...
    @overload
    def __getitem__(self, index: slice) -> list[list[str]]: ...
    def __getitem__(self, index: int | slice) -> list[str] | list[list[str]]:
        return self.texts[index]

    def __len__(self) -> int:
        return len(self.texts)

    def __iter__(self) -> Iterator[list[str]]:
        return iter(self.texts)


@runtime_checkable
class FrozenLLM(Protocol):
    """A language model used as a fixed judge and generator, never trained here."""

    @property
    def name(self) -> str:
        """Identifies the model (for caches keyed by model)."""
        ...

    @property
    def context_window(self) -> int:
        """Most tokens one prompt plus target (or completion) may take."""
        ...

    def count_tokens(self, text: str) -> int:
        """Tokens ``text`` takes in this model's vocabulary (no special tokens)."""
        ...

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """For each (prompt, target): log p(target | prompt), summed over the target's tokens."""
        ...

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """``n`` completions per prompt, decoded as the options say (:class:`Sampling`)."""
        ...


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first occurrence of any stop string (which is not included)."""
    cut = min((i for s in stop if s and (i := text.find(s)) >= 0), default=len(text))
    return text[:cut]
