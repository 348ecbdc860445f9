"""``personamem analyze improve``: improve on a benchmark's store, scored on its held-out users' questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import PersonaMem, PipelineConfig
from personamem.cli import main
from personamem.datasets import UserSplit, read_questions
from personamem.datasets.benchmark import Question
from personamem.eval.improve_eval import ImproveTrial, log_feedback, summarize_trials
from personamem.eval.profile_eval import TEST_SHARE, VALIDATION_SHARE
from personamem.llm.ct2 import CTranslate2LLM
from tests.conftest import DATA, need_data


def _trial(seed: int, default: dict[str, float], improved: dict[str, float]) -> ImproveTrial:
    scores = {
        "default": {m: dict(default) for m in ("recall@5", "recall@10", "ndcg@10", "mrr")},
        "improved": {m: dict(improved) for m in ("recall@5", "recall@10", "ndcg@10", "mrr")},
    }
    return ImproveTrial(
        "b", "feedback", "feedback", seed, 0.2, 10, 8, 0.5, True, "x", {}, [], 1.0, scores=scores
    )


def test_summary_pairs_each_question_over_the_seeds_that_scored_it() -> None:
    trials = [
        _trial(0, {"q1": 0.0, "q2": 1.0, "q3": 0.5}, {"q1": 1.0, "q2": 1.0, "q3": 1.0}),
        _trial(1, {"q1": 0.0, "q3": 0.5}, {"q1": 0.0, "q3": 1.0}),  # q2 was logged in this seed
    ]
    (row,) = summarize_trials(trials)
    recall = row["recall@5"]
    # q1: (1 + 0) / 2, q2: 0, q3: (0.5 + 0.5) / 2 -> mean 1/3 over three questions
    assert recall["questions"] == 3 and recall["difference"] == pytest.approx(1 / 3)
    # per seed, the mean over the questions it scored: 1.0 and 0.5
    assert recall["improved"] == pytest.approx(0.75) and recall["improved_std"] == pytest.approx(0.25)
    assert (
        row["live"] == 2
        and row["reported_share"] == pytest.approx(0.8)
        and row["learned_from"] == ["feedback"]
    )


@pytest.mark.slow
def test_cli_runs_improve_on_personabench_and_resumes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = need_data(DATA / "personabench").parent
    out = tmp_path / "improve.json"
    args = ["analyze", "improve", "--data-root", str(root), "--benchmark", "personabench"]
    args += ["--share", "0.5", "--seeds", "1", "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    (trial,) = report["trials"]
    assert trial["signal"] == trial["learned_from"] == "feedback"  # half the questions: enough feedback
    assert 0 < trial["reported"] <= trial["calls"] and 0 < trial["gold_reported"] <= 1
    bench = read_questions("personabench", DATA / "personabench")
    asked = [q for q in bench.questions if q.relevant]
    split = UserSplit.by_share(
        bench.users(), test_share=TEST_SHARE, validation_share=VALIDATION_SHARE, seed=0
    )
    held = [q for q in asked if q.user_id in set(split.test)]
    (row,) = report["rows"]
    assert trial["calls"] == round(0.5 * len(asked))
    assert (
        0 < row["recall@10"]["questions"] < len(held)
    )  # the held-out users' questions, less the logged ones
    if not trial["live"]:  # nothing went live: the store serves the default, so the same rankings
        assert row["recall@10"]["difference"] == 0
    assert "analyze improve" in report["command"] and "| personabench | feedback |" in capsys.readouterr().out
    # a rerun reads the finished trial instead of running it again
    lines = out.with_suffix(".trials.jsonl").read_text(encoding="utf-8").splitlines()
    assert main(args) == 0
    assert out.with_suffix(".trials.jsonl").read_text(encoding="utf-8").splitlines() == lines
    assert json.loads(out.read_text(encoding="utf-8"))["rows"] == report["rows"]
    assert main([*args[:-2], "--signal", "clicks", "--out", str(out)]) == 2  # an unknown signal is refused


def test_llm_answers_are_written_from_the_served_records_and_reported(
    mem: PersonaMem, ct2_llm: CTranslate2LLM
) -> None:
    """``--signal llm-answers``: each logged call is reported with what the LLM answered from it."""
    mem.add_many(
        [{"id": "cello", "text": "I started playing the cello in March 2019."}, {"text": "I cycle to work."}],
        user_id="ana",
    )
    asked = [
        Question(id="q1", user_id="ana", text="When did I start the cello?", relevant={"cello": 1}),
        Question(id="q2", user_id="ana", text="How do I get to work?", relevant={}),
    ]
    reported, shares = log_feedback(mem, PipelineConfig(), asked, None, "llm", ct2_llm)
    logged = mem.inspection.interactions("ana")
    assert reported == 2 and shares == [] and [i.query for i in logged] == [q.text for q in asked]
    assert all(i.accepted_answer and i.accepted_answer.strip() for i in logged)  # the LLM's, not a reference
    with pytest.raises(ValueError, match="llm-answers needs"):
        log_feedback(mem, PipelineConfig(), asked, None, "llm")
