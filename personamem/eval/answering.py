"""Answer-level metrics for a ranking: what the frozen LLM does with the top-K records as a profile.

Retrieval metrics say whether the gold record was found; these say whether it helped: the LLM's
log-likelihood of the gold answer given the profile and question (PURPLE's reward), the overlap of
a greedy generated answer with the gold one (token F1, exact match, ROUGE-L; LoCoMo's own F1 where the
question carries its category), and, with a judge, whether that answer is right
(:mod:`personamem.eval.answer_judge`): the accuracy memory layers publish.

Generated answers and verdicts are kept in the evaluation's store (its ``derived`` values, keyed by
the model, the prompt and the question's user) a few questions at a time, so a stopped run resumes
where it was and a rerun with the same models reads them back: the same numbers, nothing generated.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from personamem.datasets.benchmark import Question
from personamem.eval.answer_judge import AnswerJudge
from personamem.eval.answers import answer_loglikelihood, exact_match, locomo_answer_f1, rouge_l, token_f1
from personamem.llm import FrozenLLM
from personamem.llm.budget import fit_to_budget
from personamem.pipeline.prompt import ANSWER_RESERVE, profile_prompt, render_record
from personamem.records import Record
from personamem.store import Store

__all__ = ["answer_steps", "history_rankings", "score_answers"]

_CHUNK = 8  # questions generated (and kept) at a time: what a stopped run can lose
_ANSWER_TOKENS = 32


def score_answers(
    llm: FrozenLLM,
    questions: Sequence[Question],
    rankings: Mapping[str, Sequence[str]],
    records: Mapping[tuple[str, str], Record],
    *,
    k: int = 5,
    generate: bool = True,
    judge: AnswerJudge | None = None,
    cache: Store | None = None,
    advance: Callable[[int], None] | None = None,
) -> dict[str, dict[str, float]]:
    """Answer metrics per question with a reference answer, the profile being its top-``k`` records.

    Args:
        llm: the frozen LLM (the local default in ``personamem eval --answers``).
        questions: questions; those without ``answer`` are left out.
        rankings: question id -> ranked record ids.
        records: (user id, record id) -> record.
        k: profile size.
        generate: also generate a greedy answer and score its overlap with the reference.
        judge: also have this judge say whether the generated answer is right (``generate`` only).
        cache: the store that keeps generated answers and verdicts (None: nothing kept).
        advance: called with a number of questions each time a step (scoring, answering, judging)
            has finished them, for a progress bar of :func:`answer_steps` steps per question.

    Returns:
        metric -> question id -> value: ``answer_loglik`` (nats, summed over the answer's tokens),
        ``answer_loglik_per_token``, ``answer_prompt_tokens`` (what the LLM read), and with
        ``generate`` ``answer_f1``, ``answer_em``, ``answer_rougeL``, for LoCoMo questions
        ``answer_locomo_f1``, and with a judge ``answer_judged`` (1 right, 0 wrong).
    """
    answered = [q for q in questions if q.answer]
    users = [q.user_id for q in answered]
    prompts = [
        profile_prompt(llm, [records[(q.user_id, rid)] for rid in list(rankings.get(q.id, ()))[:k]], q.text)
        for q in answered
    ]
    golds = [str(q.answer) for q in answered]

    def likelihoods(rows: list[int]) -> list[list[float]]:
        scores = answer_loglikelihood(llm, [prompts[i] for i in rows], [golds[i] for i in rows])
        return [[s, float(n)] for s, n in zip(scores, scores.token_counts, strict=True)]

    keys = [_key(llm.name, "loglik", p, gold) for p, gold in zip(prompts, golds, strict=True)]
    scored = _kept(cache, "eval-loglik", users, keys, likelihoods, advance)
    result: dict[str, dict[str, float]] = {
        "answer_loglik": {q.id: s for q, (s, _) in zip(answered, scored, strict=True)},
        "answer_loglik_per_token": {
            q.id: s / max(1.0, n) for q, (s, n) in zip(answered, scored, strict=True)
        },
        "answer_prompt_tokens": {
            q.id: float(sum(llm.count_tokens(m["content"]) for m in prompt))
            for q, prompt in zip(answered, prompts, strict=True)
        },
    }
    if not generate:
        return result

    def generated(rows: list[int]) -> list[str]:
        outputs = llm.generate([prompts[i] for i in rows], max_tokens=_ANSWER_TOKENS, stop=["\n"])
        return [text for (text,) in outputs]

    keys = [_key(llm.name, "answer", p, _ANSWER_TOKENS) for p in prompts]
    texts = _kept(cache, "eval-answer", users, keys, generated, advance)
    for q, text in zip(answered, texts, strict=True):
        reference = str(q.answer)
        result.setdefault("answer_f1", {})[q.id] = token_f1(text, reference)
        result.setdefault("answer_em", {})[q.id] = exact_match(text, reference)
        result.setdefault("answer_rougeL", {})[q.id] = rouge_l(text, reference)
        category_id = q.attributes.get("category_id")
        if isinstance(category_id, int):
            result.setdefault("answer_locomo_f1", {})[q.id] = locomo_answer_f1(text, reference, category_id)
    if judge is not None:
        triples = [(q.text, gold, text) for q, gold, text in zip(answered, golds, texts, strict=True)]
        verdicts = _kept(
            cache,
            "eval-judge",
            users,
            [judge.key(*t) for t in triples],
            lambda rows: [judged.correct for judged in judge.judge([triples[i] for i in rows])],
            advance,
        )
        result["answer_judged"] = {q.id: float(v) for q, v in zip(answered, verdicts, strict=True)}
    return result


def answer_steps(questions: Sequence[Question], *, generate: bool, judged: bool) -> int:
    """How many steps :func:`score_answers` reports through ``advance``: one per question and step."""
    return sum(1 for q in questions if q.answer) * (1 + generate + (generate and judged))


def history_rankings(
    llm: FrozenLLM, questions: Sequence[Question], records: Sequence[Record], tokens: int
) -> dict[str, list[str]]:
    """The full-history baseline's "ranking": the user's latest records that fit, oldest first.

    At most ``tokens`` of records, and no more than the LLM's window leaves beside the instruction,
    question and answer; records in corpus order within a timestamp (the benchmarks keep turn order).
    """
    by_user: dict[str, list[tuple[int, Record]]] = {}
    for position, record in enumerate(records):
        by_user.setdefault(record.user_id, []).append((position, record))
    budget = min(tokens, llm.context_window - ANSWER_RESERVE - 256)
    latest: dict[str, list[str]] = {}
    for user, held in by_user.items():
        newest_first = [r for _, r in sorted(held, key=_recency, reverse=True)]
        fitted = fit_to_budget(newest_first, max(0, budget), llm.count_tokens, render=render_record)
        latest[user] = [r.id for r in reversed(fitted.kept)]
    return {q.id: latest.get(q.user_id, []) for q in questions}


def _recency(entry: tuple[int, Record]) -> tuple[float, int]:
    position, record = entry
    return (record.timestamp.timestamp() if record.timestamp else float("-inf"), position)


def _key(*parts: object) -> str:
    """A kept value's key: the model, what was asked of it and the exact input."""
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _kept(
    cache: Store | None,
    namespace: str,
    users: Sequence[str],
    keys: Sequence[str],
    compute: Callable[[list[int]], list[Any]],
    advance: Callable[[int], None] | None,
) -> list[Any]:
    """``compute`` over every position, read from and kept in ``cache`` ``_CHUNK`` at a time."""
    if cache is None:
        computed = compute(list(range(len(keys))))
        if advance is not None:
            advance(len(keys))
        return computed
    found: list[Any] = []
    for start in range(0, len(keys), _CHUNK):
        chunk = list(range(start, min(start + _CHUNK, len(keys))))

        def missing_of(missing: list[int], chunk: list[int] = chunk) -> list[Any]:
            return compute([chunk[i] for i in missing])

        found += cache.derived_many(namespace, [(users[i], keys[i]) for i in chunk], missing_of)
        if advance is not None:
            advance(len(chunk))
    return found
