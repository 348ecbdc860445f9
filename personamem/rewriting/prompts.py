"""Chat prompts for the three kinds of call: select statements, rewrite, or both at once.

Every prompt asks for a single JSON object, because the selection must be read back as ids. Few-shot
demonstrations are earlier user/assistant exchanges in the same chat, the assistant side being the gold
answer as JSON, so the model sees the exact output shape it should produce.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Literal

from personamem.llm.base import Message
from personamem.rewriting.shots import Demonstration
from personamem.rewriting.turn import Turn

__all__ = ["DemoFacts", "rewrite_prompt", "select_and_rewrite_prompt", "select_prompt"]

_REWRITE_SYSTEM = (
    "You help a search engine understand a user who is chatting with it. Turn the user's latest message "
    "into one search query that makes sense on its own: replace words such as 'it', 'there' or 'that' "
    "with what they stand for in the earlier messages. If facts about the user are listed, work in the "
    "ones that change what a good result would be and leave out the others. Reply with JSON only."
)
_SELECT_SYSTEM = (
    "You help a search engine personalize its results. Given facts a user has shared about themselves "
    "and their conversation so far, decide which facts matter for their latest message. Often none do. "
    "Reply with JSON only."
)
_SAR_SYSTEM = (
    "You help a search engine personalize its results for a user who is chatting with it. First decide "
    "which of the listed facts about the user matter for their latest message (often none do). Then turn "
    "the latest message into one search query that makes sense on its own, resolving words such as 'it' "
    "or 'there' from the earlier messages and working in only the facts you chose. Reply with JSON only."
)
_REWRITE_FORMAT = 'Reply with a JSON object whose "rewrite" key holds the query as a string.'
_SELECT_FORMAT = (
    'Reply with a JSON object whose "selected" key lists the numbers of the facts that matter '
    "(an empty list if none do)."
)
_SAR_FORMAT = (
    'Reply with a JSON object with the keys "selected" (the numbers of the facts that matter, an empty '
    'list if none do) and "rewrite" (the query as a string)'
)
_RESPONSE_FORMAT = ', and "response" (a short answer to the query in one or two sentences)'

DemoFacts = Literal["none", "all", "gold"]


def select_prompt(turn: Turn, statements: Mapping[str, str], shots: Sequence[Demonstration]) -> list[Message]:
    """STR's first call: which statements are relevant to the turn."""
    messages: list[Message] = [{"role": "system", "content": _SELECT_SYSTEM}]
    for demo in shots:
        messages += _exchange(
            _task(demo.utterance, demo.context, demo.statements, _SELECT_FORMAT),
            {"selected": _json_ids(demo.selected)},
        )
    messages.append(_user(_task(turn.text, turn.context, statements, _SELECT_FORMAT)))
    return messages


def rewrite_prompt(
    turn: Turn,
    statements: Mapping[str, str] | None,
    shots: Sequence[Demonstration],
    *,
    demo_facts: DemoFacts,
) -> list[Message]:
    """Rewrite the turn with the given statements (``None``: the conversation only).

    Args:
        turn: the turn to rewrite.
        statements: the statements to use: all of them ("all"), the selected ones (STR's second
            call, possibly none), or ``None`` to list no facts at all ("none").
        shots: demonstrations, shown before the turn.
        demo_facts: which of a demonstration's statements it lists, mirroring the strategy: none, all,
            or only its gold relevant ones (as STR's selection step would ideally pass on).
    """
    messages: list[Message] = [{"role": "system", "content": _REWRITE_SYSTEM}]
    for demo in shots:
        facts = {
            "none": None,
            "all": demo.statements,
            "gold": {key: demo.statements[key] for key in demo.selected},
        }[demo_facts]
        messages += _exchange(
            _task(demo.utterance, demo.context, facts, _REWRITE_FORMAT), {"rewrite": demo.rewrite}
        )
    messages.append(_user(_task(turn.text, turn.context, statements, _REWRITE_FORMAT)))
    return messages


def select_and_rewrite_prompt(
    turn: Turn,
    statements: Mapping[str, str],
    shots: Sequence[Demonstration],
    *,
    with_response: bool = False,
) -> list[Message]:
    """SAR's single call: the selected statements and the rewrite (and optionally a short response).

    A demonstration's response, when asked for, is cut to its first sentence, so shots stay short.
    """
    form = _SAR_FORMAT + (_RESPONSE_FORMAT if with_response else "") + "."
    messages: list[Message] = [{"role": "system", "content": _SAR_SYSTEM}]
    for demo in shots:
        answer: dict[str, object] = {"selected": _json_ids(demo.selected), "rewrite": demo.rewrite}
        if with_response:
            answer["response"] = _first_sentence(demo.response or "")
        messages += _exchange(_task(demo.utterance, demo.context, demo.statements, form), answer)
    messages.append(_user(_task(turn.text, turn.context, statements, form)))
    return messages


def _task(utterance: str, context: Sequence[str], statements: Mapping[str, str] | None, form: str) -> str:
    """The user-side text: facts (unless ``None``), earlier messages, the latest message, the format."""
    parts = []
    if statements is not None:
        facts = "\n".join(f"[{key}] {text}" for key, text in statements.items()) or "(none)"
        parts.append(f"Facts about the user:\n{facts}")
    earlier = "\n".join(f"- {text}" for text in context) or "(none)"
    parts += [f"Earlier messages from the user:\n{earlier}", f"Latest message: {utterance}", form]
    return "\n\n".join(parts)


def _exchange(task: str, answer: Mapping[str, object]) -> list[Message]:
    return [_user(task), {"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)}]


def _user(content: str) -> Message:
    return {"role": "user", "content": content}


def _json_ids(keys: Sequence[str]) -> list[int | str]:
    """Ids as JSON numbers where they are numeric, as the prompt calls them numbers."""
    return [int(key) if key.isdigit() else key for key in keys]


def _first_sentence(text: str) -> str:
    head, dot, _ = text.strip().partition(". ")
    return head + dot.strip()
