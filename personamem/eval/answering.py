"""Answer-level metrics for a ranking: what the frozen LLM does with the top-K records as a profile.

Retrieval metrics say whether the gold record was found; these say whether it helped: the LLM's
log-likelihood of the gold answer given the profile and question (PURPLE's reward), and the overlap of
a greedy generated answer with the gold one (token F1, exact match, ROUGE-L; LoCoMo's own F1 where the
question carries its category).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from personamem.datasets.benchmark import Question
from personamem.eval.answers import answer_loglikelihood, exact_match, locomo_answer_f1, rouge_l, token_f1
from personamem.llm import FrozenLLM
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record

__all__ = ["score_answers"]


def score_answers(
    llm: FrozenLLM,
    questions: Sequence[Question],
    rankings: Mapping[str, Sequence[str]],
    records: Mapping[tuple[str, str], Record],
    *,
    k: int = 5,
    generate: bool = True,
) -> dict[str, dict[str, float]]:
    """Answer metrics per question with a reference answer, the profile being its top-``k`` records.

    Args:
        llm: the frozen LLM (the local default in ``personamem eval --answers``).
        questions: questions; those without ``answer`` are left out.
        rankings: question id -> ranked record ids.
        records: (user id, record id) -> record.
        k: profile size.
        generate: also generate a greedy answer and score its overlap with the reference.

    Returns:
        metric -> question id -> value: ``answer_loglik`` (nats, summed over the answer's tokens),
        ``answer_loglik_per_token``, and with ``generate`` ``answer_f1``, ``answer_em``, ``answer_rougeL``
        and, for LoCoMo questions, ``answer_locomo_f1``.
    """
    answered = [q for q in questions if q.answer]
    prompts = [
        profile_prompt(llm, [records[(q.user_id, rid)] for rid in list(rankings.get(q.id, ()))[:k]], q.text)
        for q in answered
    ]
    scores = answer_loglikelihood(llm, prompts, [str(q.answer) for q in answered])
    result: dict[str, dict[str, float]] = {
        "answer_loglik": {q.id: s for q, s in zip(answered, scores, strict=True)},
        "answer_loglik_per_token": {
            q.id: s / max(1, n) for q, s, n in zip(answered, scores, scores.token_counts, strict=True)
        },
    }
    if not generate:
        return result
    outputs = llm.generate(prompts, max_tokens=32, stop=["\n"])
    for q, (text,) in zip(answered, outputs, strict=True):
        reference = str(q.answer)
        result.setdefault("answer_f1", {})[q.id] = token_f1(text, reference)
        result.setdefault("answer_em", {})[q.id] = exact_match(text, reference)
        result.setdefault("answer_rougeL", {})[q.id] = rouge_l(text, reference)
        category_id = q.attributes.get("category_id")
        if isinstance(category_id, int):
            result.setdefault("answer_locomo_f1", {})[q.id] = locomo_answer_f1(text, reference, category_id)
    return result
