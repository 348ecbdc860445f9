"""Answer-level evaluation: the judge's verdicts, the baselines' profiles, and a run that resumes.

The judge and the reader are the real small LLM (SmolLM2-135M on CTranslate2); its verdicts are not
trusted here (a 135M judge is close to chance), only the flow: one verdict per answer, read from its
reply or, failing that, from its log-likelihoods. A scripted LLM stands in where the test is of that
control flow (a reply with neither word, a backend that cannot score).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from personamem import Record, SentenceEncoder
from personamem.datasets.benchmark import Question
from personamem.errors import LLMError
from personamem.eval.answer_judge import ANSWER_JUDGE_VERSION, AnswerJudge, answer_judge_prompt, read_verdict
from personamem.eval.answering import history_rankings, score_answers
from personamem.llm import CTranslate2LLM
from personamem.llm.base import Generations, Prompt, Scores
from personamem.llm.parsing import tally_outputs
from personamem.store import Store


def test_a_verdict_is_the_first_of_the_two_words() -> None:
    assert read_verdict("CORRECT") is True
    assert read_verdict("wrong.") is False
    assert read_verdict("Incorrect, the reference says Lisbon") is False
    assert read_verdict("The answer is correct") is True
    assert read_verdict("Maybe") is None
    assert read_verdict("WRONGFUL") is None  # whole words only


def test_the_prompt_carries_the_triple_and_asks_for_one_word() -> None:
    system, user = answer_judge_prompt("Where do I live?", "Lisbon", "In Lisbon, Portugal")
    assert "one word" in system["content"]
    assert (
        "Question: Where do I live?\nReference answer: Lisbon\nAnswer to check: In Lisbon, Portugal"
        in (user["content"])
    )
    assert user["content"].endswith("Reply CORRECT or WRONG.")


class Scripted:
    """A judge LLM whose reply and scores are given: only the verdict's control flow is tested."""

    name, context_window = "scripted", 2048

    def __init__(self, reply: str, scores: tuple[float, float] | None) -> None:
        self.reply, self.scores = reply, scores

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def generate(self, prompts: Sequence[Prompt], **_: Any) -> Generations:
        return Generations([[self.reply] for _ in prompts])

    def loglikelihood(self, requests: Sequence[tuple[Prompt, str]]) -> Scores:
        if self.scores is None:
            raise LLMError("this server cannot return prompt log-probabilities")
        return Scores(list(self.scores), [[v] for v in self.scores])


@pytest.mark.parametrize(
    ("reply", "scores", "correct", "read"),
    [
        ("CORRECT", None, True, "clean"),
        ("Hmm, hard to say", (-0.5, -2.0), True, "repaired"),
        ("Hmm, hard to say", (-3.0, -0.1), False, "repaired"),
        ("Hmm, hard to say", None, False, "failed"),
    ],
)
def test_a_reply_without_the_words_is_settled_by_likelihood_or_counted_wrong(
    reply: str, scores: tuple[float, float] | None, correct: bool, read: str
) -> None:
    with tally_outputs() as counts:
        [judged] = AnswerJudge(Scripted(reply, scores)).judge([("Where do I live?", "Lisbon", "Porto")])
    assert (judged.correct, judged.read) == (correct, read)
    assert counts == {f"answer-judge {read}": 1}


def test_the_real_judge_gives_one_verdict_per_answer(ct2_llm: CTranslate2LLM) -> None:
    judge = AnswerJudge(ct2_llm)
    triples = [
        ("Where do I live?", "Lisbon", "Lisbon"),
        ("Where do I live?", "Lisbon", "I own a red bicycle"),
    ]
    verdicts = judge.judge(triples)
    assert len(verdicts) == 2 and all(v.read in ("clean", "repaired") for v in verdicts)
    assert judge.key(*triples[0]) != judge.key(*triples[1])
    assert judge.key(*triples[0]) == AnswerJudge(ct2_llm).key(*triples[0])  # stable across runs
    assert ANSWER_JUDGE_VERSION == "answer-judge-v1"


def test_the_full_history_baseline_keeps_the_latest_records_that_fit(ct2_llm: CTranslate2LLM) -> None:
    records = [Record(user_id="ana", id=f"t{i}", text=f"Turn {i}: " + "words " * 30) for i in range(40)]
    records.append(Record(user_id="bo", id="b0", text="Bo likes tea."))
    questions = [Question(id="q", user_id="ana", text="What did I say?", relevant={"t39": 1}, answer="x")]
    [kept] = history_rankings(ct2_llm, questions, records, tokens=200).values()
    assert kept and kept[-1] == "t39" and kept == [f"t{i}" for i in range(40 - len(kept), 40)]  # oldest first
    assert sum(ct2_llm.count_tokens(f"- {r.text}") for r in records if r.id in kept) <= 200
    assert len(history_rankings(ct2_llm, questions, records, tokens=10_000)["q"]) == 40  # one user's only


class Counting:
    """The real LLM, counting the prompts it generates for: what a resumed run must not repeat."""

    def __init__(self, llm: CTranslate2LLM) -> None:
        self._llm, self.generated = llm, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llm, name)

    def generate(self, prompts: Sequence[Prompt], **options: Any) -> Generations:
        self.generated += len(prompts)
        return self._llm.generate(prompts, **options)


def test_answers_and_verdicts_are_kept_so_a_rerun_resumes_with_the_same_numbers(
    tmp_path: Path, ct2_llm: CTranslate2LLM, encoder: SentenceEncoder
) -> None:
    records = {
        ("ana", "g"): Record(user_id="ana", id="g", text="Ana: I moved to Lisbon last spring."),
        ("ana", "o"): Record(user_id="ana", id="o", text="Ana: my favourite board game is Codenames."),
    }
    questions = [
        Question(id=f"q{i}", user_id="ana", text=text, relevant={"g": 1}, answer=answer)
        for i, (text, answer) in enumerate(
            [("Which city do I live in?", "Lisbon"), ("Which game?", "Codenames")]
        )
    ]
    rankings = {"q0": ["g", "o"], "q1": ["o", "g"]}
    store = Store.open(tmp_path, encoder=encoder)
    try:
        store.add_many(list(records.values()))
        reader, judging = Counting(ct2_llm), Counting(ct2_llm)
        first = score_answers(
            reader, questions, rankings, records, k=2, judge=AnswerJudge(judging), cache=store
        )
        assert (reader.generated, judging.generated) == (2, 2)
        again = score_answers(
            reader, questions, rankings, records, k=2, judge=AnswerJudge(judging), cache=store
        )
        assert (reader.generated, judging.generated) == (2, 2)  # read back, nothing generated
    finally:
        store.close()
    assert again == first and set(first["answer_judged"].values()) <= {0.0, 1.0}
    assert first["answer_prompt_tokens"]["q0"] > 10
