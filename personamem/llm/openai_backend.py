"""A frozen LLM behind an OpenAI-compatible HTTP server (vLLM, llama.cpp, TGI, hosted APIs).

Scoring needs the legacy completions endpoint with ``echo=True`` and ``logprobs``: the server returns
the log-probability of every token of prompt + target, and ``text_offset`` says where each token
starts, so the target's tokens are the ones at or after the prompt's end. Chat-only APIs cannot score;
they can still generate.

Remote calls fail in ways a local model does not, so every request goes through one retry loop of our
own (the openai client's retries are off, so the attempt count is exact): timeouts, connection errors,
429 and 5xx are retried with exponential backoff and jitter, and so is a status 200 whose body is not
the API's answer (not JSON, an HTML page, JSON of another shape: a broken proxy or a captive portal);
other 4xx fail at once. Whatever goes wrong ends as :class:`~personamem.errors.LLMError`.

One call (``loglikelihood`` or ``generate``) has a deadline, 30 s by default, that bounds all of its
attempts and backoff: a stalled server holds an interactive caller for seconds, not the minutes that
per-attempt timeouts times retries add up to.
"""

from __future__ import annotations

import bisect
import functools
import os
import random
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, Unpack

from personamem.llm.base import (
    Generations,
    LLMError,
    Prompt,
    Sampling,
    SamplingOptions,
    Scores,
    Usage,
    cut_at_stop,
)
from personamem.llm.tokens import render_prompt

__all__ = ["OpenAICompatibleLLM"]

_T = TypeVar("_T")
_R = TypeVar("_R")

NO_PROMPT_LOGPROBS = (
    "{url} returned no log-probabilities for the prompt's tokens (completions with echo=True and "
    "logprobs), so it cannot score targets; serve the model with a server that can, such as vLLM's "
    "OpenAI-compatible server"
)


