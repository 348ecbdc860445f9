"""LoCoMo and TREC iKAT benchmark loaders: real data (skipped when absent) and malformed inputs."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from personamem.datasets.benchmark import Benchmark, Skip
from personamem.datasets.ikat import (
    NO_PROVENANCE,
    NO_VALID_PROVENANCE,
    load_ikat_benchmark,
    load_ikat_qrels,
)
from personamem.datasets.locomo import NO_EVIDENCE, NO_VALID_EVIDENCE, load_locomo_benchmark
from personamem.errors import IngestError
from tests.conftest import DATA, need_data

LOCOMO = DATA / "locomo" / "locomo10_shared.json"
IKAT = DATA / "trec_ikat"


def _assert_gold_resolves(bench: Benchmark) -> None:
    """Every question's gold ids name records of its own user, and question ids are unique."""
    owned: dict[str, set[str]] = {}
    for record in bench.records:
        owned.setdefault(record.user_id, set()).add(record.id)
    for question in bench.questions:
        assert question.relevant, question.id
        assert set(question.relevant) <= owned[question.user_id], question.id
    ids = [q.id for q in bench.questions] + [s.question_id for s in bench.skipped]
    assert len(ids) == len(set(ids))


# --- LoCoMo, real data --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def locomo() -> Benchmark:
    return load_locomo_benchmark(need_data(LOCOMO))


def test_locomo_counts(locomo: Benchmark) -> None:
    assert locomo.name == "locomo"
    assert len(locomo.questions) + len(locomo.skipped) == 1347
    assert locomo.skipped == [Skip("conv-26/30", NO_EVIDENCE), Skip("conv-26/46", NO_EVIDENCE)]
    assert Counter(q.category for q in locomo.questions) == {
        "single-hop": 563,
        "adversarial": 312,
        "temporal": 214,
        "multi-hop": 192,
        "open-domain": 64,  # 66 upstream, less the two with empty evidence
    }
    assert locomo.users() == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44", "conv-47"]
    _assert_gold_resolves(locomo)


def test_locomo_malformed_evidence_is_repaired_or_dropped_and_noted(locomo: Benchmark) -> None:
    questions = {q.id: q for q in locomo.questions}
    assert dict(questions["conv-26/37"].relevant) == {"D8:6": 1, "D9:17": 1}
    assert "D11:26" in questions["conv-43/18"].relevant
    assert dict(questions["conv-42/88"].relevant) == {"D1:18": 1, "D1:20": 1}
    assert "D10:19" not in questions["conv-42/58"].relevant
    assert len(questions["conv-42/58"].relevant) == 6
    assert dict(questions["conv-47/38"].relevant) == {"D18:1": 1, "D18:7": 1}
    assert locomo.notes == [
        "question conv-26/37: split evidence 'D8:6; D9:17' into ['D8:6', 'D9:17']",
        "question conv-42/58: dropped evidence 'D10:19' (names no turn of conv-42)",
        "question conv-42/88: dropped evidence 'D' (not a dialog id)",
        "question conv-43/18: read evidence 'D:11:26' as 'D11:26'",
        "question conv-47/38: dropped evidence 'D4:36' (names no turn of conv-47)",
    ]


def test_locomo_question_fields(locomo: Benchmark) -> None:
    questions = {q.id: q for q in locomo.questions}
    temporal = questions["conv-26/1"]  # upstream answer is the integer 2022
    assert (temporal.user_id, temporal.answer, temporal.category) == ("conv-26", "2022", "temporal")
    assert temporal.attributes == {"category_id": 2}
    adversarial = questions["conv-26/152"]
    assert adversarial.answer is None
    assert adversarial.attributes == {"category_id": 5, "adversarial_answer": "self-care is important"}
    assert questions["conv-26/167"].answer == "No"  # one of two adversarial items that also give an answer


def test_locomo_accepts_the_folder(locomo: Benchmark) -> None:
    assert load_locomo_benchmark(LOCOMO.parent) == locomo


# --- LoCoMo, malformed input ----------------------------------------------------------------------


def _conversation(qa: list[Any]) -> list[dict[str, Any]]:
    turns = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "Lovely!"},
    ]
    conversation = {"session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": turns}
    return [{"sample_id": "conv-1", "conversation": conversation, "qa": qa}]


