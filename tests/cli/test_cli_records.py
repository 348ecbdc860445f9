"""``personamem records|get|update|delete`` on a real store, through the CLI's entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from personamem import PersonaMem, SentenceEncoder
from personamem.cli import main


@pytest.fixture
def store(tmp_path: Path, encoder: SentenceEncoder) -> list[str]:
    with PersonaMem.open(tmp_path / "s", encoder=encoder) as mem:
        mem.add("ana", "I keep bees on the roof.", id="bees", category="hobby")
        mem.add("ana", "I drive a red car.", id="car")
        mem.add("bo", "I collect stamps.", id="stamps")
    return ["--store", str(tmp_path / "s")]


def test_records_and_get_show_one_users_records(store: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*store, "records", "--user", "ana"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "bees  note [hobby]  I keep bees on the roof.",
        "car  note  I drive a red car.",
    ]
    assert main([*store, "get", "car", "--user", "ana", "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert (found["id"], found["text"], found["duplicate_of"]) == ("car", "I drive a red car.", None)
    assert main([*store, "get", "stamps", "--user", "ana"]) == 1  # another user's record
    assert "user ana has no record stamps" in capsys.readouterr().err


def test_update_changes_fields_and_the_history_says_so(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                *store,
                "update",
                "car",
                "--user",
                "ana",
                "--text",
                "I drive a blue car.",
                "--metadata",
                '{"source": "chat"}',
            ]
        )
        == 0
    )
    assert "updated car  note  I drive a blue car." in capsys.readouterr().out
    assert main([*store, "get", "car", "--user", "ana", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metadata"] == {"source": "chat"}
    assert main([*store, "history", "car", "--user", "ana", "--json"]) == 0
    assert [e["event"] for e in json.loads(capsys.readouterr().out)["events"]] == ["added", "updated"]
    assert main([*store, "update", "car", "--user", "ana"]) == 2  # nothing to change
    assert main([*store, "update", "car", "--user", "ana", "--metadata", "{bad"]) == 2
    assert "--metadata" in capsys.readouterr().err


def test_delete_erases_and_says_what_was_missing(
    store: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*store, "delete", "bees", "nope", "--user", "ana"]) == 0
    captured = capsys.readouterr()
    assert "deleted 1 record(s): bees" in captured.out and "user ana has no record nope" in captured.err
    assert main([*store, "delete", "bees", "--user", "ana"]) == 1
    assert main([*store, "records", "--user", "ana"]) == 0
    assert capsys.readouterr().out.splitlines() == ["car  note  I drive a red car."]
