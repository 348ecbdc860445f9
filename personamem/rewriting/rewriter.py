"""Rewrite conversational turns into self-contained, personalized queries with a frozen LLM.

All turns go to the backend in one ``generate`` call per step, because backends batch. A step's
answer that cannot be used (the call failed, or no usable field could be parsed) never raises: the turn
keeps its raw utterance and/or an empty selection, is flagged ``fell_back`` and a
:class:`~personamem.errors.RewriteFallbackWarning` says why, so one bad answer never loses a run.
(:func:`rewrite_with_statements` can raise a failed call instead, for callers that cache results and
must not keep a fallback as if it were the model's answer.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from personamem.errors import RewriteFallbackWarning, warn_fallback
from personamem.llm.base import FrozenLLM, LLMError, Message
from personamem.rewriting.config import RewriteConfig
from personamem.rewriting.parse import ParsedAnswer, parse_answer
from personamem.rewriting.prompts import DemoFacts, rewrite_prompt, select_and_rewrite_prompt, select_prompt
from personamem.rewriting.shots import Demonstration, pick_shots
from personamem.rewriting.turn import Turn

__all__ = ["Rewrite", "rewrite_turns", "rewrite_with_statements"]

_SNIPPET = 80  # characters of a bad answer quoted in a warning
# which statements a rewrite demonstration lists, mirroring what the strategy passes to the rewrite step
_DEMO_FACTS: dict[str, DemoFacts] = {"str": "gold", "all": "all", "none": "none"}


@dataclass(frozen=True)
class Rewrite:
    """The outcome for one turn.

    Attributes:
        turn_id: the turn's :attr:`Turn.id`.
        rewrite: the self-contained query (the raw utterance when the model's rewrite was unusable).
        selected: statement ids used: the model's selection for STR and SAR, every id for "all",
            none for "none".
        response: the model's short answer, when asked for (SAR with ``with_response``) and given.
        fell_back: some part of the answer was unusable and replaced by its fallback.
    """

    turn_id: str
    rewrite: str
    selected: tuple[str, ...]
    response: str | None = None
    fell_back: bool = False


def rewrite_turns(
    llm: FrozenLLM,
    turns: Sequence[Turn],
    statements_by_user: Mapping[str, Mapping[str, str]],
    config: RewriteConfig,
    *,
    seed: int,
    examples: Sequence[Demonstration] = (),
) -> list[Rewrite]:
    """Rewrite every turn with the configured strategy.

    Args:
        llm: the generator; called once per step with all turns (twice in all for "str").
        turns: the turns, each with its earlier utterances as ``context``.
        statements_by_user: each turn user's PTKB, statement id -> text.
        config: strategy, shots and sampling.
        seed: the sampling seed and the seed that picks the shots.
        examples: demonstrations to draw ``config.shots`` from (never from the turn's own topic).

    Returns:
        One :class:`Rewrite` per turn, in order.

    Raises:
        ValueError: a turn's user has no entry in ``statements_by_user``, or there are too few
            demonstrations from other topics for ``config.shots``.
    """
    missing = sorted({t.user_id for t in turns} - set(statements_by_user))
    if missing:
        raise ValueError(f"no PTKB in statements_by_user for users {missing}")
    ptkbs = [statements_by_user[t.user_id] for t in turns]
    return rewrite_with_statements(llm, turns, ptkbs, config, seed=seed, examples=examples)


def rewrite_with_statements(
    llm: FrozenLLM,
    turns: Sequence[Turn],
    statements: Sequence[Mapping[str, str]],
    config: RewriteConfig,
    *,
    seed: int,
    examples: Sequence[Demonstration] = (),
    raise_llm_errors: bool = False,
) -> list[Rewrite]:
    """:func:`rewrite_turns` with each turn's own statements (statement id -> text), aligned with ``turns``.

    For callers that show different statements per turn (e.g. a share of a user's statements that fits
    the prompt). With ``raise_llm_errors`` a failed ``generate`` call raises :class:`LLMError` instead
    of falling back, so a caller that caches rewrites can leave the failure uncached; unusable answers
    still fall back with a warning either way.

    Raises:
        LLMError: only with ``raise_llm_errors``, when a call fails (nothing is returned for the batch).
        ValueError: ``statements`` does not line up with ``turns``, or too few demonstrations.
    """
    if len(statements) != len(turns):
        raise ValueError(f"{len(statements)} statement sets for {len(turns)} turns")
    ptkbs = list(statements)
    shots = [pick_shots(examples, t, config.shots, seed) for t in turns]

    def generate(prompts: list[list[Message]]) -> list[str | None]:
        return _generate(llm, prompts, config, seed, raise_llm_errors=raise_llm_errors)

    out: list[Rewrite] = []
    if config.strategy == "sar":
        prompts = [
            select_and_rewrite_prompt(t, p, s, with_response=config.with_response)
            for t, p, s in zip(turns, ptkbs, shots, strict=True)
        ]
        for turn, ptkb, text in zip(turns, ptkbs, generate(prompts), strict=True):
            answer, fell_back = _read(turn, text, ptkb, need_selection=True, need_rewrite=True)
            response = answer.response if config.with_response else None
            out.append(
                Rewrite(turn.id, answer.rewrite or turn.text, answer.selected or (), response, fell_back)
            )
        return out
    selections: list[tuple[str, ...]] = []
    selection_fell_back: list[bool] = []
    if config.strategy == "str":
        prompts = [select_prompt(t, p, s) for t, p, s in zip(turns, ptkbs, shots, strict=True)]
        for turn, ptkb, text in zip(turns, ptkbs, generate(prompts), strict=True):
            answer, fell_back = _read(turn, text, ptkb, need_selection=True, need_rewrite=False)
            selections.append(answer.selected or ())
            selection_fell_back.append(fell_back)
    else:
        selections = [tuple(ptkb) if config.strategy == "all" else () for ptkb in ptkbs]
        selection_fell_back = [False] * len(turns)
    facts: list[Mapping[str, str] | None] = [
        None if config.strategy == "none" else {key: ptkb[key] for key in selected}
        for ptkb, selected in zip(ptkbs, selections, strict=True)
    ]
    prompts = [
        rewrite_prompt(t, f, s, demo_facts=_DEMO_FACTS[config.strategy])
        for t, f, s in zip(turns, facts, shots, strict=True)
    ]
    texts = generate(prompts)
    for turn, ptkb, text, selected, earlier in zip(
        turns, ptkbs, texts, selections, selection_fell_back, strict=True
    ):
        answer, fell_back = _read(turn, text, ptkb, need_selection=False, need_rewrite=True)
        out.append(Rewrite(turn.id, answer.rewrite or turn.text, selected, None, fell_back or earlier))
    return out


def _generate(
    llm: FrozenLLM,
    prompts: list[list[Message]],
    config: RewriteConfig,
    seed: int,
    *,
    raise_llm_errors: bool,
) -> list[str | None]:
    """One completion per prompt, or ``None`` for every prompt when the backend fails (with a warning)."""
    if not prompts:
        return []
    try:
        generations = llm.generate(
            prompts, max_tokens=config.max_tokens, temperature=config.temperature, seed=seed
        )
    except LLMError as exc:
        if raise_llm_errors:
            raise
        warn_fallback(
            f"the LLM failed on a batch of {len(prompts)} turns ({exc}); for this step each turn falls "
            "back to its raw utterance as the rewrite and/or an empty selection",
            RewriteFallbackWarning,
            stacklevel=4,
        )
        return [None] * len(prompts)
    return [group[0] for group in generations]


def _read(
    turn: Turn, text: str | None, ptkb: Mapping[str, str], *, need_selection: bool, need_rewrite: bool
) -> tuple[ParsedAnswer, bool]:
    """Parse one answer; True alongside when a needed field is unusable (warned, unless the call failed).

    A missing field stays ``None`` in the result; callers substitute the fallback.
    """
    if text is None:  # the whole call failed, and _generate warned once for the batch
        return ParsedAnswer(), True
    parsed = parse_answer(text, ptkb)
    fallbacks = {
        "selection": "an empty selection" if need_selection and parsed.selected is None else "",
        "rewrite": "the raw utterance" if need_rewrite and parsed.rewrite is None else "",
    }
    unusable = {field: fallback for field, fallback in fallbacks.items() if fallback}
    if unusable:
        warn_fallback(
            f"turn {turn.id}: no usable {' or '.join(unusable)} in the answer {text[:_SNIPPET]!r}; "
            f"using {' and '.join(unusable.values())}",
            RewriteFallbackWarning,
            stacklevel=3,
        )
    return parsed, bool(unusable)
