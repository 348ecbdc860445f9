"""The fast CPU runtime for the frozen LLM: a CTranslate2 int8 copy of a local causal LM.

On this project's 2-core machines (AVX2, no int8 dot-product instructions) it decodes ~2.0-2.8x the
tokens per second of the transformers path and scores ~1.3-1.85x as fast (``bench/llm_scoring.py``).
Its int8 activations move a log-likelihood by ~0.2-0.3 nats per target token, and by a nat or two
with the other requests in the batch (``tests/llm/test_llm_ct2.py``): good for generating, not for
scores that are a measurement or a reward, which keep the float32
:class:`~personamem.llm.hf.TransformersLLM` (also the only runtime that takes gradients).

The copy is made once per model (:func:`personamem.llm.packaged.ct2_model_path`) and checked against
its recorded sha256 on every load, so a truncated or edited conversion is refused, not half-used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from personamem.llm.base import (
    Generations,
    Prompt,
    Sampling,
    SamplingOptions,
    Scores,
    Usage,
    cut_at_stop,
)
from personamem.llm.tokens import encode_pair, padded_batches, render_prompt, shared_choices
from personamem.settings import settings

if TYPE_CHECKING:
    import numpy as np

__all__ = ["CTranslate2LLM", "default_threads"]


def default_threads() -> int:
    """OpenMP threads per model: ``$PERSONAMEM_LLM_THREADS``, else half the cores (at least 1).

    With every core busy, a second process (the encoder, a web worker) makes OpenMP threads spin at
    barriers: on 2 cores, 2 threads under load measured ~10x slower than 1. Leaving half the cores
    free is safe; on an otherwise idle machine, set the variable to the core count.
    """
    threads = settings().llm_threads  # a bad value is a ConfigError naming the variable
    return threads if threads is not None else max(1, (os.cpu_count() or 2) // 2)


class CTranslate2LLM:
    """A CTranslate2 ``Generator`` behind the frozen-LLM protocol, tokenized by the model's own tokenizer.

    Prompts are rendered and tokenized exactly as :class:`~personamem.llm.hf.TransformersLLM` does
    (:mod:`personamem.llm.tokens`), so the two backends score the same token sequences.
    """

    def __init__(
        self,
        load: Callable[[], Any],
        tokenizer: Any,
        *,
        name: str,
        context_window: int,
        batch_tokens: int = 512,
        generate_rows: int = 32,
    ) -> None:
        self._load = load
        self.generator = load()
        self.tokenizer = tokenizer
        self._name = name
        self._context_window = context_window
        # measured on SmolLM2, 2 cores: scoring in 512-token batches ran 1.4-1.8x transformers, in 8192-token
        # batches 1.3x; decoding 32 rows at a time 2.6x transformers' 16-row batches, 16 rows 2.35x
        self._batch_tokens = batch_tokens
        self._generate_rows = generate_rows
        self._lock = threading.Lock()

    @classmethod
    def from_converted(cls, path: str | Path, *, threads: int | None = None) -> CTranslate2LLM:
        """Load a folder written by :func:`~personamem.llm.packaged.convert_to_ct2` (checksum verified)."""
        import ctranslate2
        from transformers import AutoTokenizer

        from personamem.llm.packaged import read_ct2_manifest

        path = Path(path)
        manifest = read_ct2_manifest(path, verify=True)
        options = {
            "device": "cpu",  # on a GPU, serve the model with vLLM (personamem[vllm] or llm_url)
            "compute_type": manifest["quantization"],
            "inter_threads": 1,
            "intra_threads": threads or default_threads(),
        }
        tokenizer = AutoTokenizer.from_pretrained(path / "tokenizer", local_files_only=True)
        return cls(
            partial(ctranslate2.Generator, str(path), **options),
            tokenizer,
            name=f"{manifest['source']}-ct2-{manifest['quantization']}",
            context_window=int(manifest["context_window"]),
        )

    @classmethod
    def local(
        cls, model: str, *, cache_dir: Path | None = None, threads: int | None = None
    ) -> CTranslate2LLM:
        """A packaged model by name or a local transformers folder, converted once into the cache."""
        from personamem.llm.packaged import ct2_model_path

        return cls.from_converted(ct2_model_path(model, cache_dir), threads=threads)

    @property
    def name(self) -> str:
        """The source model's name and the quantization (caches must not mix runtimes' outputs)."""
        return self._name

    @property
    def context_window(self) -> int:
        """The source model's maximum sequence length."""
        return self._context_window

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, prompt: Prompt) -> str:
        """The prompt as the model sees it: chat messages go through the chat template."""
        return render_prompt(self.tokenizer, prompt)

    def _tokens(self, ids: Sequence[int]) -> list[str]:
        return list(self.tokenizer.convert_ids_to_tokens(list(ids)))

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """Sum of the target tokens' log-probabilities given the prompt, per request.

        ``score_batch`` returns the log-probability of every token after the first; the last
        ``len(target)`` of them are the target's. One-token targets after one shared prompt (a
        multiple choice's labels, a yes/no) take one ``forward_batch`` of the prompt instead of a
        ``score_batch`` row each.
        """
        pairs = [encode_pair(self.tokenizer, self.render(p), t, self.context_window) for p, t in requests]
        token_logprobs: list[list[float]] = [[] for _ in pairs]
        shared = shared_choices(pairs)
        distributions = self._next_token_logprobs([pairs[group[0]][0] for group in shared])
        for group, logprobs in zip(shared, distributions, strict=True):
            for i in group:
                token_logprobs[i] = [float(logprobs[pairs[i][1][0]])]
        grouped = {i for group in shared for i in group}
        rest = [i for i in range(len(pairs)) if i not in grouped]
        if rest:
            with self._lock:
                results = self.generator.score_batch(
                    [self._tokens(pairs[i][0] + pairs[i][1]) for i in rest],
                    max_batch_size=self._batch_tokens,
                    batch_type="tokens",
                    max_input_length=0,  # encode_pair already refused anything over the window
                )
            for i, result in zip(rest, results, strict=True):
                kept = len(result.log_probs) - len(pairs[i][1])
                token_logprobs[i] = [float(v) for v in result.log_probs[kept:]]
        return Scores(
            logprobs=[float(sum(v)) for v in token_logprobs],
            token_logprobs=token_logprobs,
            usage=Usage(prompt_tokens=sum(len(c) + len(t) for c, t in pairs)),
        )

    def _next_token_logprobs(self, contexts: list[list[int]]) -> list[np.ndarray]:
        """The next-token log-probabilities after each context (``forward_batch``, last positions).

        ``forward_batch`` returns every position's distribution, rows × width × vocabulary floats, so a
        batch holds at most the token budget of padded positions (~100 MB for SmolLM2 at 512).
        """
        import numpy as np

        out: list[np.ndarray] = [np.empty(0)] * len(contexts)
        order = sorted(range(len(contexts)), key=lambda i: -len(contexts[i]))
        for batch in padded_batches(order, [len(c) for c in contexts], self._batch_tokens):
            with self._lock:
                logprobs = np.asarray(
                    self.generator.forward_batch([contexts[i] for i in batch], return_log_probs=True)
                )
            for row, i in enumerate(batch):
                out[i] = logprobs[row, len(contexts[i]) - 1].copy()  # not a view into the whole batch
        return out

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """``n`` completions per prompt, in batches of similar length; a seed makes sampling repeatable."""
        import ctranslate2

        sampling = Sampling(**options)
        n, max_tokens = sampling.n, sampling.max_tokens
        encoded = [self.tokenizer.encode(self.render(p), add_special_tokens=True) for p in prompts]
        decoding: dict[str, Any] = (
            {"sampling_topk": 1}
            if sampling.greedy
            else {
                "sampling_topk": 0,
                "sampling_topp": sampling.top_p,
                "sampling_temperature": sampling.temperature,
            }
        )
        texts: list[list[str]] = []
        completion_tokens = 0
        with self._lock:
            if sampling.seed is not None and not sampling.greedy:
                # CTranslate2 seeds a worker thread's sampler when the thread starts, so a seed only
                # takes effect in a fresh generator (~0.1 s to load SmolLM2's int8 weights)
                ctranslate2.set_random_seed(sampling.seed)
                self.generator = None  # free the old weights before loading the new copy
                self.generator = self._load()
            starts = [self._tokens(e) for e in encoded for _ in range(n)]  # n rows per prompt
            results = self.generator.generate_batch(
                starts,
                max_batch_size=self._generate_rows,
                max_length=max_tokens,
                include_prompt_in_result=False,
                **decoding,
            )
        for i in range(len(encoded)):
            group = []
            for result in results[i * n : (i + 1) * n]:
                ids = result.sequences_ids[0]
                completion_tokens += len(ids) + (len(ids) < max_tokens)  # a stop before the cap: + end token
                group.append(cut_at_stop(self.tokenizer.decode(ids, skip_special_tokens=True), sampling.stop))
            texts.append(group)
        return Generations(texts, Usage(sum(len(e) for e in encoded), completion_tokens))