class OpenAICompatibleLLM:
    """A model served over the OpenAI API, used as a frozen judge and generator.

    Requests of one call run concurrently on a small thread pool; results keep the input order. A
    call that fails cancels the requests not yet sent, so a dead server costs one request's retries,
    not the whole batch's.

    Attributes:
        base_url: the server, e.g. ``http://127.0.0.1:8000/v1``.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 15.0,
        deadline_s: float | None = 30.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        context_window: int = 8192,
        tokenizer: Any = None,
        concurrency: int = 8,
    ) -> None:
        """Connect lazily (no request is made here).

        Args:
            base_url: the API root, ending in ``/v1`` for most servers.
            model: the model name the server knows; also this backend's :attr:`name`.
            api_key: defaults to ``$OPENAI_API_KEY``, else ``"EMPTY"`` (local servers ignore it).
            timeout: seconds for each phase of one attempt (connecting, each read of the answer);
                15 s covers a long generation's first token from a loaded server, and leaves a
                stalled attempt time to be retried within the deadline.
            deadline_s: seconds for one whole call, all requests, attempts and backoff included;
                past it no attempt starts, the one in flight is cut off, and the call raises
                :class:`LLMError`. None: no deadline (a batch job that would rather wait).
            max_retries: further attempts after a transient failure (0: one attempt only).
            backoff: seconds before the first retry; doubles each retry, times a jitter in [0.5, 1]
                so that concurrent requests do not retry in lock step.
            context_window: the served model's window; the server cannot be asked for it portably.
            tokenizer: the served model's tokenizer (a transformers tokenizer, or anything with
                ``apply_chat_template`` and ``encode``); renders chat prompts for scoring, since
                the completions endpoint takes only strings, and counts tokens.
            concurrency: most requests in flight at once per call.

        Raises:
            ImportError: the ``openai`` package is not installed.
        """
        try:
            import openai
        except ImportError as e:
            raise ImportError('openai is required for this backend: pip install "personamem[openai]"') from e
        self.base_url = base_url
        self._openai = openai
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=timeout,
            max_retries=0,
        )
        self._model = model
        self._timeout = timeout
        self._deadline_s = deadline_s
        self._max_retries = max_retries
        self._backoff = backoff
        self._context_window = context_window
        self._tokenizer = tokenizer
        self._concurrency = concurrency
        self._zero_max_tokens = True  # until the server says it needs at least one generated token

    @property
    def name(self) -> str:
        """The served model's name."""
        return self._model

    @property
    def context_window(self) -> int:
        """As given to the constructor."""
        return self._context_window

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def __enter__(self) -> OpenAICompatibleLLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens, by the tokenizer given to the constructor.

        Raises:
            LLMError: no tokenizer was given (servers have no portable tokenize endpoint).
        """
        return len(self._need_tokenizer("count tokens").encode(text, add_special_tokens=False))

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """Sum of the target tokens' log-probabilities given the prompt, per request.

        The server tokenizes prompt + target as one string. A token that straddles the boundary (a
        merge of the prompt's last characters with the target's first) counts as the target's, so
        every target gets its full probability mass; :func:`~personamem.llm.tokens.encode_pair`
        applies the same rule for the local backends, so they agree.

        Raises:
            ValueError: a target is empty.
            LLMError: the server failed, or cannot return prompt log-probabilities, or a prompt is a
                chat and no tokenizer was given to render it.
        """
        rendered = [(self._render(prompt), target) for prompt, target in requests]  # fail before sending
        if any(not target for _, target in rendered):
            raise ValueError("target '' has no tokens to score")
        score = functools.partial(self._score, deadline=self._deadline())
        results = self._map(_shape_checked(score, self.base_url), rendered)
        return Scores(
            logprobs=[float(sum(values)) for values, _ in results],
            token_logprobs=[values for values, _ in results],
            usage=sum((usage for _, usage in results), Usage()),
        )

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """``n`` completions per prompt: strings via the completions endpoint, chats via chat completions.

        Stop strings are sent and also applied to the answers, as some servers ignore them.

        Raises:
            ValueError: ``n`` or ``max_tokens`` is below 1.
            LLMError: the server failed or returned a different number of completions than ``n``.
        """
        sampling = Sampling(**options)
        n, stop = sampling.n, sampling.stop
        request: dict[str, Any] = {
            "model": self._model,
            "n": n,
            "max_tokens": sampling.max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
        }
        if sampling.seed is not None:
            request["seed"] = sampling.seed
        if stop:
            request["stop"] = list(stop)
        deadline = self._deadline()

        def sample(prompt: Prompt) -> tuple[list[str], Usage]:
            if isinstance(prompt, str):
                completion = self._call(self._client.completions.create, deadline, prompt=prompt, **request)
                texts = [c.text for c in sorted(completion.choices, key=lambda c: c.index)]
                usage = completion.usage
            else:
                messages = [dict(m) for m in prompt]
                chat = self._call(
                    self._client.chat.completions.create, deadline, messages=messages, **request
                )
                texts = [c.message.content or "" for c in sorted(chat.choices, key=lambda c: c.index)]
                usage = chat.usage
            if len(texts) != n:
                raise LLMError(f"{self.base_url} returned {len(texts)} completions where {n} were asked for")
            return [cut_at_stop(t, stop) for t in texts], _usage(usage)

        results = self._map(_shape_checked(sample, self.base_url), prompts)
        return Generations([texts for texts, _ in results], sum((usage for _, usage in results), Usage()))

    # -- internals -------------------------------------------------------------------------------

    def _deadline(self) -> float | None:
        """When a call starting now must be done (``time.monotonic`` seconds), or None."""
        return None if self._deadline_s is None else time.monotonic() + self._deadline_s

    def _score(self, request: tuple[str, str], deadline: float | None) -> tuple[list[float], Usage]:
        """One target's token log-probabilities, picked out of the echoed prompt by ``text_offset``."""
        context, target = request
        text = context + target
        answer = self._echo(text, deadline)
        logprobs = answer.choices[0].logprobs if answer.choices else None
        if logprobs is None or not logprobs.token_logprobs or not logprobs.text_offset:
            raise LLMError(NO_PROMPT_LOGPROBS.format(url=self.base_url))
        offsets = logprobs.text_offset
        # the last token starting at or before the prompt's end is the target's first (it starts the
        # target or straddles the boundary); tokens starting at the text's end were generated
        start = max(bisect.bisect_right(offsets, len(context)) - 1, 0)
        end = bisect.bisect_left(offsets, len(text))
        values = logprobs.token_logprobs[start:end]
        if not values:
            raise LLMError(NO_PROMPT_LOGPROBS.format(url=self.base_url))
        if any(v is None for v in values):  # the first token of the text has nothing to predict it
            raise LLMError(
                f"{self.base_url} gave the target's first token no log-probability; is the prompt empty?"
            )
        usage = _usage(answer.usage) if answer.usage else Usage(prompt_tokens=end)
        return [float(v) for v in values], usage

    def _echo(self, text: str, deadline: float | None) -> Any:
        """Score ``text`` generating nothing where the server allows ``max_tokens=0``, else one token."""
        request: dict[str, Any] = {
            "model": self._model,
            "prompt": text,
            "echo": True,
            "logprobs": 1,
            "temperature": 0.0,
        }
        if self._zero_max_tokens:
            try:
                return self._call(self._client.completions.create, deadline, max_tokens=0, **request)
            except LLMError as e:
                cause = e.__cause__
                if not (
                    isinstance(cause, self._openai.APIStatusError)
                    and cause.status_code in (400, 422)
                    and "max_tokens" in str(cause)
                ):
                    raise
            self._zero_max_tokens = False  # remembered: later requests go straight to one token
        return self._call(self._client.completions.create, deadline, max_tokens=1, **request)

    def _call(self, create: Callable[..., _T], deadline: float | None, **kwargs: Any) -> _T:
        """``create(**kwargs)`` by ``deadline``, retrying timeouts, connection errors, 429 and 5xx."""
        attempts = self._max_retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            if attempt:
                pause = self._backoff * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)
                time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
            timeout = self._timeout
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LLMError(
                        f"{self.base_url} gave no usable answer within the call's {self._deadline_s:g} s "
                        f"deadline ({attempt} attempt(s); the last error: {last}); raise deadline_s= "
                        "for slow servers"
                    ) from last
                timeout = min(timeout, left)
            try:
                answer = create(**kwargs, timeout=timeout)
            except self._openai.APIStatusError as e:
                if e.status_code != 429 and e.status_code < 500:
                    raise LLMError(f"{self.base_url} rejected the request: {e}") from e
                last = e
                continue
            except self._openai.APIConnectionError as e:  # timeouts included
                last = e
                continue
            except self._openai.OpenAIError as e:  # e.g. an answer that is not the API's shape
                raise LLMError(f"{self.base_url} gave an unusable answer: {e}") from e
            except ValueError as e:  # status 200 with a body that is not JSON: a proxy's or portal's page
                last = e
                continue
            if isinstance(getattr(answer, "choices", None), list):
                return answer
            # status 200 with JSON of another shape, or a page the client returned as text
            last = ValueError(f"an answer without a list of choices: {str(answer)[:80]!r}")
        raise LLMError(f"{self.base_url} failed {attempts} attempt(s); the last error: {last}") from last

    def _map(self, fn: Callable[[_T], _R], items: Iterable[_T]) -> list[_R]:
        """``[fn(x) for x in items]`` on the thread pool, cancelling what is left at the first error."""
        items = list(items)
        if len(items) <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self._concurrency, len(items))) as pool:
            futures = [pool.submit(fn, x) for x in items]
            try:
                return [f.result() for f in futures]
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise

    def _render(self, prompt: Prompt) -> str:
        """The prompt as one string, rendered exactly as the local backend renders it."""
        if isinstance(prompt, str):
            return prompt
        return render_prompt(self._need_tokenizer("score chat prompts"), prompt)

    def _need_tokenizer(self, task: str) -> Any:
        if self._tokenizer is None:
            raise LLMError(f"pass the served model's tokenizer to OpenAICompatibleLLM to {task}")
        return self._tokenizer


def _shape_checked(read: Callable[[_T], _R], base_url: str) -> Callable[[_T], _R]:
    """``read``, with an answer of the wrong shape (a choice without text...) as :class:`LLMError`."""

    def checked(item: _T) -> _R:
        try:
            return read(item)
        except (AttributeError, TypeError, KeyError, IndexError) as e:
            raise LLMError(f"{base_url} gave an answer of the wrong shape ({type(e).__name__}: {e})") from e

    return checked


def _usage(usage: Any) -> Usage:
    """The API's usage object as ours; absent means unknown, counted as nothing."""
    if usage is None:
        return Usage()
    return Usage(prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0)
