"""MemRerank's choice instances on the real benchmarks, and ``personamem eval-memory`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import Record, SentenceEncoder
from personamem.cli import main
from personamem.datasets.amazon_beauty import load_amazon_choices
from personamem.datasets.choice import ChoiceInstance, ChoiceNeeds, split_users
from personamem.datasets.personabench import load_personabench_benchmark, personabench_choices
from personamem.datasets.prefeval import load_prefeval_benchmark, prefeval_choices
from personamem.eval.memory_eval import build_memories
from personamem.llm.hf import TransformersLLM
from tests.conftest import DATA, need_data


@pytest.mark.filterwarnings(
    "ignore::personamem.errors.TruncationWarning"
)  # long reviews: centroid from their start
@pytest.mark.slow
def test_amazon_instances_put_the_true_next_review_among_four_other_users(
    encoder: SentenceEncoder, tmp_path: Path
) -> None:
    lines = (need_data(DATA / "amazon_beauty") / "val.jsonl").read_text().splitlines()[:110]
    folder = tmp_path / "amazon"  # the first 110 users: enough for the negatives' last band, ranks 50-100
    folder.mkdir()
    (folder / "val.jsonl").write_text("\n".join(lines) + "\n")
    instances = load_amazon_choices(folder, ChoiceNeeds(encoder, cache_dir=tmp_path, part="val"))
    rows = [json.loads(line) for line in lines]
    assert len(instances) == len(rows)
    first, row = instances[0], rows[0]
    assert len(first.candidates) == 5 and len(set(first.candidates)) == 5
    assert first.candidates[0].startswith(row["target"]["title"])
    assert len(first.history) == len(row["history"]) and first.query == "" and first.category == "beauty"
    assert {r.user_id for r in first.history} == {first.user_id}
    again = load_amazon_choices(folder, ChoiceNeeds(encoder, cache_dir=tmp_path, part="val"))
    assert again == instances  # negatives are drawn from a per-user seed


def test_the_split_is_fixed_and_disjoint() -> None:
    groups = [f"user-{i}" for i in range(200)]
    train, test = split_users(groups)
    assert train.isdisjoint(test) and train | test == set(groups)
    assert 30 < len(test) < 90 and split_users(list(reversed(groups))) == (train, test)


@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")
def test_prefeval_and_personabench_instances_have_the_aligned_answer_first(encoder: SentenceEncoder) -> None:
    prefeval = load_prefeval_benchmark(need_data(DATA / "prefeval"), form="explicit", inter_turns=2)
    choices = prefeval_choices(prefeval)
    question = prefeval.questions[0]
    assert choices[0].candidates == question.choices and choices[0].query == question.text
    assert {r.category for r in choices[0].history} == {question.category}
    personabench = load_personabench_benchmark(need_data(DATA / "personabench"))
    instances = personabench_choices(personabench, encoder)
    gold = {q.id: q.answer for q in personabench.questions}
    assert instances and all(i.candidates[0] == gold[i.id] and len(set(i.candidates)) == 5 for i in instances)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::personamem.errors.TruncationWarning")
def test_eval_memory_writes_a_report_with_every_method_and_resumes_from_its_memories_and_choices(
    tmp_path: Path,
) -> None:
    data = need_data(DATA / "prefeval")
    args = ["eval-memory", "--data", str(data), "--benchmark", "prefeval-explicit", "--instances", "2"]
    args += ["--seeds", "2", "--shifts", "1", "--method", "none", "--method", "raw", "--method", "dense-top5"]
    args += ["--method", "raw-matched:dense-top5", "--inter-turns", "8", "--out", str(tmp_path)]
    assert main(args) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {row["method"]: row for row in report["methods"]}
    assert set(rows) == {"none", "raw", "dense-top5", "raw-matched:dense-top5"}
    assert rows["none"]["words"] == 0 and rows["raw"]["words"] > 0
    # raw history cut to the dense memory's tokens: shorter than the 512-token raw, about as long as dense
    assert 0 < rows["raw-matched:dense-top5"]["words"] <= rows["dense-top5"]["words"] * 1.5
    assert rows["raw-matched:dense-top5"]["words"] < rows["raw"]["words"]
    assert "vs_raw_matched" in rows["dense-top5"]["accuracy"]
    assert "vs_raw_matched" not in rows["raw"]["accuracy"]
    assert rows["raw"]["accuracy"]["instances"] == 2 and rows["raw"]["accuracy"]["seeds"] == 2
    assert 0.0 <= rows["raw"]["accuracy"]["mean"] <= 1.0 and "vs_none" in rows["raw"]["accuracy"]
    assert "--benchmark prefeval-explicit" in report["command"]
    cached = (tmp_path / "memories.jsonl").read_text().splitlines()
    choices = (tmp_path / "choices.jsonl").read_text().splitlines()
    assert len(choices) == 4 * 2 * 2  # methods x instances x seeds
    assert main(args) == 0
    assert (tmp_path / "memories.jsonl").read_text().splitlines() == cached  # nothing rebuilt
    assert (tmp_path / "choices.jsonl").read_text().splitlines() == choices  # nothing rescored
    assert json.loads((tmp_path / "report.json").read_text())["methods"] == report["methods"]


def test_raw_history_at_a_budget_shorter_than_one_record_shows_the_newest_records_first_words(
    llm: TransformersLLM,
) -> None:
    session = " ".join(f"word{i}" for i in range(300))  # one long session, as PersonaBench's are
    history = (
        Record(user_id="u", id="old", text="an older record"),
        Record(user_id="u", id="new", text=session),
    )
    instance = ChoiceInstance("i", "u", history, "", ("a", "b"), "", "u")
    memories = build_memories("raw", [instance], llm=llm, encoder=None, raw_tokens=12)  # type: ignore[arg-type]
    text = memories["i"].text
    assert text.startswith("- word0 word1") and 0 < llm.count_tokens(text) <= 12
    roomy = build_memories("raw", [instance], llm=llm, encoder=None, raw_tokens=2000)  # type: ignore[arg-type]
    assert roomy["i"].text == f"- {session}\n- an older record"  # whole records, newest first


@pytest.mark.parametrize("method", ["bogus", "raw-matched:bogus"])
def test_an_unknown_method_is_refused_before_any_model_loads(
    method: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval-memory", "--data", str(tmp_path), "--benchmark", "amazon", "--method", method]
    assert main([*args, "--out", str(tmp_path / "out")]) == 2
    assert "unknown memory method 'bogus'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