def _write(tmp_path: Path, data: object, name: str = "locomo10.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_locomo_evidence_naming_no_turn_is_a_counted_skip(tmp_path: Path) -> None:
    qa = [
        {"question": "What pet?", "answer": "a cat", "evidence": ["D1:1"], "category": 4},
        {"question": "When?", "answer": "May", "evidence": ["D2:1", "D1:9"], "category": 2},
        {"question": "Who?", "adversarial_answer": "Bob", "evidence": ["d1:1"], "category": 5},
    ]
    bench = load_locomo_benchmark(_write(tmp_path, _conversation(qa)))
    assert [q.id for q in bench.questions] == ["conv-1/0"]
    assert bench.skipped == [Skip("conv-1/1", NO_VALID_EVIDENCE), Skip("conv-1/2", NO_VALID_EVIDENCE)]
    assert bench.notes == [
        "question conv-1/1: dropped evidence 'D2:1' (names no turn of conv-1)",
        "question conv-1/1: dropped evidence 'D1:9' (names no turn of conv-1)",
        "question conv-1/2: dropped evidence 'd1:1' (not a dialog id)",
    ]


@pytest.mark.parametrize(
    ("qa", "message"),
    [
        (
            {"question": "Q", "answer": "A", "evidence": ["D1:1"], "category": 9},
            "conv-1/0: unknown category 9",
        ),
        ({"question": "Q", "answer": "A", "evidence": [], "category": 0}, "conv-1/0: unknown category 0"),
        ({"question": "Q", "answer": "A", "evidence": "D1:1", "category": 1}, "conv-1/0, field 'evidence'"),
        ({"question": "Q", "answer": "A", "evidence": [1], "category": 1}, "conv-1/0, evidence[0]"),
        ({"question": "Q", "evidence": ["D1:1"], "category": 1}, "missing required field 'answer'"),
        ({"question": "Q", "answer": ["A"], "evidence": ["D1:1"], "category": 1}, "field 'answer'"),
    ],
)
def test_locomo_malformed_qa_names_the_question(tmp_path: Path, qa: dict[str, Any], message: str) -> None:
    path = _write(tmp_path, _conversation([qa]))
    with pytest.raises(IngestError, match=re.escape(message)) as info:
        load_locomo_benchmark(path)
    assert info.value.path == str(path)


def test_locomo_missing_file_and_wrong_layout(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="file not found"):
        load_locomo_benchmark(tmp_path / "absent.json")
    with pytest.raises(IngestError, match="top level: expected an array"):
        load_locomo_benchmark(_write(tmp_path, {"conv-1": _conversation([])}))
    data = _conversation([])
    del data[0]["qa"]
    with pytest.raises(IngestError, match="missing required field 'qa'"):
        load_locomo_benchmark(_write(tmp_path, data))
    with pytest.raises(IngestError, match="repeats an earlier conversation"):
        load_locomo_benchmark(_write(tmp_path, _conversation([]) * 2))


# --- TREC iKAT, real data -------------------------------------------------------------------------

# split -> (statements, questions, skipped for empty provenance, questions whose turn has qrels or None)
IKAT_COUNTS = {
    "2023_train": (101, 42, 53, 0),
    "2023_test": (180, 80, 151, 42),
    "2024_test": (288, 95, 123, None),
}


@pytest.mark.parametrize("split", sorted(IKAT_COUNTS))
def test_ikat_counts_per_split(split: str) -> None:
    bench = load_ikat_benchmark(need_data(IKAT), split=split)
    statements, questions, skipped, judged = IKAT_COUNTS[split]
    assert bench.name == f"ikat-{split}"
    assert (len(bench.records), len(bench.questions), len(bench.skipped)) == (statements, questions, skipped)
    assert bench.skip_reasons() == {NO_PROVENANCE: skipped}
    assert bench.notes == []
    if judged is None:
        assert all("judged" not in q.attributes for q in bench.questions)
    else:
        assert sum(q.attributes["judged"] is True for q in bench.questions) == judged
    prefix = f"ikat{split[:4]}-"
    assert all(user.startswith(prefix) for user in bench.users())
    _assert_gold_resolves(bench)


def test_ikat_question_fields() -> None:
    questions = {q.id: q for q in load_ikat_benchmark(need_data(IKAT)).questions}
    first = questions["9-1_1"]
    assert (first.user_id, first.text, first.context) == (
        "ikat2023-9-1",
        "Can you help me find a diet for myself?",
        (),
    )
    assert dict(first.relevant) == {"5": 1, "4": 1, "2": 1}
    assert first.answer is not None and first.answer.startswith("Sure, these diets")
    assert first.attributes["title"] == "Finding a diet"
    assert first.attributes["turn_id"] == 1
    assert str(first.attributes["resolved_utterance"]).startswith(
        "Can you help me find a diet for myself consid"
    )
    later = questions["9-1_3"]
    assert later.context[0] == first.text and len(later.context) == 2
    assert later.attributes["judged"] is True


def test_ikat_real_qrels() -> None:
    qrels = load_ikat_qrels(need_data(IKAT / "2023-qrels.all-turns.txt"))
    assert len(qrels) == 124
    assert sum(len(docs) for docs in qrels.values()) == 23968
    assert qrels["9-1_3"]["clueweb22-en0000-06-17856:4"] == 2


# --- TREC iKAT, malformed input -------------------------------------------------------------------


def _topic(provenance: list[Any], number: str | int = "1-1") -> dict[str, Any]:
    turns = [
        {
            "turn_id": 1,
            "utterance": "Hi, find me a diet.",
            "response": "Sure.",
            "ptkb_provenance": provenance,
        },
        {
            "turn_id": 2,
            "utterance": "Cheap ones?",
            "resolved_utterance": "Cheap diets?",
            "ptkb_provenance": [],
        },
    ]
    return {"number": number, "title": "Diet", "ptkb": {"1": "I'm vegan.", "2": "I'm tall."}, "turns": turns}


def test_ikat_provenance_naming_no_statement_is_dropped_and_noted(tmp_path: Path) -> None:
    _write(tmp_path, [_topic([1, "9"]), _topic([7], number=2)], name="2024_test_topics.json")
    bench = load_ikat_benchmark(tmp_path, split="2024_test")
    assert [(q.id, q.user_id, dict(q.relevant)) for q in bench.questions] == [
        ("1-1_1", "ikat2024-1-1", {"1": 1})
    ]
    assert bench.skipped == [
        Skip("1-1_2", NO_PROVENANCE),
        Skip("2_1", NO_VALID_PROVENANCE),
        Skip("2_2", NO_PROVENANCE),
    ]
    assert bench.notes == [
        "question 1-1_1: dropped ptkb_provenance keys naming no PTKB statement: ['9']",
        "question 2_1: dropped ptkb_provenance keys naming no PTKB statement: ['7']",
    ]


def test_ikat_missing_split_lists_the_available_ones(tmp_path: Path) -> None:
    _write(tmp_path, [_topic([1])], name="2023_test_topics.json")
    with pytest.raises(IngestError, match=r"no split '2024_test'.*available splits: \['2023_test'\]"):
        load_ikat_benchmark(tmp_path, split="2024_test")
    with pytest.raises(IngestError, match="not a folder"):
        load_ikat_benchmark(tmp_path / "2023_test_topics.json")


def test_ikat_wrong_layout(tmp_path: Path) -> None:
    topic = _topic([1])
    del topic["turns"][1]["utterance"]
    _write(tmp_path, [topic], name="2023_test_topics.json")
    with pytest.raises(IngestError, match=r"topic '1-1', turns\[1\]: missing required field 'utterance'"):
        load_ikat_benchmark(tmp_path)
    _write(tmp_path, [_topic([True])], name="2023_test_topics.json")
    with pytest.raises(IngestError, match=r"ptkb_provenance\[0\]: expected a PTKB key"):
        load_ikat_benchmark(tmp_path)
    _write(tmp_path, {"topics": []}, name="2023_test_topics.json")
    with pytest.raises(IngestError, match="top level: expected an array"):
        load_ikat_benchmark(tmp_path)


def test_ikat_judged_from_qrels_beside_the_topics(tmp_path: Path) -> None:
    _write(tmp_path, [_topic([1])], name="2023_test_topics.json")
    (tmp_path / "2023-qrels.all-turns.txt").write_text(
        "1-1_1 0 doc-a 2\n\n1-1_1 0 doc-b 0\n", encoding="utf-8"
    )
    (question,) = load_ikat_benchmark(tmp_path).questions
    assert question.attributes["judged"] is True
    assert load_ikat_qrels(tmp_path / "2023-qrels.all-turns.txt") == {"1-1_1": {"doc-a": 2, "doc-b": 0}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q1 0 doc-a 1\nq1 0 doc-b\n", r":2: expected '<query id> <iteration> <document id> <grade>', got 3"),
        ("q1 0 doc-a 1\n\nq1 0 doc-b high\n", r":3: grade 'high' is not an integer"),
        ("q1 0 doc-a 1\nq1 0 doc-a 2\n", r":2: q1 doc-a graded 2 here but 1 earlier"),
    ],
)
def test_ikat_malformed_qrels_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "qrels.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(IngestError, match=message) as info:
        load_ikat_qrels(path)
    assert info.value.path == str(path)
    assert info.value.line == int(message[1])


def test_ikat_qrels_missing_file(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="file not found"):
        load_ikat_qrels(tmp_path / "absent.txt")
