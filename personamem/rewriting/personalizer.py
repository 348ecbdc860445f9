"""Query rewriting as a query personalizer: search with the query rewritten from the user's knowledge.

For (user, query), the user's ``knowledge`` records are their personal statements. The frozen LLM
rewrites the query with them under one strategy ("all", "str" or "sar"; zero-shot, with the prompts
and the lenient parsing that evaluation on iKAT uses), and dense search runs with the rewrite's vector.
A user without knowledge records gets the raw query, and the LLM is not called.

**No conversation.** ``personalize(user_id, query)`` gets no earlier utterances, so the query alone is
the turn (its context is empty): the rewrite can work in personal facts but has nothing earlier to
resolve "it" or "there" against. Callers that hold the conversation can fold it into the query, or
call :func:`~personamem.rewriting.rewrite_turns` with :class:`~personamem.rewriting.Turn` objects.

**What the model sees.** Statements are listed in the user's record order and numbered 1..n, not
named by record id: ids are usually 32-digit content hashes that a small model cannot copy back, and
the prompts ask for numbers. The model's selection is mapped back to record ids. When the statements
would not fit the LLM's context window beside the rest of the prompt and the answer, the ones most
similar to the query (by the store's encoder) are kept.

**Cache and fallbacks.** Rewrites are cached durably per user (:meth:`Store.derived_many`, namespace
``"rewrite"``), keyed by everything that determines them: the query, the model's name, the strategy,
seed, temperature and token limit, :data:`PROMPT_VERSION`, and the record ids and texts shown; a
changed or new knowledge record therefore asks again, and ``forget`` erases the cache with the user.
A failing LLM (:class:`~personamem.errors.LLMError`) degrades to the raw query with a
:class:`~personamem.errors.RewriteFallbackWarning` and is not cached, so a later call tries again. An
unusable answer also degrades to the raw query with that warning, but is cached (the same inputs give
the same answer), and the warning is repeated on every cache hit. Nothing here raises on LLM trouble.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal, TypeAlias

import numpy as np

from personamem.errors import RewriteFallbackWarning, warn_fallback
from personamem.llm.base import FrozenLLM, Message
from personamem.llm.budget import fit_to_budget
from personamem.personalize.pbr import cached_llm_outputs
from personamem.records import RecordKind
from personamem.rewriting.config import RewriteConfig
from personamem.rewriting.prompts import rewrite_prompt, select_and_rewrite_prompt, select_prompt
from personamem.rewriting.rewriter import rewrite_with_statements
from personamem.rewriting.turn import Turn
from personamem.store import Store
from personamem.store.read import NOW, Read

__all__ = ["NAMESPACE", "PERSONAL_STRATEGIES", "PROMPT_VERSION", "PersonalStrategy", "RewritePersonalizer"]

PersonalStrategy: TypeAlias = Literal["all", "str", "sar"]
PERSONAL_STRATEGIES: tuple[PersonalStrategy, ...] = ("all", "str", "sar")
PROMPT_VERSION = "1"  # part of the cache key: changing a prompt or the parsing must not reuse old rewrites
NAMESPACE = "rewrite"
_TEMPLATE_TOKENS = 64  # room for the chat template's special tokens around the messages
_ID_CHARS = 60  # characters of a query quoted as the turn's id in warnings


@dataclass
class _Knowledge:
    """One user's knowledge statements at one revision of their records."""

    ids: list[str]
    texts: list[str]
    tokens: int  # of all statements as the prompt lists them
    vectors: np.ndarray | None = field(default=None, repr=False)  # encoded when first needed


@dataclass(frozen=True)
class _Ask:
    """One (user, query) that needs the LLM, with the statements shown as record id -> text."""

    user_id: str
    query: str
    shown: dict[str, str]


