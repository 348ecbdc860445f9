"""MemRerank's choice instances on the real benchmarks, and ``personamem eval-memory`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import SentenceEncoder
from personamem.cli import main
from personamem.datasets.amazon_beauty import load_amazon_choices
from personamem.datasets.choice import ChoiceNeeds, split_users
from personamem.datasets.personabench import load_personabench_benchmark, personabench_choices
from personamem.datasets.prefeval import load_prefeval_benchmark, prefeval_choices
from tests.conftest import DATA, need_data


@pytest.mark.filterwarnings(
    "ignore::personamem.errors.TruncationWarning"
)  # long reviews: centroid from their start
@pytest.mark.slow
def test_amazon_instances_put_the_true_next_review_among_four_other_users(
    encoder: SentenceEncoder, tmp_path: Path
) -> None:
    folder = need_data(DATA / "amazon_beauty")
    instances = load_amazon_choices(folder, ChoiceNeeds(encoder, cache_dir=tmp_path, part="val"))
    rows = [json.loads(line) for line in (folder / "val.jsonl").read_text().splitlines()]
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
def test_eval_memory_writes_a_report_with_every_method_and_resumes_from_its_memories(tmp_path: Path) -> None:
    data = need_data(DATA / "prefeval")
    args = ["eval-memory", "--data", str(data), "--benchmark", "prefeval-explicit", "--instances", "2"]
    args += ["--seeds", "2", "--shifts", "1", "--method", "none", "--method", "raw", "--method", "dense-top5"]
    args += ["--inter-turns", "3", "--out", str(tmp_path)]
    assert main(args) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    rows = {row["method"]: row for row in report["methods"]}
    assert set(rows) == {"none", "raw", "dense-top5"}
    assert rows["none"]["words"] == 0 and rows["raw"]["words"] > 0
    assert rows["raw"]["accuracy"]["instances"] == 2 and rows["raw"]["accuracy"]["seeds"] == 2
    assert 0.0 <= rows["raw"]["accuracy"]["mean"] <= 1.0 and "vs_none" in rows["raw"]["accuracy"]
    assert "--benchmark prefeval-explicit" in report["command"]
    cached = (tmp_path / "memories.jsonl").read_text().splitlines()
    assert main(args) == 0
    assert (tmp_path / "memories.jsonl").read_text().splitlines() == cached  # nothing rebuilt
