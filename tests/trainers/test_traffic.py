"""Training from an application's traffic: each trainer's examples from a real store's interaction log."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from personamem import PersonaMem, PipelineConfig, Record, SentenceEncoder
from personamem.cli import main
from personamem.datasets.traffic import open_traffic, split_traffic
from personamem.errors import InsufficientDataError
from personamem.trainers.memrerank.data import instances_from_traffic
from personamem.trainers.pgret.data import data_from_traffic
from personamem.trainers.purple.config import PurpleDataConfig
from personamem.trainers.purple.data import examples_from_traffic

HISTORY = {
    "ana": ["I'm vegan.", "I cook lentils most nights.", "I cycle to work.", "I love spicy curries.",
            "My sister lives in Porto.", "I play the cello."],
    "bo": ["I love steak houses.", "I drive a red van.", "I grill on Sundays.", "My dog is called Rex.",
           "I work night shifts.", "I collect vinyl records."],
    "cy": ["I'm allergic to peanuts.", "I bake bread on weekends.", "I run marathons.",
           "I live by the sea.", "I teach maths.", "I drink green tea."],
}  # fmt: skip
QUESTIONS = ["what should I cook tonight?", "plan my weekend", "any gift idea for me?"]


def _traffic(folder: Path, encoder: SentenceEncoder, users: tuple[str, ...] = ("ana", "bo", "cy")) -> Path:
    """A store whose users asked three questions each, with the answer and the first shown record used."""
    with PersonaMem.open(folder, encoder=encoder, pipeline=PipelineConfig(log_interactions=True)) as mem:
        for user in users:
            mem.add_many(
                [{"text": t, "id": f"{user}-{i}"} for i, t in enumerate(HISTORY[user])], user_id=user
            )
            for question in QUESTIONS:
                hits = mem.search(user, question, k=5, method="hybrid")
                assert hits.interaction_id is not None
                mem.feedback(
                    hits.interaction_id,
                    answer=f"{user} answer",
                    rating=1,
                    used_record_ids=[hits[0].record.id],
                )
        unrated = mem.context(users[0], "no feedback on this one")
        assert unrated.interaction_id is not None
    return folder


def test_each_trainer_reads_its_examples_from_the_log(tmp_path: Path, encoder: SentenceEncoder) -> None:
    traffic = open_traffic(PurpleDataConfig(from_store=_traffic(tmp_path / "store", encoder)))
    try:
        assert traffic.source["interactions"] == 10
        purple = examples_from_traffic(traffic, first_stage="hybrid", candidates=4)
        assert len(purple) == 9 and {e.answer for e in purple} == {"ana answer", "bo answer", "cy answer"}
        assert all(
            len(e.candidates) == 4 and {r.user_id for r in e.candidates} == {e.user_id} for e in purple
        )

        pgret = data_from_traffic(traffic, novelty_depth=3, exploration_depth=3)
        assert len(pgret.queries) == 9 and sorted(pgret.corpora) == ["ana", "bo", "cy"]
        records, vectors = traffic.store.vectors("bo")
        corpus = pgret.corpora["bo"]
        assert np.allclose(
            corpus.vectors[corpus.index()[records[0].id]], vectors[0]
        )  # the store's own vectors
        assert all(set(q.gold) <= set(pgret.corpora[q.user_id].ids) for q in pgret.queries)

        choices = instances_from_traffic(traffic)
        assert len(choices) == 9
        for choice in choices:
            assert len(choice.candidates) == 5 and len(choice.history) == 1  # 6 records − the 5 shown
            assert choice.candidates[0] not in {r.text for r in choice.history}
        assert instances_from_traffic(traffic, min_rating=2) == []  # every rating was 1
    finally:
        traffic.close()


def test_too_little_traffic_says_how_much_is_needed() -> None:
    with pytest.raises(
        InsufficientDataError, match=r"3 usable interaction\(s\) from 1 user\(s\).*at least 2 users"
    ):
        split_traffic("PURPLE", {"ana": 3}, validation=1, seed=0, need_train=2, hint="Log more.")
    train, held = split_traffic(
        "PURPLE", {"ana": 3, "bo": 3, "cy": 0}, validation=1, seed=0, need_train=2, hint=""
    )
    assert len(train) == 1 and len(held) == 1 and "cy" not in train + held


def test_train_purple_from_a_store_records_its_source(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    store, out = _traffic(tmp_path / "store", encoder), tmp_path / "purple"
    config = tmp_path / "train.toml"
    config.write_text(
        f'from_store = "{store}"\nsteps = 5\nbatch_size = 2\nsamples = 2\n'
        "k = 2\nlayers = 1\ncandidates = 4\n",
        encoding="utf-8",
    )
    argv = [
        "train",
        "purple",
        "--config",
        str(config),
        "--out",
        str(out),
        "--steps",
        "1",
        "--validate-every",
        "1",
    ]
    assert main(argv) == 0  # the command line's --steps 1 wins over the file's 5
    printed = capsys.readouterr().out
    assert f'selector = "purple:{out / "best"}"' in printed.replace("\n", "")
    # last/ is step 1; best/ is step 0 (the first stage's order) unless step 1 validated better
    training = json.loads((out / "last" / "config.json").read_text(encoding="utf-8"))["training"]
    assert training["step"] == 1 and training["best_step"] in (0, 1)
    assert training["data_source"]["traffic"]["store"] == str(store.resolve())
    assert len(training["validation_users"]) == 1 and np.isfinite(training["best_validation"])

    config.write_text(f'from_store = "{store}"\nstepz = 5\n', encoding="utf-8")
    assert main(["train", "purple", "--config", str(config)]) == 2
    assert "unknown key(s) stepz" in capsys.readouterr().err


def test_too_little_traffic_stops_training_with_the_counts(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _traffic(tmp_path / "store", encoder, users=("ana",))
    assert main(["train", "purple", "--from-store", str(store), "--out", str(tmp_path / "out")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "too little traffic to train PURPLE: 3 usable interaction(s) from 1 user(s)" in err
    assert main(["train", "purple", "--from-log", str(tmp_path / "log.jsonl")]) == 2
    assert "--from-log needs --from-store" in " ".join(capsys.readouterr().err.split())


def test_train_pgret_from_a_store_gives_a_tower_for_that_store(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    store, out = _traffic(tmp_path / "store", encoder), tmp_path / "tower"
    argv = ["train", "pgret", "--from-store", str(store), "--out", str(out), "--variant", "infonce"]
    assert main([*argv, "--batch-size", "2", "--hard-negatives", "2", "--novelty-depth", "3"]) == 0
    assert f'first_stage = "pgret:{out / "best"}"' in capsys.readouterr().out.replace("\n", "")
    info = json.loads((out / "best" / "pgret.json").read_text(encoding="utf-8"))
    assert info["data"]["source"]["traffic"]["interactions"] == 10 and info["data"]["test_users"] == []
    with PersonaMem.open(store, encoder=encoder) as mem:  # the tower searches the store it learned from
        assert len(mem.search("ana", "what should I cook tonight?", k=2, method=f"pgret:{out / 'best'}")) == 2


def test_purple_learns_from_the_records_the_answers_used_and_goes_on_trial(
    tmp_path: Path, encoder: SentenceEncoder, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--reward used``: no LLM; the store's own reports are the reward, and the selector is tried live."""
    from personamem.trainers.purple.data import ProfileExample
    from personamem.trainers.purple.reward import UsedReward

    records = tuple(Record(user_id="u", id=f"r{i}", text=f"fact {i}") for i in range(3))
    example = ProfileExample("q", "u", "?", "", records, frozenset({"r2"}))
    reward = UsedReward()
    assert reward([(example, [records[2], records[0]]), (example, [records[0], records[2]])]) == [
        1.0,
        pytest.approx(1 / np.log2(3)),
    ]
    assert reward([(example, [records[0], records[1]])]) == [0.0]

    store, out = _traffic(tmp_path / "store", encoder), tmp_path / "purple"
    argv = ["train", "purple", "--from-store", str(store), "--out", str(out), "--reward", "used"]
    argv += ["--steps", "2", "--validate-every", "1", "--batch-size", "2", "--samples", "2", "--k", "2"]
    argv += ["--layers", "1", "--candidates", "4", "--trial"]
    assert main(argv) == 0
    assert "nDCG of" in capsys.readouterr().out  # the summary names the reward's unit
    with PersonaMem.open(store, encoder=encoder) as mem:
        trial = mem.trials.running()
        assert trial is not None and trial.role == "challenger"
        assert trial.table["selector"] == f"purple:{(out / 'best').resolve()}"
        assert mem.store.live_pipeline is None  # not live: the answers on its share of calls decide
