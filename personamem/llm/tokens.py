"""Prompt rendering and (prompt, target) tokenization shared by the backends that hold a tokenizer."""

from __future__ import annotations

from typing import Any

from personamem.llm.base import Prompt

__all__ = ["encode_pair", "padded_batches", "render_prompt", "shared_choices"]


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """The prompt as the model sees it: chat messages go through the model's chat template."""
    if isinstance(prompt, str):
        return prompt
    return str(
        tokenizer.apply_chat_template([dict(m) for m in prompt], add_generation_prompt=True, tokenize=False)
    )


def encode_pair(tokenizer: Any, text: str, target: str, context_window: int) -> tuple[list[int], list[int]]:
    """Token ids of a rendered prompt and of its target, from one tokenization of ``text + target``.

    A token that ends inside the prompt is context; every later token is target, including one that
    straddles the boundary (``"...is P"`` + ``"aris"`` scores the token ``" Paris"``). This is what a
    server scoring the echoed string does, so all backends agree. Needs a fast tokenizer (offsets).
    """
    encoded = tokenizer(text + target, add_special_tokens=True, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    split = sum(1 for _, end in offsets if end <= len(text))
    context, continuation = list(ids[:split]), list(ids[split:])
    if not target or not continuation:
        raise ValueError(f"target {target!r} has no tokens to score")
    if not context:  # the first target token needs something to be predicted from
        context = [tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id]
    if len(context) + len(continuation) > context_window:
        raise ValueError(
            f"prompt + target take {len(context) + len(continuation)} tokens, over the "
            f"{context_window}-token window; fit the profile with fit_to_budget first"
        )
    return context, continuation


def shared_choices(pairs: list[tuple[list[int], list[int]]]) -> list[list[int]]:
    """Indices of the one-token targets that follow one shared context, in groups of two or more.

    A multiple choice's labels or a yes/no after one prompt need a single forward pass of the prompt
    (the next-token distribution holds every label), where scoring each pair alone runs it per label.
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for i, (context, target) in enumerate(pairs):
        if len(target) == 1:
            groups.setdefault(tuple(context), []).append(i)
    return [group for group in groups.values() if len(group) > 1]


def padded_batches(order: list[int], lengths: list[int], budget: int) -> list[list[int]]:
    """Consecutive runs of ``order`` (longest first) whose padded size stays within ``budget`` tokens.

    The first of a run is its widest, so a run of n rows costs n times its first one's length; a row
    longer than the budget runs alone.
    """
    batches: list[list[int]] = []
    for i in order:
        if batches and lengths[batches[-1][0]] * (len(batches[-1]) + 1) <= budget:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches
