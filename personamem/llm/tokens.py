"""Prompt rendering and (prompt, target) tokenization shared by the backends that hold a tokenizer."""

from __future__ import annotations

from typing import Any

from personamem.llm.base import Prompt

__all__ = ["encode_pair", "render_prompt"]


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """The prompt as the model sees it: chat messages go through the model's chat template."""
    if isinstance(prompt, str):
        return prompt
    return str(
        tokenizer.apply_chat_template([dict(m) for m in prompt], add_generation_prompt=True, tokenize=False)
    )


def encode_pair(tokenizer: Any, text: str, target: str, context_window: int) -> tuple[list[int], list[int]]:
    """Token ids of a rendered prompt and of its target.

    The pair is tokenized jointly where the prompt's tokens survive as a prefix (as a server scoring
    the whole string would), so the target's first token is the one the model would really produce;
    a merge across the boundary falls back to tokenizing the target alone.
    """
    context = tokenizer.encode(text, add_special_tokens=True)
    whole = tokenizer.encode(text + target, add_special_tokens=True)
    if whole[: len(context)] == context and len(whole) > len(context):
        continuation = whole[len(context) :]
    else:
        continuation = tokenizer.encode(target, add_special_tokens=False)
    if not continuation:
        raise ValueError(f"target {target!r} has no tokens to score")
    if not context:  # the first target token needs something to be predicted from
        context = [tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id]
    if len(context) + len(continuation) > context_window:
        raise ValueError(
            f"prompt + target take {len(context) + len(continuation)} tokens, over the "
            f"{context_window}-token window; fit the profile with fit_to_budget first"
        )
    return context, continuation