class RewritePersonalizer:
    """A :class:`~personamem.personalize.QueryPersonalizer` that searches with a personalized rewrite.

    Also :class:`~personamem.retrieval.base.Preparable`: :meth:`prepare` rewrites many queries with
    batched LLM calls and fills the cache :meth:`personalize` reads.

    Args:
        store: the users' knowledge records, the encoder and the cache.
        llm: the frozen LLM that rewrites.
        strategy: ``"all"``: rewrite with every statement; ``"str"``: one call selects the relevant
            statements, a second rewrites with those; ``"sar"``: one call does both.
        seed: sampling seed, part of the cache key.
        temperature: sampling temperature; 0 (greedy) by default, so a query's rewrite does not
            depend on the seed.
        max_tokens: most tokens generated per answer.

    Raises:
        ValueError: an unknown strategy, a negative temperature or ``max_tokens`` below 1.
    """

    def __init__(
        self,
        store: Store,
        llm: FrozenLLM,
        strategy: PersonalStrategy = "sar",
        *,
        seed: int = 0,
        temperature: float = 0.0,
        max_tokens: int = 128,
    ) -> None:
        if strategy not in PERSONAL_STRATEGIES:
            raise ValueError(f"unknown rewriting strategy {strategy!r}; choose from {PERSONAL_STRATEGIES}")
        if temperature < 0 or max_tokens < 1:
            raise ValueError(f"need temperature >= 0 and max_tokens >= 1, got {temperature}, {max_tokens}")
        self.store = store
        self.llm = llm
        self.strategy = strategy
        self.seed = seed
        self.config = RewriteConfig(strategy=strategy, temperature=temperature, max_tokens=max_tokens)
        self._knowledge = store.user_cache(self._load_knowledge)

    def personalize(self, user_id: str, query: str, read: Read = NOW) -> np.ndarray:
        """The rewritten query's vector (the raw query's when there is no usable rewrite).

        The rewrite reads the user's knowledge records whole, as the persona they state, whatever
        ``read`` narrows the search to.
        """
        return self.store.encoder.encode([self.rewrite(user_id, query)])[0]

    def prepare(self, requests: Sequence[tuple[str, str]]) -> None:
        """Rewrite many (user id, query) pairs with batched LLM calls, filling the cache."""
        self.rewrites(requests)

    def rewrite(self, user_id: str, query: str) -> str:
        """The query rewritten with the user's knowledge, or the query itself on any fallback."""
        return self.rewrites([(user_id, query)])[0]

    def rewrites(self, requests: Sequence[tuple[str, str]]) -> list[str]:
        """The rewrite per (user id, query), from the cache or batched LLM calls; never raises on the LLM."""
        out = [query for _, query in requests]
        asks: dict[tuple[str, str], _Ask] = {}  # by cache key; a repeated request is asked once
        positions: dict[tuple[str, str], list[int]] = {}
        for i, (user_id, query) in enumerate(requests):
            shown = self._shown(user_id, query)
            if not shown:
                continue  # nothing personal to work in: the raw query, without asking the LLM
            key = (user_id, self._cache_key(query, shown))
            asks.setdefault(key, _Ask(user_id, query, shown))
            positions.setdefault(key, []).append(i)
        keys = list(asks)
        computed: set[int] = set()  # positions the LLM answered now; the others came from the cache
        values = cached_llm_outputs(
            self.store,
            NAMESPACE,
            keys,
            partial(self._compute, [asks[key] for key in keys], computed),
            who="rewrite",
            fallback="searching with the raw query",
            category=RewriteFallbackWarning,
        )
        for j, (key, value) in enumerate(zip(keys, values, strict=True)):
            if value is None:  # the LLM failed on this batch (already warned): the raw query
                continue
            found = value if isinstance(value, dict) else {}
            rewrite = found["rewrite"] if isinstance(found.get("rewrite"), str) else ""
            query = asks[key].query
            if j not in computed and found.get("fell_back", True):
                warn_fallback(
                    f"rewrite: the cached answer for {query!r} was unusable in part; searching with "
                    f"{'the raw query' if rewrite in ('', query) else repr(rewrite)}",
                    RewriteFallbackWarning,
                    stacklevel=3,
                )
            for i in positions[key]:
                out[i] = rewrite or query
        return out

    # -- internals --------------------------------------------------------------------------------

    def _compute(self, asks: list[_Ask], computed: set[int], missing: list[int]) -> list[dict[str, Any]]:
        """Rewrite the asks at ``missing`` in one batch (two calls for "str"); LLMError propagates."""
        computed.update(missing)
        turns, numbered, by_number = [], [], []
        for i in missing:
            ask = asks[i]
            turns.append(Turn(id=_turn_id(ask.query), user_id=ask.user_id, text=ask.query))
            numbered.append({str(n): text for n, text in enumerate(ask.shown.values(), start=1)})
            by_number.append({str(n): rid for n, rid in enumerate(ask.shown, start=1)})
        done = rewrite_with_statements(
            self.llm, turns, numbered, self.config, seed=self.seed, raise_llm_errors=True
        )
        return [
            {
                "rewrite": r.rewrite,
                "selected": [ids[n] for n in r.selected if n in ids],
                "fell_back": r.fell_back,
            }
            for r, ids in zip(done, by_number, strict=True)
        ]

    def _load_knowledge(self, user_id: str) -> _Knowledge:
        records = [
            r for r in self.store.records(user_id) if r.kind == RecordKind.KNOWLEDGE and r.text.strip()
        ]
        texts = [r.text for r in records]
        listed = "\n".join(f"[{n}] {text}" for n, text in enumerate(texts, start=1))
        return _Knowledge([r.id for r in records], texts, self.llm.count_tokens(listed) if texts else 0)

    def _shown(self, user_id: str, query: str) -> dict[str, str]:
        """The statements to show for this query, record id -> text: all that fit, most similar first."""
        knowledge = self._knowledge.get(user_id)
        if not knowledge.ids:
            return {}
        budget = self.llm.context_window - self.config.max_tokens - self._frame_tokens(query)
        if knowledge.tokens <= budget:
            return dict(zip(knowledge.ids, knowledge.texts, strict=True))
        if knowledge.vectors is None:
            knowledge.vectors = self.store.encoder.encode(knowledge.texts)
        similarity = knowledge.vectors @ self.store.encoder.encode([query])[0]
        order = [int(i) for i in np.argsort(-similarity, kind="stable")]
        width = len(str(len(knowledge.ids)))  # every statement counted with the widest number
        fitted = fit_to_budget(
            order,
            max(0, budget),
            self.llm.count_tokens,
            render=lambda i: f"[{'9' * width}] {knowledge.texts[i]}",
        )
        if not fitted.kept:
            warn_fallback(
                f"rewrite: none of the user's {len(order)} statements fits the LLM's context window beside "
                f"the prompt for {query!r}; searching with the raw query",
                RewriteFallbackWarning,
                stacklevel=4,
            )
        kept = sorted(fitted.kept)  # shown in the user's order, like the unbudgeted list
        return {knowledge.ids[i]: knowledge.texts[i] for i in kept}

    def _frame_tokens(self, query: str) -> int:
        """Tokens of the largest prompt this strategy sends, without its statements."""
        turn = Turn(id="", user_id="", text=query)
        prompts: list[list[Message]] = {
            "all": lambda: [rewrite_prompt(turn, {}, (), demo_facts="all")],
            "str": lambda: [select_prompt(turn, {}, ()), rewrite_prompt(turn, {}, (), demo_facts="gold")],
            "sar": lambda: [select_and_rewrite_prompt(turn, {}, ())],
        }[self.strategy]()
        return _TEMPLATE_TOKENS + max(
            self.llm.count_tokens("\n".join(m["content"] for m in prompt)) for prompt in prompts
        )

    def _cache_key(self, query: str, shown: dict[str, str]) -> str:
        payload = [
            PROMPT_VERSION,
            self.strategy,
            query,
            self.llm.name,
            self.seed,
            self.config.temperature,
            self.config.max_tokens,
            list(shown.items()),
        ]
        return hashlib.sha256(json.dumps(payload, ensure_ascii=False).encode()).hexdigest()


def _turn_id(query: str) -> str:
    """How warnings name a query's turn."""
    return repr(query if len(query) <= _ID_CHARS else query[: _ID_CHARS - 1] + "…")
