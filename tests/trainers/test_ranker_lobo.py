"""Leave one benchmark out: the ranker's recipe judged by its worst fold, resumed, and shipped safe."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import SentenceEncoder
from personamem.datasets import BenchmarkName
from personamem.datasets.benchmark import evenly_spaced
from personamem.datasets.vectors import default_vector_cache
from personamem.retrieval.ranker import INFO_FILE, RankerModel
from personamem.retrieval.ranker_gate import PROFILE
from personamem.trainers.adapter.config import AdapterTrainConfig
from personamem.trainers.ranker import lobo
from personamem.trainers.ranker.config import RankerDataConfig, RankerTrainConfig
from personamem.trainers.ranker.lobo import (
    FUSIONS,
    MARGIN,
    METRICS,
    PLAIN,
    RULED,
    FoldSeed,
    fusion_name,
    leave_one_out,
    verdict,
)
from personamem.trainers.ranker.run import ship_verdict
from personamem.trainers.ranker.shapes import SHAPES, Shape, shape_benchmark, shapes_named
from tests.conftest import DATA, need_data

METHODS = (
    *PLAIN,
    "default without ranker",
    "adapted score fusion",
    "score fusion",
    "ranker (trees everywhere)",
    "ranker as served (gated)",
)


def _fold(served: list[float], reference: list[float], fold: str = "f", seed: int = 0) -> FoldSeed:
    """A fold whose served ranker scores ``served`` per question and every other method ``reference``."""
    per = {m: {f"q{i}": v for i, v in enumerate(reference)} for m in METRICS}
    scores = {m: per for m in METHODS}
    scores["ranker as served (gated)"] = {m: {f"q{i}": v for i, v in enumerate(served)} for m in METRICS}
    return FoldSeed(fold, seed, scores, [], 0.0)


def test_the_rule_reads_the_worst_fold_with_a_margin_and_a_paired_test() -> None:
    level = [0.5, 0.0, 1.0, 0.5] * 10
    assert verdict([_fold(level, level)])["passes"]
    within = [v - MARGIN / 2 if i == 0 else v for i, v in enumerate(level)]  # a small loss on one question
    assert verdict([_fold(within, level)])["passes"]
    lost = [max(v - 0.2, 0.0) for v in level]  # loses on most questions, in one fold of two
    report = verdict([_fold(level, level, "a"), _fold(lost, level, "b")])
    assert not report["passes"] and not report["trees_pass"]
    assert report["worst"]["fold"] == "b" and report["worst"]["difference"] < -MARGIN
    failing = [c for c in report["folds"]["b"]["checks"] if c["fails"]]
    assert {c["role"] for c in failing} == {"best plain method", "unranked default", "served without trees"}
    assert {c["metric"] for c in failing} == set(RULED)


def test_each_fold_is_broken_down_by_question_category() -> None:
    served, reference = [1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]
    runs = [_fold(served, reference, seed=0), _fold(reference, reference, seed=1)]
    report = verdict(runs, {"q0": "temporal", "q1": "temporal", "q2": "single-hop"})
    rows = report["folds"]["f"]["by_category"]
    counts = {c: r["questions"] for c, r in rows.items()}
    assert counts == {"single-hop": 1, "temporal": 2, "uncategorized": 1}
    # temporal: the served ranker's seed 0 gets q0 (1/2), seed 1 nothing: 0.25 over the seeds
    assert rows["temporal"]["methods"]["ranker as served (gated)"]["recall@5"] == pytest.approx(0.25)
    assert rows["temporal"]["methods"]["dense"]["recall@5"] == 0.0
    assert "| f | temporal (2) |" in lobo.markdown(report)
    assert "by_category" not in verdict(runs)["folds"]["f"]  # no categories given: none reported


def test_trees_that_fail_a_fold_ship_with_a_gate_that_admits_no_one(tmp_path: Path) -> None:
    folder = tmp_path / "ranker"
    shipped = Path(RankerModel.load("mixed").folder)
    folder.mkdir()
    for name in ("ranker.json", "ranker.onnx"):
        (folder / name).write_bytes((shipped / name).read_bytes())
    level = [0.5, 1.0] * 20
    lost = [v - 0.3 for v in level]
    ship_verdict(folder, verdict([_fold(lost, level)]), tmp_path / "study")
    info = json.loads((folder / INFO_FILE).read_text(encoding="utf-8"))
    assert info["leave_one_out"]["trees_pass"] is False and info["gate"]["regions"] == []
    decision = RankerModel.load(folder).decide(dict.fromkeys(PROFILE, 0.0))
    assert not decision.serves and "no region" in decision.reason


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")  # PersonaBench's long sessions
def test_leave_one_out_trains_without_each_benchmark_scores_it_and_resumes(
    tmp_path: Path, encoder: SentenceEncoder, monkeypatch: pytest.MonkeyPatch
) -> None:
    need_data(DATA / "trec_ikat")
    need_data(DATA / "personabench")
    data = RankerDataConfig(
        benchmark=(BenchmarkName("ikat"), BenchmarkName("personabench")),
        data_root=DATA,
        test_share=0.25,  # PersonaBench's four users: one tested, one validating, two training
        validation_share=0.25,
        features_dir=tmp_path / "features",
    )
    train = RankerTrainConfig(rounds=20)
    # iKAT left out: an adapter and a ranker trained on PersonaBench alone, scored on iKAT's held-out users
    adapter = AdapterTrainConfig(steps=50)
    study = tmp_path / "study"
    # the CLI's own embedding cache: the real corpora are embedded once per machine, not per test
    run = {
        "seeds": [0],
        "encoder": encoder,
        "folds": ["ikat"],
        "adapter": adapter,
        "cache_dir": default_vector_cache(),
        "shapes": [Shape("ikat-few", "ikat", users=3)],  # another reading of iKAT: three of its users
    }
    report = leave_one_out(data, train, study, **run)
    assert set(report["folds"]) == {"ikat", "ikat-few"}
    for found in report["folds"].values():
        assert set(found["methods"]) == {*METHODS, *(fusion_name(*f) for f in FUSIONS)}
        assert found["questions"] > 0
        assert len(found["checks"]) == 3 * len(RULED)
        # every learned part of this fold (and of the shape iKAT's fold scores) was trained without iKAT
        ranker = json.loads((study / "leave-one-out" / "ranker-without-ikat-s0" / INFO_FILE).read_text())
        assert "ikat" not in ranker["sources"] and "ikat" not in ranker["recipe"]["data"]["benchmark"]
        if found["served_share"] == 0:  # nobody admitted: the served ranker is the score fusion
            assert found["methods"]["ranker as served (gated)"] == found["methods"]["score fusion"]
    assert (tmp_path / "study" / "leave-one-out.md").read_text().count("| ikat (") == len(METHODS)
    # the shape is scored by iKAT's fold (its adapter and ranker, none trained again) on its three users'
    # questions: methods that read one user's records alone score each of them as the fold does
    saved = study / "leave-one-out"
    whole, few = (
        json.loads((saved / f"{name}-s0.json").read_text())["scores"] for name in ("ikat", "ikat-few")
    )
    asked = set(few["dense"]["mrr"])
    assert 0 < len(asked) < len(whole["dense"]["mrr"]) and len({q.split("_")[0] for q in asked}) == 3
    for method in ("dense", "default without ranker"):
        assert few[method]["mrr"] == {q: whole[method]["mrr"][q] for q in asked}
    assert len(list(saved.glob("ranker-without-*"))) == 1

    def again(*args: object, **kwargs: object) -> None:
        raise AssertionError("a finished fold or shape was trained or scored again")

    for step in ("train_adapter", "train_ranker", "_scored"):
        monkeypatch.setattr(lobo, step, again)
    assert leave_one_out(data, train, study, **run) == report


def test_a_shape_reads_its_benchmark_with_its_options_on_evenly_spaced_users() -> None:
    need_data(DATA / "prefeval")
    shape = Shape("prefeval-chats", "prefeval", {"inter_turns": 6, "replies": True}, users=4)
    read = shape_benchmark(RankerDataConfig(data_root=DATA), shape)
    users = {q.user_id for q in read.questions}
    every = sorted(
        {
            q.user_id
            for q in shape_benchmark(RankerDataConfig(data_root=DATA), Shape("all", "prefeval")).questions
        }
    )
    assert read.name == "prefeval-chats" and users == set(evenly_spaced(every, 4)) and len(every) > 4
    assert {r.user_id for r in read.records} == users
    roles = [r.metadata.get("role") for r in read.records if r.user_id == min(users)]
    assert roles.count("assistant") == 6 and len(roles) == 13  # the preference, six turns and their replies


def test_shapes_are_named_from_the_table_and_an_unknown_one_is_refused() -> None:
    assert shapes_named(("prefeval-long",)) == SHAPES[:1]
    assert RankerTrainConfig().leave_one_out_shapes == tuple(s.name for s in SHAPES)
    with pytest.raises(ValueError, match="no history shape longest: choose from prefeval-long"):
        RankerTrainConfig(leave_one_out_shapes=("longest",))
