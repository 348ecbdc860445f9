"""The pipeline's view of its frozen LLM: token usage counted per call and an optional deadline.

A call's meter also holds the word pieces its sentence encoder ran
(:func:`~personamem.encoder.counting_tokens`), so :attr:`Meter.usage` is all that the call spent.

A stage never sees a slow backend: past the deadline a call raises :class:`LLMError`, which every LLM
stage already turns into its fallback (the raw query, the first-stage order). Python cannot stop a
running thread, so a timed-out call finishes in the background and its result is dropped; a local
model is busy meanwhile, which is why the deadline is a budget for the whole context call rather
than per LLM call. Usage and deadline live in context variables, so concurrent calls on one
``PersonaMem`` (threads or tasks) are metered separately.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar, Unpack

from personamem.encoder import counting_tokens
from personamem.errors import LLMError
from personamem.llm.base import FrozenLLM, Generations, Prompt, SamplingOptions, Scores, Usage
from personamem.tally import tallying

__all__ = ["Meter", "MeteredLLM", "metering"]

_R = TypeVar("_R", Scores, Generations)

_deadline: ContextVar[float | None] = ContextVar("personamem_llm_deadline", default=None)
_usage: ContextVar[list[Usage] | None] = ContextVar("personamem_llm_usage", default=None)


@dataclass(frozen=True)
class Meter:
    """What one call has spent so far: its encoder calls' word pieces and its LLM calls' usage."""

    encoded: list[int]
    llm: list[Usage]

    @property
    def usage(self) -> Usage:
        """The call's tokens, LLM and encoder."""
        return sum(self.llm, Usage(encoder_tokens=sum(self.encoded)))


@contextlib.contextmanager
def metering(timeout_s: float | None) -> Iterator[Meter]:
    """Within the block, LLM and encoder calls add their tokens to the meter; LLM calls share a deadline."""
    deadline_token = _deadline.set(None if timeout_s is None else time.monotonic() + timeout_s)
    try:
        with counting_tokens() as encoded, tallying(_usage) as llm:
            yield Meter(encoded, llm)
    finally:
        _deadline.reset(deadline_token)


class MeteredLLM:
    """Wraps a :class:`FrozenLLM`; metering applies inside :func:`metering` blocks only."""

    def __init__(self, llm: FrozenLLM) -> None:
        self.llm = llm

    @property
    def name(self) -> str:
        """The wrapped model's name (cache keys do not change)."""
        return self.llm.name

    @property
    def context_window(self) -> int:
        """The wrapped model's window."""
        return self.llm.context_window

    def count_tokens(self, text: str) -> int:
        """Tokens in the wrapped model's vocabulary."""
        return self.llm.count_tokens(text)

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """The wrapped model's scores, within the deadline."""
        return self._call(lambda: self.llm.loglikelihood(requests))

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """The wrapped model's generations, within the deadline."""
        return self._call(lambda: self.llm.generate(prompts, **options))

    def _call(self, call: Callable[[], _R]) -> _R:
        deadline = _deadline.get()
        result = call() if deadline is None else _within(call, deadline)
        usages = _usage.get()
        if usages is not None:
            usages.append(result.usage)
        return result


def _within(call: Callable[[], _R], deadline: float) -> _R:
    """``call()`` in a daemon thread, or :class:`LLMError` once ``deadline`` (monotonic) passes."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise LLMError("the pipeline's LLM deadline had already passed")
    box: dict[str, object] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["result"] = call()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="personamem-llm", daemon=True).start()
    if not done.wait(remaining):
        raise LLMError(f"no answer within the pipeline's deadline ({remaining:.2f} s were left)")
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]  # type: ignore[return-value]
