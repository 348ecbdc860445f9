"""The vLLM offline engine as a frozen LLM (GPU; ``pip install "personamem[vllm]"``).

Scoring asks vLLM for ``prompt_logprobs`` over prompt + target fed as token ids, so the target's
tokens are exactly those :func:`~personamem.llm.tokens.encode_pair` chose, as in the other backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from personamem.llm.base import Generations, Prompt, Sampling, SamplingOptions, Scores, Usage, cut_at_stop
from personamem.llm.tokens import encode_pair, render_prompt

__all__ = ["VLLMBackend"]


class VLLMBackend:
    """A model served in-process by ``vllm.LLM``; imported only when constructed."""

    def __init__(self, model: str, **engine_kwargs: Any) -> None:
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError('vLLM is required for this backend: pip install "personamem[vllm]"') from exc
        self._engine = LLM(model=model, **engine_kwargs)
        self.tokenizer = self._engine.get_tokenizer()
        self._name = model
        self._window = int(self._engine.llm_engine.model_config.max_model_len)

    @property
    def name(self) -> str:
        """The model path or name given to vLLM."""
        return self._name

    @property
    def context_window(self) -> int:
        """The engine's ``max_model_len``."""
        return self._window

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """Sum of target-token log-probabilities, from vLLM's prompt log-probs."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        pairs = [
            encode_pair(self.tokenizer, render_prompt(self.tokenizer, p), t, self._window)
            for p, t in requests
        ]
        params = SamplingParams(max_tokens=1, prompt_logprobs=0, temperature=0.0)
        outputs = self._engine.generate(
            [TokensPrompt(prompt_token_ids=c + t) for c, t in pairs], params, use_tqdm=False
        )
        token_logprobs = []
        for (context, target), out in zip(pairs, outputs, strict=True):
            ids = context + target
            # entry p holds log p(ids[p] | ids[:p]); entry 0 is None
            token_logprobs.append(
                [float(out.prompt_logprobs[p][ids[p]].logprob) for p in range(len(context), len(ids))]
            )
        return Scores(
            logprobs=[sum(v) for v in token_logprobs],
            token_logprobs=token_logprobs,
            usage=Usage(prompt_tokens=sum(len(c) + len(t) for c, t in pairs)),
        )

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """``n`` completions per prompt with vLLM's sampler."""
        from vllm import SamplingParams

        sampling = Sampling(**options)
        params = SamplingParams(
            n=sampling.n,
            max_tokens=sampling.max_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            seed=sampling.seed,
            stop=list(sampling.stop) or None,
        )
        outputs = self._engine.generate(
            [render_prompt(self.tokenizer, p) for p in prompts], params, use_tqdm=False
        )
        texts = [[cut_at_stop(c.text, sampling.stop) for c in out.outputs] for out in outputs]
        usage = Usage(
            prompt_tokens=sum(len(out.prompt_token_ids or []) for out in outputs),
            completion_tokens=sum(len(c.token_ids) for out in outputs for c in out.outputs),
        )
        return Generations(texts, usage)
