"""Answer-level metrics with the real small LLM: a profile holding the answer must help."""

from __future__ import annotations

from personamem.datasets.benchmark import Question
from personamem.eval.answering import score_answers
from personamem.llm import TransformersLLM
from personamem.pipeline.prompt import profile_prompt
from personamem.records import Record

GOLD = Record(user_id="ana", id="g", text="Ana: I moved to Lisbon last spring.")
OTHER = Record(user_id="ana", id="o", text="Ana: my favourite board game is Codenames.")
RECORDS = {(r.user_id, r.id): r for r in (GOLD, OTHER)}
QUESTION = Question(
    id="q", user_id="ana", text="Which city does Ana live in?", relevant={"g": 1}, answer="Lisbon"
)


def test_gold_profile_raises_the_answer_likelihood(llm: TransformersLLM) -> None:
    with_gold = score_answers(llm, [QUESTION], {"q": ["g"]}, RECORDS, k=1, generate=False)
    without = score_answers(llm, [QUESTION], {"q": ["o"]}, RECORDS, k=1, generate=False)
    assert with_gold["answer_loglik"]["q"] > without["answer_loglik"]["q"] + 1.0
    assert set(with_gold) == {"answer_loglik", "answer_loglik_per_token", "answer_prompt_tokens"}


def test_generated_answers_are_scored_and_unanswerable_questions_left_out(llm: TransformersLLM) -> None:
    unanswered = Question(id="u", user_id="ana", text="Do I own a cat?", relevant={"o": 1})
    scores = score_answers(llm, [QUESTION, unanswered], {"q": ["g", "o"], "u": ["o"]}, RECORDS, k=2)
    assert set(scores) == {
        "answer_loglik",
        "answer_loglik_per_token",
        "answer_prompt_tokens",
        "answer_f1",
        "answer_em",
        "answer_rougeL",
    }
    assert all(set(per_q) == {"q"} for per_q in scores.values())
    assert 0.0 <= scores["answer_f1"]["q"] <= 1.0


def test_profile_prompt_never_overflows_the_window(llm: TransformersLLM) -> None:
    long = [Record(user_id="ana", id=str(i), text="word " * 400) for i in range(40)]
    prompt = profile_prompt(llm, long, "What do I like?")
    rendered = llm.render(prompt)
    assert llm.count_tokens(rendered) + 64 <= llm.context_window
    assert "What do I like?" in prompt[-1]["content"]
