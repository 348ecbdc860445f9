"""PrefEval as a benchmark: the real files (skipped when absent) and malformed inputs in tmp_path."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from personamem.datasets.benchmark import Benchmark
from personamem.datasets.prefeval import PrefEvalForm, load_prefeval_benchmark
from personamem.errors import IngestError
from personamem.records import RecordKind
from tests.conftest import DATA, records_by_user

PREFEVAL = DATA / "prefeval"
FORMS: tuple[PrefEvalForm, ...] = ("explicit", "choice", "persona")
ITEMS = 784  # 16 topics shared
GOLD_RECORDS = {"explicit": 784, "choice": 3 * 784, "persona": 4156}


def _prefeval_dir() -> Path:
    if not (PREFEVAL / "benchmark_dataset").is_dir():
        pytest.skip(f"PrefEval not found at {PREFEVAL}")
    return PREFEVAL


@pytest.fixture(scope="module", params=FORMS)
def bench(request: pytest.FixtureRequest) -> Benchmark:
    return load_prefeval_benchmark(_prefeval_dir(), form=request.param)


def _first_user_messages(count: int) -> list[str]:
    chats = json.loads((PREFEVAL / "benchmark_dataset" / "filtered_inter_turns.json").read_text("utf-8"))
    return [m["content"] for chat in chats for m in chat["conversation"] if m["role"] == "user"][:count]


# --- real data ------------------------------------------------------------------------------------


def test_counts_per_form(bench: Benchmark) -> None:
    form = bench.name.removeprefix("prefeval-")
    assert len(bench.questions) == ITEMS
    assert bench.skipped == []
    assert len({q.id for q in bench.questions}) == ITEMS
    assert len(bench.users()) == ITEMS
    assert len(bench.records) == GOLD_RECORDS[form] + 20 * ITEMS
    assert sum(len(q.relevant) for q in bench.questions) == GOLD_RECORDS[form]
    assert len({q.category for q in bench.questions}) == 16


def test_gold_names_own_records_and_distractors_are_not_gold(bench: Benchmark) -> None:
    index = records_by_user(bench.records)
    for q in bench.questions:
        own = index[q.user_id]
        assert q.relevant and set(q.relevant) <= set(own)
        assert set(q.relevant.values()) == {1}
        assert set(own) - set(q.relevant) == {f"inter-{n}" for n in range(20)}
        assert all(r.kind is RecordKind.CONVERSATION for r in own.values())
        topic, item = q.id.split("/")
        assert q.user_id == f"prefeval/{topic}/{item}" and q.category == topic
        assert q.answer is None and q.attributes["form"] == bench.name.removeprefix("prefeval-")


def test_choices_are_the_mcq_options_with_the_aligned_one_first(bench: Benchmark) -> None:
    mcq_dir = PREFEVAL / "benchmark_dataset" / "mcq_options"
    raw = {p.stem: json.loads(p.read_text("utf-8")) for p in mcq_dir.glob("*.json")}
    for q in bench.questions:
        topic, item = q.id.split("/")
        assert q.choices == tuple(raw[topic][int(item)]["classification_task_options"])
    hotel = next(q for q in bench.questions if q.id == "travel_hotel/0")
    assert "nightlife" in str(hotel.attributes["preference"])
    assert hotel.choices[0] == "The Vdara Hotel & Spa, a tranquil non-gaming, non-smoking resort."


def test_explicit_record_is_the_preference_statement() -> None:
    bench = load_prefeval_benchmark(_prefeval_dir(), form="explicit", inter_turns=0)
    index = records_by_user(bench.records)
    for q in bench.questions:
        assert index[q.user_id] == {"preference": index[q.user_id]["preference"]}
        assert index[q.user_id]["preference"].text == q.attributes["preference"]
    missing = next(q for q in bench.questions if q.id == "travel_hotel/52")
    assert missing.attributes["explanation"] is None  # the one upstream item without one


def test_choice_records_are_request_options_and_pick() -> None:
    bench = load_prefeval_benchmark(_prefeval_dir(), form="choice", inter_turns=0)
    hotel = records_by_user(bench.records)["prefeval/travel_hotel/0"]
    assert [r.metadata["role"] for r in hotel.values()] == ["user", "assistant", "user"]
    assert hotel["preference-0"].text == "What are some good hotels to stay at in Las Vegas?"
    assert "1. The Palms Casino Resort" in hotel["preference-1"].text
    assert hotel["preference-2"].text.startswith("I think I'll go with The Westin")


def test_persona_records_are_the_user_messages() -> None:
    bench = load_prefeval_benchmark(_prefeval_dir(), form="persona", inter_turns=0)
    hotel = records_by_user(bench.records)["prefeval/travel_hotel/0"]
    raw = json.loads(
        (
            _prefeval_dir() / "benchmark_dataset/implicit_preference/persona-driven/travel_hotel.json"
        ).read_text("utf-8")
    )
    assert [r.text for r in hotel.values()] == [turn["user"] for turn in raw[0]["conversation"].values()]
    assert {r.metadata["role"] for r in hotel.values()} == {"user"}


@pytest.mark.parametrize("inter_turns", [0, 5, 316])
def test_inter_turns_respected(inter_turns: int) -> None:
    bench = load_prefeval_benchmark(
        _prefeval_dir() / "benchmark_dataset", form="persona", inter_turns=inter_turns
    )
    assert len(bench.questions) == ITEMS
    expected = _first_user_messages(inter_turns)
    gold = {q.user_id: len(q.relevant) for q in bench.questions}
    for user, own in records_by_user(bench.records).items():
        assert [own[f"inter-{n}"].text for n in range(inter_turns)] == expected, user
        assert len(own) == inter_turns + gold[user]
    assert bench.name == "prefeval-persona"


def test_replies_keep_each_distractor_chat_whole_and_in_order() -> None:
    bench = load_prefeval_benchmark(_prefeval_dir(), inter_turns=20, replies=True)
    chats = json.loads((PREFEVAL / "benchmark_dataset" / "filtered_inter_turns.json").read_text("utf-8"))
    messages = [(i, m["role"], m["content"]) for i, chat in enumerate(chats) for m in chat["conversation"]]
    twentieth = [n for n, (_, role, _) in enumerate(messages) if role == "user"][19]
    expected = [(f"inter-chat-{i}", role, text) for i, role, text in messages[: twentieth + 2]]
    own = list(records_by_user(bench.records)["prefeval/entertain_games/0"].values())
    assert own[0].id == "preference" and own[0].metadata == {"role": "user", "session": "preference-chat"}
    assert [(r.metadata["session"], r.metadata["role"], r.text) for r in own[1:]] == expected
    assert [r.id for r in own[1:3]] == ["inter-0", "inter-0-reply"] and own[-1].id == "inter-19-reply"


def test_replies_follow_their_turn_and_a_turn_may_have_none(tmp_path: Path) -> None:
    bench = load_prefeval_benchmark(_dataset(tmp_path), form="persona", inter_turns=3, replies=True)
    own = records_by_user(bench.records)["prefeval/drinks/0"]
    assert [(k, r.metadata["role"], r.metadata["session"]) for k, r in own.items()] == [
        ("preference-0", "user", "preference-chat"),
        ("preference-2", "user", "preference-chat"),
        ("inter-0", "user", "inter-chat-0"),
        ("inter-0-reply", "assistant", "inter-chat-0"),
        ("inter-2", "user", "inter-chat-1"),  # the second chat's turns have no reply; inter-1 is blank
    ]
    assert own["inter-0-reply"].text == "a0"
    assert {q.id: dict(q.relevant) for q in bench.questions}["drinks/0"] == {
        "preference-0": 1,
        "preference-2": 1,
    }


def test_more_inter_turns_than_the_file_has() -> None:
    with pytest.raises(IngestError, match=r"filtered_inter_turns\.json.*only 316 user messages"):
        load_prefeval_benchmark(_prefeval_dir(), inter_turns=317)


# --- malformed inputs ------------------------------------------------------------------------------


def _item(question: str = "Q?", preference: str = "I like tea.") -> dict[str, Any]:
    return {
        "preference": preference,
        "question": question,
        "explanation": "why",
        "conversation": {
            "0": {"user": "Hello there.", "assistant": "Hi."},
            "1": {"user": "  ", "assistant": "Blank user turn."},
            "2": {"user": f"By the way, {preference}", "assistant": "Noted."},
        },
    }


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")


def _dataset(
    tmp_path: Path, items: list[dict[str, Any]] | None = None, mcq_items: list[dict[str, Any]] | None = None
) -> Path:
    """A one-topic (``drinks``) dataset under tmp_path/benchmark_dataset; returns tmp_path."""
    items = [_item("Q0?"), _item("Q1?")] if items is None else items
    mcq_items = (
        [{"question": i["question"], "classification_task_options": ["a", "b", "c", "d"]} for i in items]
        if mcq_items is None
        else mcq_items
    )
    root = tmp_path / "benchmark_dataset"
    _write(root / "explicit_preference" / "drinks.json", items)
    _write(root / "implicit_preference" / "persona-driven" / "drinks.json", items)
    _write(root / "mcq_options" / "drinks.json", mcq_items)
    blank_second = [{"role": "user", "content": "" if n == 1 else f"u{n}"} for n in range(1, 21)]
    chats = [
        {"conversation": [{"role": "user", "content": "u0"}, {"role": "assistant", "content": "a0"}]},
        {"conversation": blank_second},
    ]
    _write(root / "filtered_inter_turns.json", chats)
    return tmp_path


def test_small_dataset_loads(tmp_path: Path) -> None:
    bench = load_prefeval_benchmark(_dataset(tmp_path), form="persona", inter_turns=3)
    assert [q.id for q in bench.questions] == ["drinks/0", "drinks/1"]
    assert dict(bench.questions[0].relevant) == {"preference-0": 1, "preference-2": 1}  # turn 1 is blank
    assert bench.questions[0].choices == ("a", "b", "c", "d")
    own = records_by_user(bench.records)["prefeval/drinks/0"]
    assert {k: r.text for k, r in own.items() if k.startswith("inter-")} == {"inter-0": "u0", "inter-2": "u2"}


def test_blank_explicit_preference_is_skipped(tmp_path: Path) -> None:
    bench = load_prefeval_benchmark(_dataset(tmp_path, [_item("Q0?"), _item("Q1?", " ")]), inter_turns=0)
    assert [q.id for q in bench.questions] == ["drinks/0"]
    assert [s.question_id for s in bench.skipped] == ["drinks/1"]
    assert bench.users() == ["prefeval/drinks/0"]


def test_wrong_layout(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="expected benchmark_dataset/"):
        load_prefeval_benchmark(tmp_path)


def test_missing_form_folder(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match="choice-based: PrefEval form folder not found"):
        load_prefeval_benchmark(_dataset(tmp_path), form="choice")


def test_missing_mcq_file(tmp_path: Path) -> None:
    _dataset(tmp_path)
    (tmp_path / "benchmark_dataset" / "mcq_options" / "drinks.json").unlink()
    with pytest.raises(IngestError, match=r"mcq_options/drinks\.json: file not found"):
        load_prefeval_benchmark(tmp_path)


def test_mismatched_item_counts(tmp_path: Path) -> None:
    mcq = [{"question": "Q0?", "classification_task_options": ["a", "b", "c", "d"]}]
    with pytest.raises(IngestError, match="topic 'drinks': 1 MCQ items but 2 in"):
        load_prefeval_benchmark(_dataset(tmp_path, mcq_items=mcq))


def test_mismatched_question(tmp_path: Path) -> None:
    mcq = [{"question": q, "classification_task_options": ["a", "b", "c", "d"]} for q in ("Q0?", "Other?")]
    with pytest.raises(IngestError, match="topic 'drinks', item 1: question differs"):
        load_prefeval_benchmark(_dataset(tmp_path, mcq_items=mcq))


def test_wrong_number_of_options(tmp_path: Path) -> None:
    mcq = [{"question": q, "classification_task_options": ["a", "b"]} for q in ("Q0?", "Q1?")]
    with pytest.raises(IngestError, match="item 0: expected 4 classification_task_options, got 2"):
        load_prefeval_benchmark(_dataset(tmp_path, mcq_items=mcq))


def test_malformed_item(tmp_path: Path) -> None:
    broken = _item("Q1?")
    del broken["conversation"]["0"]["user"]
    with pytest.raises(
        IngestError, match=r"persona-driven/drinks\.json: .*item 1, conversation turn '0'.*'user'"
    ):
        load_prefeval_benchmark(_dataset(tmp_path, [_item("Q0?"), broken]), form="persona")


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown PrefEval form"):
        load_prefeval_benchmark(_dataset(tmp_path), form="mcq")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="inter_turns must be >= 0"):
        load_prefeval_benchmark(tmp_path, inter_turns=-1)
