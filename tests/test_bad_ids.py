"""Ids of the wrong type, and texts SQL cannot store, fail before anything is written or read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import PersonaMem
from personamem.cli import main
from personamem.errors import InvalidInputError, InvalidRecordError

WRONG_USERS = [b"ana", 123, None, "", "  "]


@pytest.fixture
def ana(mem: PersonaMem) -> PersonaMem:
    mem.add("ana", "I'm vegan.", id="r1")
    return mem


@pytest.mark.parametrize("user", WRONG_USERS)
def test_a_user_id_that_is_not_a_string_is_refused_everywhere(ana: PersonaMem, user: object) -> None:
    calls = {
        "add": lambda: ana.add(user, "I eat meat.", id="r1"),  # type: ignore[arg-type]
        "add_many": lambda: ana.add_many([{"text": "x"}], user_id=user),  # type: ignore[arg-type]
        "search": lambda: ana.search(user, "food"),  # type: ignore[arg-type]
        "context": lambda: ana.context(user, "food"),  # type: ignore[arg-type]
        "records": lambda: ana.records(user),  # type: ignore[arg-type]
        "get": lambda: ana.get(user, "r1"),  # type: ignore[arg-type]
        "forget": lambda: ana.forget(user),  # type: ignore[arg-type]
    }
    if user is not None:  # count(None) counts every user's records
        calls["count"] = lambda: ana.count(user)  # type: ignore[arg-type]
    for name, call in calls.items():
        with pytest.raises(InvalidInputError, match="user_id"):
            call()
        assert ana.get("ana", "r1") is not None and ana.get("ana", "r1").text == "I'm vegan.", name  # type: ignore[union-attr]


def test_a_query_or_record_id_of_the_wrong_type_is_refused(ana: PersonaMem) -> None:
    with pytest.raises(InvalidInputError, match="query must be a string"):
        ana.search("ana", None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="record_id must be a string"):
        ana.get("ana", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError, match="id: Input should be a valid string"):
        ana.add("ana", "text", id=7)


def test_a_lone_surrogate_in_the_last_chunk_leaves_nothing_written(ana: PersonaMem) -> None:
    batch = [{"id": f"n{i}", "text": f"note {i}"} for i in range(299)]
    batch.append({"id": "n299", "text": "bad \ud800 text"})
    with pytest.raises(
        InvalidRecordError, match=r"record 299: text: holds a character that is not valid UTF-8"
    ):
        ana.add_many(batch, user_id="ana")
    assert ana.count("ana") == 1  # 256-record chunks: before, the first chunk was written
    for field in ({"id": "\udc00"}, {"metadata": {"k": "\ud800"}}, {"category": "\ud800"}):
        with pytest.raises(InvalidRecordError, match="not valid UTF-8"):
            ana.add("ana", "ok", **field)


def test_ingest_of_a_file_with_a_lone_surrogate_names_the_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], encoder: object
) -> None:
    lines = [json.dumps({"id": f"n{i}", "text": f"note {i}"}) for i in range(299)]
    lines.append('{"id": "n299", "text": "bad \\ud800 text"}')  # a valid JSON escape
    path = tmp_path / "notes.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    store = ["--store", str(tmp_path / "store")]
    assert main([*store, "ingest", str(path), "--user", "ana"]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"{path}:300: text: holds a character that is not valid UTF-8" in err and "Traceback" not in err
    assert main([*store, "users"]) == 0 and "ana" not in capsys.readouterr().out


def test_ingest_counts_records_not_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], encoder: object
) -> None:
    path = tmp_path / "twice.jsonl"
    path.write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n')
    assert main(["--store", str(tmp_path / "store"), "ingest", str(path), "--user", "ana"]) == 0
    assert "stored 2 record(s) for 1 user(s)" in capsys.readouterr().out


def test_adapters_refuse_a_user_id_that_is_not_a_string(ana: PersonaMem) -> None:
    from personamem.adapters import langchain, llamaindex

    for build in (
        lambda: langchain.PersonaMemRetriever(memory=ana, user_id=b"ana"),
        lambda: langchain.PersonaMemChatMessageHistory(ana, b"ana", "s1"),  # type: ignore[arg-type]
        lambda: llamaindex.PersonaMemRetriever(ana, b"ana"),  # type: ignore[arg-type]
        lambda: llamaindex.PersonaMemMemoryBlock(memory=ana, user_id=b"ana"),
    ):
        with pytest.raises(ValueError, match="user_id"):  # pydantic's ValidationError or InvalidInputError
            build()
