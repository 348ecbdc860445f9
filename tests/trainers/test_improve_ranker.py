"""``personamem improve`` fits the live ranker to a store: trees on the shipped ones, live only if better."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from personamem import PersonaMem, Record, SentenceEncoder
from personamem.errors import CheckpointError
from personamem.pipeline import PipelineConfig
from personamem.retrieval.ranker import INFO_FILE, SHIPPED_RANKERS, RankerModel
from personamem.testing.llm import FakeLLM
from personamem.trainers.adapter.config import ImproveConfig
from personamem.trainers.adapter.improve import (
    SYNTHETIC_LIVE,
    SYNTHETIC_RANKER,
    goes_live,
    improve,
    rollback,
    sign_test,
)
from personamem.trials import trial_config

TOPICS = ("cooking", "running", "painting", "chess", "gardening", "cycling")
TOPICS += ("baking", "hiking", "guitar", "swimming", "knitting", "camping")


def improvable_store(
    folder: Path, encoder: SentenceEncoder, *, answers: bool = False, users: int = 6
) -> Path:
    """Six users whose answers are stated facts, buried under chat turns that echo the question.

    "How long have I been into chess?" is answered by "Started chess back in 2003." (a knowledge
    record), while three chat turns repeat the question's words: the shipped ranker puts them
    first. The feedback on every call names the fact, or (``answers``) only gives the answer.
    """
    records, asked = [], []
    for u in range(users):
        user = f"user-{u}"
        for t, topic in enumerate(TOPICS):
            fact = Record(
                user_id=user,
                id=f"{user}-fact-{t}",
                kind="knowledge",
                text=f"Started {topic} back in {2000 + u + t}.",
            )
            records.append(fact)
            records += [
                Record(
                    user_id=user,
                    id=f"{user}-chat-{t}-{c}",
                    kind="conversation",
                    text=f"Friend {c} asked me: how long have you been into {topic}? No reply ({topic}).",
                )
                for c in range(3)
            ]
            asked.append((user, f"How long have I been into {topic}?", fact))
    with PersonaMem.open(folder, encoder=encoder, pipeline=PipelineConfig(log_interactions=True)) as mem:
        mem.add_many(records)
        for user, question, fact in asked:
            hits = mem.search(user, question, k=10)
            assert hits.interaction_id
            if answers:  # an answer quoting the record it drew on, as an LLM reading the context may
                mem.feedback(hits.interaction_id, answer=f"You told me so: {fact.text}")
            else:
                mem.feedback(hits.interaction_id, used_record_ids=[fact.id])
    return folder


@pytest.fixture
def store(tmp_path: Path, encoder: SentenceEncoder) -> Path:
    return improvable_store(tmp_path / "store", encoder)


def test_answers_alone_teach_improve_which_records_were_used(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    """No record ids: each answer is attributed to the served record it drew on, and improve learns."""
    folder = improvable_store(
        tmp_path / "store", encoder, answers=True, users=9
    )  # a fact served in the top 10 is attributable
    with PersonaMem.open(folder, encoder=encoder) as mem:
        assert not any(i.used for i in mem.inspection.interactions())  # the application named no record
        result = improve(mem, ImproveConfig(steps=50, weights=(0.8,)))  # by default: on trial
        assert result.signal == "feedback"  # the answers were attributed: enough labelled calls
        assert result.after["ndcg@10"] > result.before["ndcg@10"] and not result.live
        trial = mem.trials.running()
        assert trial is not None and trial.id == result.trial and mem.store.live_pipeline is None
        candidate = mem.pipeline(trial_config(trial))  # what the trial's share of calls is drafted from
        assert [h.record.id for h in candidate.search("user-0", "How long have I been into chess?", 1)] == [
            "user-0-fact-3"
        ]


def test_improve_fits_the_ranker_to_the_store_and_it_goes_live(store: Path, encoder: SentenceEncoder) -> None:
    question = ("user-0", "How long have I been into chess?")
    with PersonaMem.open(store, encoder=encoder) as mem:
        before = [h.record.id for h in mem.search(*question, k=3)]
        assert before[0].startswith("user-0-chat-3")  # the shipped ranker: the echoing chat turn first
        result = improve(mem, ImproveConfig(steps=50, weights=(0.8,), go_live="now"))
        assert result.signal == "feedback" and result.ranker is not None
        assert result.live and result.after["ndcg@10"] > result.before["ndcg@10"]
        assert result.after["ranker"] == str(result.ranker) and result.before["ranker"] == "mixed"
        assert any(note.startswith("ranker: ") and "added to 'mixed'" in note for note in result.notes)
        fitted = RankerModel.load(result.ranker)
        assert fitted.iterations > 0 and fitted.base is not None
        assert fitted.base.folder == SHIPPED_RANKERS / "mixed"
    # a fresh process's memory serves it with no method: the stated fact first
    with PersonaMem.open(store, encoder=encoder) as mem:
        assert mem.pipeline().ranker_name == str(result.ranker)
        assert "personamem improve" in (mem.config.chosen_by or "")
        assert [h.record.id for h in mem.search(*question, k=1)] == ["user-0-fact-3"]
        # a scheduled rerun fits on the shipped ranker again, never on the last run's trees
        again = improve(mem, ImproveConfig(steps=50, weights=(0.8,), go_live="now"))
        assert again.ranker is not None
        assert json.loads((again.ranker / INFO_FILE).read_text())["base"]["ranker"] == "mixed"
        rollback(mem)  # back to what the last run that went live replaced
        assert mem.pipeline().ranker_name == (str(result.ranker) if again.live else "mixed")


def test_a_residual_whose_base_changed_refuses_to_load(
    store: Path, encoder: SentenceEncoder, tmp_path: Path
) -> None:
    with PersonaMem.open(store, encoder=encoder) as mem:
        result = improve(mem, ImproveConfig(steps=50, weights=(0.8,), go_live="now"))
    assert result.ranker is not None
    copy = tmp_path / "copied-ranker"
    shutil.copytree(result.ranker, copy)
    info = json.loads((copy / INFO_FILE).read_text())
    info["base"]["sha256"] = "0" * 64  # fitted on other trees than the base now holds
    (copy / INFO_FILE).write_text(json.dumps(info))
    with pytest.raises(CheckpointError, match="base ranker 'mixed' is not the one it was fitted on"):
        RankerModel.load(copy)


def test_synthetic_questions_never_fit_the_ranker(store: Path, encoder: SentenceEncoder) -> None:
    def ask(prompt: str) -> str:  # control flow only: a question quoting the record it was asked about
        record = prompt.rsplit("Text: ", 1)[1].split("\n")[0]
        return f" What does the note '{record[:60]}' say?"

    settings = ImproveConfig(steps=20, weights=(0.8,), min_feedback=10_000, max_synthetic=120)
    with PersonaMem.open(store, encoder=encoder) as mem:
        result = improve(mem, settings, llm=FakeLLM(ask))
    assert result.signal == "synthetic" and result.ranker is None and SYNTHETIC_RANKER in result.notes
    assert not list((store / "adapters").glob("*-ranker"))
    assert not result.live and SYNTHETIC_LIVE in result.notes


def test_feedback_goes_live_on_a_higher_mean_synthetic_questions_only_when_asked_and_significant() -> None:
    assert sign_test(12, 0) == 0.5**12 and sign_test(0, 0) == 1.0
    assert sign_test(10, 10) > 0.5 and 0.4 < sign_test(12, 10) < 0.42  # no better than chance
    assert sign_test(10, 2) < 0.05 < sign_test(9, 3)
    default, opted = ImproveConfig(), ImproveConfig(synthetic_live=True)
    assert goes_live("feedback", 0.50, 0.51, 1, 3, default)  # real labels: the mean decides
    assert not goes_live("feedback", 0.50, 0.50, 5, 5, default)
    assert not goes_live("synthetic", 0.50, 0.70, 12, 0, default)  # off unless asked
    assert goes_live("synthetic", 0.50, 0.70, 12, 0, opted)
    assert not goes_live("synthetic", 0.50, 0.51, 12, 10, opted)  # and then only beyond chance
